"""Reverse mapping (Algorithm 1) and the permutation distance of original records (Algorithm 2).

Domingo-Ferrer & Muralidhar, *New directions in anonymization*, Sections 2 and 4, and the vector form
of d with a record mapping f from Domingo-Ferrer's slides. The rank conventions are those of
`coutil.audit.ranks` (1-based ranks, tie blocks as rank intervals).

Reverse mapping replaces each release value y_ij by the value of the original attribute X^j whose rank
equals the rank of y_ij in Y^j. The paper breaks ties in Y "randomly"; here the order among tied
release values is a random permutation drawn, for each attribute in turn, from
``numpy.random.Generator(PCG64(seed))`` (one permutation of n per attribute, drawn whether or not
the attribute has ties, so the same seed always consumes the generator the same way). Ties in X need
no breaking: tied original values are equal, whatever their order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from coutil.audit.ranks import IntMatrix, MatchLists, RankIndex
from coutil.errors import InputError

FloatMatrix = NDArray[np.float64]
IndexArray = NDArray[np.intp]


def _finite_matrix(values: ArrayLike, what: str) -> FloatMatrix:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D table (records x attributes), got shape {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise InputError(f"{what} is empty (shape {array.shape})")
    if not np.all(np.isfinite(array)):
        raise InputError(f"{what} contains missing or infinite values: ranks need finite numbers")
    return array


def reverse_map(original: ArrayLike, release: ArrayLike, *, seed: int) -> FloatMatrix:
    """Algorithm 1: Z with z_ij = the value of X^j whose rank equals the rank of y_ij in Y^j.

    ``original`` X and ``release`` Y must have the same shape (n records x m attributes). Ties among
    the values of Y^j are broken by a random order seeded with ``seed`` (module docstring). Each column
    of Z is a permutation of the corresponding column of X with the ranks of Y.
    """
    x = _finite_matrix(original, "the original data set")
    y = _finite_matrix(release, "the release")
    if x.shape != y.shape:
        raise InputError(
            f"reverse mapping needs the original and the release to have the same shape: {x.shape} vs {y.shape}"
        )
    rng = np.random.Generator(np.random.PCG64(seed))
    n, m = y.shape
    z = np.empty_like(y)
    for j in range(m):
        tie_order = rng.permutation(n)
        # Rows of Y sorted by value, tied values in the random order: position = rank - 1.
        by_rank = np.lexsort((tie_order, y[:, j]))
        z[by_rank, j] = np.sort(x[:, j])
    return z


@dataclass(frozen=True)
class PermutationDistances:
    """Algorithm 2 for a set of original records against one release (0-based rows)."""

    #: (r x m) 1-based rank interval of y*_j, the release value closest to x_j.
    star_lo: IntMatrix
    star_hi: IntMatrix
    #: Permutation distance of each record.
    distance: IntMatrix
    #: Release rows at that distance, ascending (all ties).
    closest: MatchLists


def permutation_distances(
    original: ArrayLike, release: ArrayLike, *, index: RankIndex | None = None
) -> PermutationDistances:
    """Algorithm 2 for every record of ``original`` (r x m) against ``release`` (n x m).

    Pass ``index`` (built on the release) to reuse it across calls.
    """
    x = _finite_matrix(original, "the original records")
    rank_index = RankIndex.build(release) if index is None else index
    if x.shape[1] != rank_index.m:
        raise InputError(f"the original records have {x.shape[1]} attributes but the release has {rank_index.m}")
    star_lo, star_hi = rank_index.star(x)
    found = rank_index.nearest(star_lo, star_hi, want_ties=True)
    return PermutationDistances(star_lo, star_hi, found.distance, found.matches)


def distance_vector(
    original: ArrayLike, release: ArrayLike, mapping: ArrayLike, *, index: RankIndex | None = None
) -> IntMatrix:
    """The vector d of (d, v, f)-permuted privacy: per record and attribute, |rank(y*_j) - rank(f(x)_j)|.

    ``mapping[i]`` is the 0-based release row f(x_i) of original record i (the data protector's
    record mapping); with tied values the deviation is the gap between the two rank intervals.
    Returns an (r x m) int64 array.
    """
    x = _finite_matrix(original, "the original records")
    rank_index = RankIndex.build(release) if index is None else index
    if x.shape[1] != rank_index.m:
        raise InputError(f"the original records have {x.shape[1]} attributes but the release has {rank_index.m}")
    star_lo, star_hi = rank_index.star(x)
    return rank_index.rank_deviations(star_lo, star_hi, np.asarray(mapping))


def closest_record_mapping(
    original: ArrayLike, release: ArrayLike, *, seed: int | None = None, index: RankIndex | None = None
) -> IndexArray:
    """f(x) = the closest release record (minimal permutation distance), one row per original record.

    Among tied closest records the lowest row is taken, or, with ``seed``, one drawn uniformly from
    ``Generator(PCG64(seed))``. This is the mapping a subject, who does not know f, can use.
    """
    found = permutation_distances(original, release, index=index).closest
    if seed is None:
        return np.asarray(found.flat[found.offsets[:-1]], dtype=np.intp)
    rng = np.random.Generator(np.random.PCG64(seed))
    counts = found.counts()
    pick = np.floor(rng.random(counts.size) * counts).astype(np.intp)
    return np.asarray(found.flat[found.offsets[:-1] + pick], dtype=np.intp)


def closest_distance_vector(
    original: ArrayLike, release: ArrayLike, *, seed: int | None = None
) -> tuple[IndexArray, IntMatrix]:
    """(f, d) with f(x) the closest release record (`closest_record_mapping`) and d its rank deviations.

    The maximum of each row of d is the record's permutation distance.
    """
    index = RankIndex.build(release)
    mapping = closest_record_mapping(original, release, seed=seed, index=index)
    return mapping, distance_vector(original, release, mapping, index=index)
