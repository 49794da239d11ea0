"""Classical record-linkage attacks, for comparison with the maximum-knowledge intruder.

Three attacks of the worst-case disclosure-risk literature (Torra, *On machine learning for data
privacy*, slides 10-30 and 41-63), each returning a frozen result with the linkages and, when the true
mapping is known (the data protector's view), correct-linkage rates:

- `distance_linkage`: distance-based record linkage (DBRL). Each original record is linked to the
  release record(s) at minimal distance, all exact ties kept. ``metric="euclidean"`` works on z-scores,
  each file standardised by its own column means and population standard deviations (the slides'
  ``diff_i(a, b) = ((a_i - mean(a_i))/sd(a_i) - (b_i - mean(b_i))/sd(b_i))^2``).
  ``metric="mahalanobis"`` uses ``(a - b)' S^-1 (a - b)`` with Torra's worst-case
  ``S = Var(X) + Var(Y) - 2 Cov(X, Y)`` when the true mapping aligns the files, else
  ``S = Var(X) + Var(Y)`` (the cross-covariance cannot be estimated without the alignment).
- `global_linkage`: a one-to-one assignment minimising the total distance
  (`scipy.optimize.linear_sum_assignment`); it needs the full distance matrix, so n is capped.
- `rank_swap_intersection_attack`: the transparency attack on rank swapping with parameter p: the
  masked version of x lies in the intersection over attributes j of B_j(x), the masked records whose
  value rank is within the swap window of x's rank.

Scoring convention (shared with the intruder module): a linkage with t candidates that contains the
true record counts 1/t; ``unique_correct`` counts linkages with a single candidate that is correct.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.optimize import linear_sum_assignment
from scipy.spatial import cKDTree
from scipy.spatial.distance import cdist

from coutil.errors import InputError
from coutil.sdc.stats import zscore

FloatMatrix = NDArray[np.float64]
IndexArray = NDArray[np.intp]
Metric = Literal["euclidean", "mahalanobis"]

#: Global (one-to-one) linkage builds an n x n distance matrix: beyond this many records it is refused.
GLOBAL_LINKAGE_MAX_RECORDS = 5_000
#: Relative tolerance under which two distances count as a tie (floating-point noise, not real gaps).
TIE_RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LinkageScore:
    """Correct-linkage figures of a set of linkages against the true mapping."""

    #: Mean credit per original record: 1/t when the t candidates contain the true record, else 0.
    correct_rate: float
    #: Number of original records linked to exactly one release record, the true one.
    unique_correct: int
    #: Number of original records linked to several release records.
    multiple: int

    def to_dict(self) -> dict[str, Any]:
        """The JSON keys shared by every ``coutil attack`` method."""
        return {
            "correct_linkage_rate": self.correct_rate,
            "unique_correct": self.unique_correct,
            "multiple_matches": self.multiple,
        }


@dataclass(frozen=True)
class LinkageResult:
    """Linkages of an attack: for original record i, ``matches[i]`` (0-based release rows, ascending)."""

    method: str
    matches: tuple[IndexArray, ...]
    #: Distance of each original record to its linked record(s) (in the attack's own metric).
    distances: FloatMatrix
    #: None when the true mapping was not given.
    score: LinkageScore | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as printed by ``coutil attack --method distance|global --json`` (1-based rows)."""
        distances = self.distances.tolist()
        out: dict[str, Any] = {
            "method": self.method,
            "linkages": [
                {
                    "record": i + 1,
                    "matches": (np.asarray(rows, dtype=np.int64) + 1).tolist(),
                    # An original record left without a partner by the one-to-one assignment: null.
                    "distance": None if math.isnan(distance) else distance,
                }
                for i, (rows, distance) in enumerate(zip(self.matches, distances, strict=True))
            ],
        }
        if self.score is not None:
            out.update(self.score.to_dict())
        return out


@dataclass(frozen=True)
class IntersectionResult:
    """Outcome of the rank-swapping intersection (transparency) attack."""

    #: Swap window in ranks: a value may have moved at most this many ranks.
    window: int
    #: Candidate set (0-based release rows, ascending) of each original record.
    candidates: tuple[IndexArray, ...]
    candidate_sizes: NDArray[np.int64]
    mean_candidate_size: float
    #: Fraction of original records whose candidate set has exactly one record.
    unique_fraction: float
    #: Fraction of original records whose candidate set is a single record and the true one (with mapping).
    unique_correct_fraction: float | None
    #: Fraction of original records whose true record is in the candidate set (1.0 when p is right).
    contains_true_fraction: float | None
    score: LinkageScore | None

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as printed by ``coutil attack --method intersection --json`` (1-based rows)."""
        out: dict[str, Any] = {
            "method": "intersection",
            "window": self.window,
            "linkages": [
                {"record": i + 1, "matches": (np.asarray(rows, dtype=np.int64) + 1).tolist()}
                for i, rows in enumerate(self.candidates)
            ],
            "mean_candidate_size": self.mean_candidate_size,
            "unique_fraction": self.unique_fraction,
        }
        if self.score is not None:
            out["contains_true_fraction"] = self.contains_true_fraction
            out["unique_correct_fraction"] = self.unique_correct_fraction
            out.update(self.score.to_dict())
        return out


def resolve_true_mapping(
    true_mapping: ArrayLike | str | None, n_original: int, n_release: int
) -> IndexArray | None:
    """Validate a true mapping: None, ``"identity"`` (row i of the release is the masked row i) or
    an array whose entry i is the 0-based release row of original record i."""
    if true_mapping is None:
        return None
    if isinstance(true_mapping, str):
        if true_mapping != "identity":
            raise InputError(
                f"unknown true mapping {true_mapping!r}: expected 'identity' or an array of rows"
            )
        if n_original != n_release:
            raise InputError(
                "the identity mapping needs as many release rows as original rows "
                f"({n_release} vs {n_original})"
            )
        return np.arange(n_original, dtype=np.intp)
    rows = np.asarray(true_mapping)
    if rows.shape != (n_original,) or not np.issubdtype(rows.dtype, np.integer):
        raise InputError(
            f"the true mapping must be {n_original} integer release rows, got shape {rows.shape}"
        )
    if rows.size and (rows.min() < 0 or rows.max() >= n_release):
        raise InputError(f"the true mapping refers to a release row outside 0..{n_release - 1}")
    return rows.astype(np.intp)


def score_linkages(matches: Sequence[IndexArray], true_rows: IndexArray) -> LinkageScore:
    """Score linkages against the true rows (1/t credit for a tie of t containing the true record)."""
    credit = 0.0
    unique_correct = 0
    multiple = 0
    for candidates, truth in zip(matches, true_rows, strict=True):
        size = len(candidates)
        if size > 1:
            multiple += 1
        if size and bool(np.any(candidates == truth)):
            credit += 1.0 / size
            if size == 1:
                unique_correct += 1
    rate = credit / len(matches) if len(matches) else 0.0
    return LinkageScore(correct_rate=rate, unique_correct=unique_correct, multiple=multiple)


def _as_matrices(original: ArrayLike, release: ArrayLike) -> tuple[FloatMatrix, FloatMatrix]:
    x = np.asarray(original, dtype=np.float64)
    y = np.asarray(release, dtype=np.float64)
    if x.ndim == 1:
        x = x.reshape(-1, 1)
    if y.ndim == 1:
        y = y.reshape(-1, 1)
    if x.ndim != 2 or y.ndim != 2:
        raise InputError("original and release must be 2-D tables (records x attributes)")
    if x.shape[1] != y.shape[1]:
        raise InputError(f"the original has {x.shape[1]} attributes but the release has {y.shape[1]}")
    if x.shape[0] == 0 or y.shape[0] == 0 or x.shape[1] == 0:
        raise InputError("empty original or release")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise InputError("original and release must contain finite numbers only")
    return x, y


def _whitened(
    x: FloatMatrix, y: FloatMatrix, metric: Metric, true_rows: IndexArray | None
) -> tuple[FloatMatrix, FloatMatrix]:
    """Transform both files so that the attack's metric becomes the plain Euclidean distance."""
    if metric == "euclidean":
        return zscore(x), zscore(y)
    if metric != "mahalanobis":
        raise InputError(f"unknown metric {metric!r}: expected 'euclidean' or 'mahalanobis'")
    m = x.shape[1]
    var_x = np.atleast_2d(np.cov(x, rowvar=False, ddof=0)) if x.shape[0] > 1 else np.zeros((m, m))
    var_y = np.atleast_2d(np.cov(y, rowvar=False, ddof=0)) if y.shape[0] > 1 else np.zeros((m, m))
    scatter = var_x + var_y
    if true_rows is not None and x.shape[0] > 1:
        aligned = y[true_rows]
        cross = ((x - x.mean(axis=0)).T @ (aligned - aligned.mean(axis=0))) / x.shape[0]
        scatter = scatter - cross - cross.T
    # Eigen-decomposition instead of a plain inverse: a (near-)singular S, e.g. a constant or
    # duplicated attribute, just loses that direction instead of blowing up.
    eigenvalues, eigenvectors = np.linalg.eigh((scatter + scatter.T) / 2)
    keep = eigenvalues > max(float(eigenvalues.max(initial=0.0)), 1.0) * 1e-12
    if not np.any(keep):
        return x - x.mean(axis=0), y - y.mean(axis=0)
    transform = eigenvectors[:, keep] / np.sqrt(eigenvalues[keep])
    return np.asarray(x @ transform, dtype=np.float64), np.asarray(y @ transform, dtype=np.float64)


def distance_linkage(
    original: ArrayLike,
    release: ArrayLike,
    *,
    metric: Metric = "euclidean",
    true_mapping: ArrayLike | str | None = None,
) -> LinkageResult:
    """Distance-based record linkage: each original record to its nearest release record(s), ties kept."""
    x, y = _as_matrices(original, release)
    true_rows = resolve_true_mapping(true_mapping, x.shape[0], y.shape[0])
    xs, ys = _whitened(x, y, metric, true_rows)
    tree = cKDTree(ys)
    nearest, _ = tree.query(xs, k=1)
    nearest = np.asarray(nearest, dtype=np.float64)
    # A second, radius query with a hair of slack collects every release record tied at the minimum.
    radii = nearest * (1 + TIE_RELATIVE_TOLERANCE) + 1e-12
    matches = tuple(np.sort(np.asarray(found, dtype=np.intp)) for found in tree.query_ball_point(xs, radii))
    score = score_linkages(matches, true_rows) if true_rows is not None else None
    return LinkageResult(method=f"distance-{metric}", matches=matches, distances=nearest, score=score)


def global_linkage(
    original: ArrayLike,
    release: ArrayLike,
    *,
    metric: Metric = "euclidean",
    true_mapping: ArrayLike | str | None = None,
    max_records: int = GLOBAL_LINKAGE_MAX_RECORDS,
) -> LinkageResult:
    """One-to-one linkage minimising the total distance (Hungarian algorithm on the distance matrix).

    Every original record gets exactly one release record (when the release has at least as many);
    with fewer release rows, the unassigned original records get an empty match and distance NaN.
    """
    x, y = _as_matrices(original, release)
    if max(x.shape[0], y.shape[0]) > max_records:
        raise InputError(
            f"global linkage needs an n x n distance matrix: {max(x.shape[0], y.shape[0])} records exceed "
            f"the limit of {max_records} (sample the data or use distance linkage)"
        )
    true_rows = resolve_true_mapping(true_mapping, x.shape[0], y.shape[0])
    xs, ys = _whitened(x, y, metric, true_rows)
    cost = cdist(xs, ys, metric="euclidean")
    rows, cols = linear_sum_assignment(cost)
    assigned = np.full(x.shape[0], -1, dtype=np.intp)
    assigned[rows] = cols
    matches = tuple(
        np.array([col], dtype=np.intp) if col >= 0 else np.empty(0, dtype=np.intp) for col in assigned
    )
    distances = np.full(x.shape[0], np.nan, dtype=np.float64)
    distances[rows] = cost[rows, cols]
    score = score_linkages(matches, true_rows) if true_rows is not None else None
    return LinkageResult(method=f"global-{metric}", matches=matches, distances=distances, score=score)


def swap_window(p: float, n: int) -> int:
    """Largest rank displacement of rank swapping with parameter p (percent of n records).

    Rank swapping swaps ``a_i`` with ``a_l``, ``l`` in ``[i + 1, min(n, i + p*n/100)]``, so a value
    moves at most ``floor(p*n/100)`` ranks (the tiny epsilon absorbs float error in e.g. 20*10/100).
    """
    if not (math.isfinite(p) and p >= 0):
        raise InputError(f"bad swap parameter p={p}: expected a percentage >= 0")
    return math.floor(p * n / 100 + 1e-9)


def _rank_intervals(sorted_column: FloatMatrix, values: FloatMatrix) -> tuple[IndexArray, IndexArray]:
    """1-based first and last positions [lo, hi] of each value among a sorted column's exact values.

    A value absent from the column (not produced by pure swapping) gets the empty interval where it
    would be inserted (lo = hi + 1), which the window test handles like any other interval.
    """
    lo = np.searchsorted(sorted_column, values, side="left") + 1
    hi = np.searchsorted(sorted_column, values, side="right")
    return lo.astype(np.intp), hi.astype(np.intp)


def unswapped_attributes(original: ArrayLike, release: ArrayLike) -> list[int]:
    """Attributes (0-based) whose sorted values differ between the two files.

    Rank swapping only exchanges values within a column, so each column of a rank-swapped release is
    a permutation of the original's: the intersection attack assumes it. Files with different
    numbers of rows differ in every attribute.
    """
    x, y = _as_matrices(original, release)
    if x.shape != y.shape:
        return list(range(x.shape[1]))
    same = np.all(np.sort(x, axis=0) == np.sort(y, axis=0), axis=0)
    return [int(j) for j in np.flatnonzero(~same)]


def rank_swap_intersection_attack(
    original: ArrayLike,
    release: ArrayLike,
    p: float,
    *,
    window: int | None = None,
    true_mapping: ArrayLike | str | None = None,
) -> IntersectionResult:
    """Transparency attack on rank swapping: intersect, over attributes, the masked records whose
    value rank lies within the swap window of the original value's rank.

    Ranks are positions in the sorted release column (the same multiset as the original column for
    rank swapping). With tied values a value occupies an interval of ranks [lo, hi]; a masked record
    is a candidate for attribute j when the gap between its interval and x_j's is at most the window
    (the same rank-interval convention as the permutation distance). ``window`` overrides the
    window computed from ``p``.
    """
    x, y = _as_matrices(original, release)
    n_release = y.shape[0]
    width = swap_window(p, n_release) if window is None else int(window)
    if width < 0:
        raise InputError(f"bad swap window {width}: expected >= 0 ranks")
    true_rows = resolve_true_mapping(true_mapping, x.shape[0], n_release)
    m = x.shape[1]
    order = np.argsort(y, axis=0, kind="stable")
    sorted_y = np.take_along_axis(y, order, axis=0)
    # Rank interval of every release cell and of every original value, per attribute.
    cell_lo = np.empty_like(order)
    cell_hi = np.empty_like(order)
    x_lo = np.empty(x.shape, dtype=np.intp)
    x_hi = np.empty(x.shape, dtype=np.intp)
    for j in range(m):
        cell_lo[:, j], cell_hi[:, j] = _rank_intervals(sorted_y[:, j], y[:, j])
        x_lo[:, j], x_hi[:, j] = _rank_intervals(sorted_y[:, j], x[:, j])
    # For attribute j, B_j(x) is a contiguous run of the release sorted by j: positions whose tie group
    # intersects [lo - w, hi + w]. Scanning the shortest run and filtering it by the other attributes
    # costs O(run * m) per record instead of O(n * m).
    start = np.clip(x_lo - width, 1, n_release)
    stop = np.clip(x_hi + width, 1, n_release)
    run_length = np.maximum(stop - start + 1, 0)
    candidates: list[IndexArray] = []
    for i in range(x.shape[0]):
        j0 = int(np.argmin(run_length[i]))
        rows = order[start[i, j0] - 1 : stop[i, j0], j0]
        # Extend the run to whole tie groups at both ends (a group straddling the edge is inside).
        first = int(cell_lo[rows[0], j0]) if rows.size else 1
        last = int(cell_hi[rows[-1], j0]) if rows.size else 0
        rows = order[first - 1 : last, j0]
        gap = np.maximum(
            0, np.maximum(cell_lo[rows] - x_hi[i], x_lo[i] - cell_hi[rows])
        )  # (len(rows), m) rank gaps
        inside = np.all(gap <= width, axis=1)
        candidates.append(np.sort(rows[inside]).astype(np.intp))
    sizes = np.array([c.size for c in candidates], dtype=np.int64)
    n_original = x.shape[0]
    unique = sizes == 1
    score: LinkageScore | None = None
    unique_correct_fraction: float | None = None
    contains_fraction: float | None = None
    if true_rows is not None:
        score = score_linkages(candidates, true_rows)
        unique_correct_fraction = score.unique_correct / n_original
        contains = sum(bool(np.any(c == t)) for c, t in zip(candidates, true_rows, strict=True))
        contains_fraction = contains / n_original
    return IntersectionResult(
        window=width,
        candidates=tuple(candidates),
        candidate_sizes=sizes,
        mean_candidate_size=float(sizes.mean()),
        unique_fraction=float(unique.mean()),
        unique_correct_fraction=unique_correct_fraction,
        contains_true_fraction=contains_fraction,
        score=score,
    )
