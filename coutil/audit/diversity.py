"""Diversity of the windows S^j(d) of condition 2 of (d, v)-permuted privacy, by four criteria.

S^j(d) is the run of sorted Y^j values whose rank lies within d of the rank interval of y*_j, the
release value closest to x_j (Definition 1 of Domingo-Ferrer & Muralidhar; `RankIndex.window_bounds`).
The paper measures its diversity by the population variance (Table 4); Domingo-Ferrer's slides allow
"one of the l-diversity criteria, or the t-closeness criterion" instead. The conventions are those of
`coutil.sdc.privacy`, applied to a window instead of an equivalence class:

- ``variance``: population variance of the window (the paper; Table 4). Safe when >= v^j.
- ``distinct-l``: number of distinct values in the window. Safe when >= l.
- ``entropy-l``: ``exp(H)``, H the natural-log Shannon entropy of the window's value distribution
  (entropy l-diversity holds for l when H >= log l). Safe when >= l.
- ``t-closeness``: earth mover's distance between the window's distribution and the whole column
  Y^j's, with the ordered distance ``|i - k| / (D - 1)`` over the D sorted distinct values of Y^j
  (Li, Li & Venkatasubramanian 2007). Safe when <= t: the only criterion where lower is safer.

Speed: every measure is computed from per-column prefix sums over the sorted release and its tie
blocks, in O(log n) per window at most, so a whole-data-set audit stays far from quadratic. The
tests check each measure against a direct computation on the window's values.
"""

from __future__ import annotations

import weakref
from typing import Literal, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from coutil.audit.ranks import FloatMatrix, IntMatrix, RankIndex
from coutil.errors import InputError

DiversityCriterion = Literal["variance", "distinct-l", "entropy-l", "t-closeness"]
#: The criteria, in the order they are documented.
CRITERIA: tuple[DiversityCriterion, ...] = get_args(DiversityCriterion)
BoolMatrix = NDArray[np.bool_]

#: Relative slack of threshold comparisons: a window exactly at the threshold on paper is not failed
#: because of float rounding (exp(log 3) is 2.9999999999999996).
RELATIVE_TOLERANCE = 1e-9
#: Absolute slack, for thresholds at or near 0 (t-closeness of a window equal to the column).
ABSOLUTE_TOLERANCE = 1e-12


def parse_criterion(text: str) -> DiversityCriterion:
    """Validate a criterion name (an `InputError` naming the valid ones otherwise)."""
    for criterion in CRITERIA:
        if text == criterion:
            return criterion
    raise InputError(f"unknown diversity criterion {text!r}: expected one of {', '.join(CRITERIA)}")


def lower_is_safer(criterion: DiversityCriterion) -> bool:
    """True for t-closeness (a distance to the whole column), False for the diversity measures."""
    return criterion == "t-closeness"


def validate_thresholds(criterion: DiversityCriterion, thresholds: ArrayLike, m: int) -> NDArray[np.float64]:
    """One finite threshold per attribute, in the range the criterion allows."""
    values = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    if values.size != m:
        raise InputError(f"{criterion} needs one threshold per attribute: got {values.size}, expected {m}")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise InputError(f"{criterion} thresholds must be finite and non-negative, got {values.tolist()}")
    if criterion == "t-closeness" and np.any(values > 1):
        raise InputError(f"t-closeness thresholds are distances between 0 and 1, got {values.tolist()}")
    return values


def meets(criterion: DiversityCriterion, measures: ArrayLike, thresholds: ArrayLike) -> BoolMatrix:
    """Per window, whether the measure satisfies the attribute's threshold (with rounding slack)."""
    value = np.asarray(measures, dtype=np.float64)
    need = np.asarray(thresholds, dtype=np.float64)
    slack = RELATIVE_TOLERANCE * np.abs(need) + ABSOLUTE_TOLERANCE
    if lower_is_safer(criterion):
        return np.asarray(value <= need + slack, dtype=np.bool_)
    return np.asarray(value >= need - slack, dtype=np.bool_)


def worst(criterion: DiversityCriterion, measures: ArrayLike) -> NDArray[np.float64]:
    """Per attribute, the least safe measure over the windows (rows): the minimum, or for t-closeness
    the maximum. This is the data-set level value (Table 4's bottom row for the variance)."""
    value = np.asarray(measures, dtype=np.float64)
    reduced = value.max(axis=0) if lower_is_safer(criterion) else value.min(axis=0)
    return np.asarray(reduced, dtype=np.float64)


def window_diversity(
    index: RankIndex, star_lo: ArrayLike, star_hi: ArrayLike, d: ArrayLike, criterion: DiversityCriterion
) -> FloatMatrix:
    """The criterion's measure of every window S^j(d) (r x m).

    ``d`` is a scalar, one distance per query, or one per query and attribute (the vector form).
    """
    first, last = index.window_bounds(star_lo, star_hi, d)
    return diversity_between(index, first, last, criterion)


def diversity_between(
    index: RankIndex, first: IntMatrix, last: IntMatrix, criterion: DiversityCriterion
) -> FloatMatrix:
    """The criterion's measure of ``sorted_values[j][first:last + 1]`` (0-based, inclusive; r x m)."""
    if criterion == "variance":
        return index.variance_between(first, last)
    if criterion == "distinct-l":
        numbers = index.block_numbers
        columns = np.arange(index.m)
        return np.asarray(numbers[columns, last] - numbers[columns, first] + 1, dtype=np.float64)
    if criterion == "entropy-l":
        return _tables(index).entropy_l(index, first, last)
    if criterion == "t-closeness":
        return _tables(index).ordered_emd(index, first, last)
    raise InputError(f"unknown diversity criterion {criterion!r}: expected one of {', '.join(CRITERIA)}")


class _PrefixTables:
    """Per-column prefix sums over the sorted release and its tie blocks (built once per index).

    Blocks (runs of one value) have ragged counts per column, so block arrays are stored flat with
    ``block_offset[j]`` the first block of column j.
    """

    def __init__(self, index: RankIndex) -> None:
        n, m = index.n, index.m
        positions = np.arange(n, dtype=np.int64)
        # Entropy: a block of c values contributes c log c = sum_{t=1..c} (t log t - (t-1) log(t-1));
        # position p, the t-th of its block, holds that t-th increment, so that whole blocks are sums
        # of positions and only a block cut by the window's start needs a correction.
        within = (positions[None, :] - index.block_first + 1).astype(np.float64)
        increment = _x_log_x(within) - _x_log_x(within - 1.0)
        self.entropy_prefix = np.concatenate([np.zeros((m, 1)), np.cumsum(increment, axis=1)], axis=1)
        # t-closeness: per block k of column j, its last position L_k and the column's cumulative
        # distribution F(k) = (L_k + 1) / n; prefix sums of both over blocks.
        starts = index.block_first == positions[None, :]
        self.block_count = starts.sum(axis=1).astype(np.int64)
        self.block_offset = np.concatenate([[0], np.cumsum(self.block_count)]).astype(np.int64)
        ends = index.block_last == positions[None, :]
        self.block_end = np.nonzero(ends)[1].astype(np.int64)  # row-major: column by column, ascending
        cdf = (self.block_end + 1).astype(np.float64) / n
        self.end_prefix = np.zeros(self.block_end.size + m, dtype=np.float64)
        self.cdf_prefix = np.zeros(self.block_end.size + m, dtype=np.float64)
        for j in range(m):
            a, b = self.block_offset[j], self.block_offset[j + 1]
            # Column j's prefixes sit at [a + j, b + j]: one leading zero per column.
            self.end_prefix[a + j : b + j + 1] = np.concatenate([[0.0], np.cumsum(self.block_end[a:b])])
            self.cdf_prefix[a + j : b + j + 1] = np.concatenate([[0.0], np.cumsum(cdf[a:b])])

    def entropy_l(self, index: RankIndex, first: IntMatrix, last: IntMatrix) -> FloatMatrix:
        columns = np.arange(index.m)
        start_block_first = index.block_first[columns, first]
        start_block_last = index.block_last[columns, first]
        count = (last - first + 1).astype(np.float64)
        # sum over the window's blocks of c log c: position increments, corrected for the first block,
        # whose increments run from t0 (not 1) to t1.
        t0 = (first - start_block_first + 1).astype(np.float64)
        t1 = (np.minimum(start_block_last, last) - start_block_first + 1).astype(np.float64)
        cut = t1 - t0 + 1.0
        summed = self.entropy_prefix[columns, last + 1] - self.entropy_prefix[columns, first]
        summed = summed - (_x_log_x(t1) - _x_log_x(t0 - 1.0)) + _x_log_x(cut)
        entropy = np.log(count) - summed / count
        return np.asarray(np.exp(np.maximum(entropy, 0.0)), dtype=np.float64)

    def ordered_emd(self, index: RankIndex, first: IntMatrix, last: IntMatrix) -> FloatMatrix:
        """EMD = sum over blocks k < D - 1 of |F_W(k) - F(k)| / (D - 1), with F_W the window's
        cumulative distribution: 0 for blocks ending before the window, (L_k - a + 1) / w for blocks
        ending inside it, 1 from the block holding its last position on. In the middle range the
        difference grows with L_k (w <= n), so its sign changes once, at a block found by binary search."""
        n = index.n
        result = np.zeros(first.shape, dtype=np.float64)
        numbers = index.block_numbers
        for j in range(index.m):
            blocks = int(self.block_count[j])
            if blocks < 2:
                continue  # a constant column: every window has its distribution
            base = int(self.block_offset[j])
            ends = self.block_end[base : base + blocks]
            end_sum = self.end_prefix[base + j : base + j + blocks + 1]
            cdf_sum = self.cdf_prefix[base + j : base + j + blocks + 1]
            a = first[:, j].astype(np.int64)
            b = last[:, j].astype(np.int64)
            w = b - a + 1
            k_a = numbers[j, a]  # first block ending at or after a
            k_b = numbers[j, b]  # block holding b: F_W = 1 from there on
            before = cdf_sum[k_a]
            after = (blocks - k_b) - (cdf_sum[blocks] - cdf_sum[k_b])
            # Inside: (L - a + 1) n >= (L + 1) w  <=>  L >= ((a - 1) n + w) / (n - w), integers.
            numerator = (a - 1) * n + w
            denominator = np.maximum(n - w, 1)
            threshold = np.where(w < n, -((-numerator) // denominator), 0)
            k_split = np.clip(np.searchsorted(ends, threshold, side="left"), k_a, k_b)
            # Blocks [k_a, k_split) lie below the column's distribution, [k_split, k_b) above it.
            below = _inside_sum(end_sum, cdf_sum, k_a, k_split, a, w)
            above = _inside_sum(end_sum, cdf_sum, k_split, k_b, a, w)
            total = before + after - below + above
            # Prefix-sum cancellation leaves ~1e-16 where the distributions are equal: report 0.
            total = np.where(total < 1e-12, 0.0, total)
            result[:, j] = total / (blocks - 1)
        return result


def _inside_sum(
    end_sum: NDArray[np.float64],
    cdf_sum: NDArray[np.float64],
    k1: NDArray[np.int64],
    k2: NDArray[np.int64],
    a: NDArray[np.int64],
    w: NDArray[np.int64],
) -> NDArray[np.float64]:
    """sum over blocks k in [k1, k2) of (L_k - a + 1) / w - F(k), from the block prefix sums."""
    size = (k2 - k1).astype(np.float64)
    window_part = (end_sum[k2] - end_sum[k1] - size * (a - 1)) / w
    return np.asarray(window_part - (cdf_sum[k2] - cdf_sum[k1]), dtype=np.float64)


def _x_log_x(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """x log x with 0 log 0 = 0."""
    safe = np.where(values > 0, values, 1.0)
    return np.asarray(np.where(values > 0, values * np.log(safe), 0.0), dtype=np.float64)


#: Prefix tables per live index: built once (O(nm)), dropped with the index.
_TABLES: weakref.WeakKeyDictionary[RankIndex, _PrefixTables] = weakref.WeakKeyDictionary()


def _tables(index: RankIndex) -> _PrefixTables:
    tables = _TABLES.get(index)
    if tables is None:
        tables = _TABLES[index] = _PrefixTables(index)
    return tables
