"""The maximum-knowledge intruder of Domingo-Ferrer & Muralidhar, Section 5.

The intruder knows the whole original data set X and the release Y (Definition 3). He reverse-maps Y
to Z (Algorithm 1), which removes the noise and leaves a pure permutation of X, then:

1. *Linkage* (Section 5.1, Table 5): links every original record x to the records of Z at minimal
   permutation distance from x (all ties). Since Z is a permutation of X, the closest value y*_j is
   x_j itself.
2. *Verification* (Section 5.2, Tables 6-7): builds random records T, each made of one value of
   each original attribute, and computes their permutation distance to Z. If original records match
   at distances that random records also reach easily, the linkages may well be chance. All n^m
   records are used when n^m is at most a cap (exact, Table 6); otherwise N are drawn with a seed.

Beyond the paper's "future work" this module reports the Hellinger distance between the original and
the random distance distributions, and for each linkage an empirical p-value: the probability that a
random record matches at that distance or closer. With an exhaustive T this is the exact fraction;
with a sample of N it is ``(1 + count) / (1 + N)`` so that a sample never claims probability 0.
When the true mapping is known (the data protector), linkages are scored as in `coutil.audit.linkage`
(1/t credit for a tie of t containing the true record, and the count of unique correct linkages).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from coutil.audit.linkage import LinkageScore, resolve_true_mapping, score_linkages
from coutil.audit.permutation import reverse_map
from coutil.audit.ranks import RankIndex
from coutil.errors import InputError

FloatMatrix = NDArray[np.float64]
IndexArray = NDArray[np.intp]
IntArray = NDArray[np.int64]
#: Callback ``(done, total)`` for progress displays.
ProgressCallback = Callable[[int, int], None]
RandomSpec = Literal["all", "auto"] | int

#: Largest n^m enumerated exhaustively (Table 6 style); beyond it random records are sampled.
EXHAUSTIVE_CAP = 2_000_000
#: Random records drawn when n^m exceeds the cap and no count is given.
DEFAULT_RANDOM_SAMPLE = 100_000
#: Random records processed per nearest-neighbour batch (bounds memory, paces the progress bar).
CHUNK = 50_000


@dataclass(frozen=True)
class RandomRecordDistribution:
    """Permutation distances of random records: ``counts[d]`` records matched at distance d."""

    counts: IntArray
    total: int
    #: True when all n^m records were enumerated, False when ``total`` were sampled.
    exhaustive: bool
    seed: int | None


@dataclass(frozen=True)
class IntruderAttack:
    """Everything the maximum-knowledge intruder computes (and the data protector can score)."""

    #: Z, the reverse-mapped release (row i of Z is the reverse-mapped row i of Y).
    reverse_mapped: FloatMatrix
    #: For original record i, the rows of Z (0-based, ascending) at minimal permutation distance.
    matches: tuple[IndexArray, ...]
    distances: IntArray
    #: ``original_counts[d]``: original records linked at permutation distance d.
    original_counts: IntArray
    random: RandomRecordDistribution
    #: Hellinger distance in [0, 1] between the original and random distance distributions.
    hellinger: float
    #: Per original record: probability that a random record matches at its distance or closer.
    p_values: FloatMatrix
    #: Correct-linkage figures when the true mapping was given, else None.
    score: LinkageScore | None

    def original_distribution(self) -> dict[int, float]:
        """Frequency of each distance 0..D among the original records (D covers both distributions)."""
        return _frequencies(self.original_counts, self._support())

    def random_distribution(self) -> dict[int, float]:
        """Frequency of each distance 0..D among the random records."""
        return _frequencies(self.random.counts, self._support())

    def _support(self) -> int:
        return max(self.original_counts.size, self.random.counts.size)

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as printed by ``coutil attack --json`` (the documented keys; 1-based rows of Z).

        ``linkages``: record, matches (ascending), distance and p_value; ``original_distribution`` and
        ``random_distribution``: distance (a string) -> frequency; ``hellinger``; ``random_records``;
        with a true mapping, the correct-linkage figures.
        """
        distances = self.distances.tolist()
        p_values = self.p_values.tolist()
        out: dict[str, Any] = {
            "method": "intruder",
            "linkages": [
                {
                    "record": i + 1,
                    "matches": (np.asarray(rows, dtype=np.int64) + 1).tolist(),
                    "distance": distance,
                    "p_value": p_value,
                }
                for i, (rows, distance, p_value) in enumerate(zip(self.matches, distances, p_values, strict=True))
            ],
            "original_distribution": {str(d): f for d, f in self.original_distribution().items()},
            "random_distribution": {str(d): f for d, f in self.random_distribution().items()},
            "hellinger": self.hellinger,
            "random_records": {
                "count": self.random.total,
                "exhaustive": self.random.exhaustive,
                "seed": self.random.seed,
            },
        }
        if self.score is not None:
            out.update(self.score.to_dict())
        return out


def _frequencies(counts: IntArray, size: int) -> dict[int, float]:
    total = int(counts.sum())
    padded = np.zeros(size, dtype=np.int64)
    padded[: counts.size] = counts
    return {d: (float(c) / total if total else 0.0) for d, c in enumerate(padded)}


def hellinger_distance(p_counts: ArrayLike, q_counts: ArrayLike) -> float:
    """Hellinger distance ``sqrt(1 - sum_d sqrt(p_d q_d))`` between two histograms (normalised here).

    0 for identical distributions, 1 for disjoint supports.
    """
    p = np.asarray(p_counts, dtype=np.float64)
    q = np.asarray(q_counts, dtype=np.float64)
    size = max(p.size, q.size)
    p = np.pad(p, (0, size - p.size))
    q = np.pad(q, (0, size - q.size))
    if p.sum() <= 0 or q.sum() <= 0:
        raise InputError("the Hellinger distance needs two non-empty distributions")
    bhattacharyya = float(np.sum(np.sqrt((p / p.sum()) * (q / q.sum()))))
    # Rounding can push the coefficient a hair above 1.
    return float(np.sqrt(max(0.0, 1.0 - bhattacharyya)))


def empirical_p_values(distances: ArrayLike, random: RandomRecordDistribution) -> FloatMatrix:
    """P(random record's distance <= d) for each d (see the module docstring for the sampled case)."""
    d = np.asarray(distances, dtype=np.int64)
    cumulative = np.cumsum(random.counts)
    at_or_below = np.where(
        d >= cumulative.size, random.total, cumulative[np.clip(d, 0, max(cumulative.size - 1, 0))]
    )
    at_or_below = np.where(d < 0, 0, at_or_below)
    if random.exhaustive:
        return np.asarray(at_or_below / random.total, dtype=np.float64)
    return np.asarray((1.0 + at_or_below) / (1.0 + random.total), dtype=np.float64)


def link_records(
    original: ArrayLike, reverse_mapped: ArrayLike
) -> tuple[tuple[IndexArray, ...], IntArray, RankIndex, IntArray, IntArray]:
    """Table 5: link each original record to the rows of Z at minimal permutation distance.

    Returns (matches, distances, the rank index of Z, star_lo, star_hi of the original records); the
    last three are reused to build random records without recomputing anything.
    """
    x = np.asarray(original, dtype=np.float64)
    index = RankIndex.build(reverse_mapped)
    star_lo, star_hi = index.star(x)
    found = index.nearest(star_lo, star_hi, want_ties=True)
    matches = tuple(np.asarray(rows, dtype=np.intp) for rows in found.matches)
    return matches, np.asarray(found.distance, dtype=np.int64), index, star_lo, star_hi


def random_record_count(n: int, m: int) -> int:
    """n^m, the number of records made of one value of each of m attributes with n values each."""
    count: int = int(n) ** int(m)
    return count


def random_record_distances(
    index: RankIndex,
    star_lo: ArrayLike,
    star_hi: ArrayLike,
    *,
    random: RandomSpec = "auto",
    seed: int = 0,
    cap: int = EXHAUSTIVE_CAP,
    on_progress: ProgressCallback | None = None,
) -> RandomRecordDistribution:
    """Distances of random records built from one original value per attribute (Tables 6-7).

    ``star_lo/star_hi`` (n, m) are the star rank intervals of the original values: a random record
    taking the value of original record i_j in attribute j has star interval ``star[i_j, j]``, so no
    value lookup is repeated. ``random``: ``"all"`` enumerates the n^m records (an error beyond
    ``cap``), an int N samples N records with ``seed``, ``"auto"`` enumerates when n^m <= cap and
    otherwise samples `DEFAULT_RANDOM_SAMPLE`.
    """
    lo = np.asarray(star_lo, dtype=np.int64)
    hi = np.asarray(star_hi, dtype=np.int64)
    n, m = lo.shape
    possible = random_record_count(n, m)
    if isinstance(random, str):
        if random not in ("all", "auto"):
            raise InputError(f"bad random-record setting {random!r}: expected 'all', 'auto' or a count")
        if possible <= cap:
            exhaustive, total = True, possible
        elif random == "all":
            raise InputError(
                f"{n}^{m} = {possible:.3g} random records exceed the exhaustive limit of {cap}; "
                "give a sample size instead"
            )
        else:
            exhaustive, total = False, DEFAULT_RANDOM_SAMPLE
    else:
        if isinstance(random, bool) or int(random) < 1:
            raise InputError(f"bad number of random records {random!r}: expected a positive integer")
        exhaustive, total = False, int(random)
    rng = None if exhaustive else np.random.default_rng(seed)
    columns = np.arange(m)
    counts = np.zeros(1, dtype=np.int64)
    done = 0
    while done < total:
        size = min(CHUNK, total - done)
        if exhaustive:
            # Digits of the flat index in base n: the original record whose value each attribute takes.
            flat = np.arange(done, done + size, dtype=np.int64)
            picks = np.empty((size, m), dtype=np.int64)
            for j in range(m - 1, -1, -1):
                picks[:, j] = flat % n
                flat //= n
        else:
            assert rng is not None
            picks = rng.integers(0, n, size=(size, m))
        found = index.nearest(lo[picks, columns], hi[picks, columns], want_ties=False)
        batch = np.bincount(np.asarray(found.distance, dtype=np.int64))
        if batch.size > counts.size:
            counts = np.pad(counts, (0, batch.size - counts.size))
        counts[: batch.size] += batch
        done += size
        if on_progress is not None:
            on_progress(done, total)
    return RandomRecordDistribution(
        counts=counts, total=total, exhaustive=exhaustive, seed=None if exhaustive else seed
    )


def maximum_knowledge_attack(
    original: ArrayLike,
    release: ArrayLike,
    *,
    random: RandomSpec = "auto",
    seed: int = 0,
    cap: int = EXHAUSTIVE_CAP,
    true_mapping: ArrayLike | str | None = None,
    reverse_mapped: ArrayLike | None = None,
    on_progress: ProgressCallback | None = None,
) -> IntruderAttack:
    """Run the whole Section 5 attack: reverse-map, link, verify with random records, score.

    ``seed`` drives both the tie-breaking of the reverse mapping and the sampling of random records.
    ``reverse_mapped`` skips Algorithm 1 when Z is already known (e.g. Z.csv of the running example).
    ``true_mapping``: None, ``"identity"`` (row i of Y is the masked row i of X) or 0-based rows of Y.
    """
    x = np.asarray(original, dtype=np.float64)
    y = np.asarray(release, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise InputError(f"original {x.shape} and release {y.shape} must be 2-D with the same attributes")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise InputError("empty original data set")
    z = reverse_map(x, y, seed=seed) if reverse_mapped is None else np.asarray(reverse_mapped, np.float64)
    if z.shape != y.shape:
        raise InputError(f"the reverse-mapped release has shape {z.shape}, expected {y.shape}")
    true_rows = resolve_true_mapping(true_mapping, x.shape[0], z.shape[0])
    matches, distances, index, star_lo, star_hi = link_records(x, z)
    random_dist = random_record_distances(
        index, star_lo, star_hi, random=random, seed=seed, cap=cap, on_progress=on_progress
    )
    original_counts = np.bincount(distances).astype(np.int64)
    return IntruderAttack(
        reverse_mapped=z,
        matches=matches,
        distances=distances,
        original_counts=original_counts,
        random=random_dist,
        hellinger=hellinger_distance(original_counts, random_dist.counts),
        p_values=empirical_p_values(distances, random_dist),
        score=score_linkages(matches, true_rows) if true_rows is not None else None,
    )
