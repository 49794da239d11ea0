"""Rank space of a release: the index behind the permutation distance (Algorithm 2) and its windows.

Domingo-Ferrer & Muralidhar, Section 4. Conventions (``../shared/papers/README.md``; they reproduce
Tables 3-6 of the paper exactly):

- Ranks are 1-based within each attribute. A value shared by several release rows (a tie block)
  occupies the rank *interval* [first rank, last rank] of the block: ranks of tied values are not
  broken at random here, so that every result is a pure function of the release.
- ``y*_j``, the release value of attribute j closest to x_j, is a rank interval too: the tie block of
  the closest value; when x_j lies exactly halfway between two release values (in floating-point
  arithmetic), both are equally close and the interval covers both blocks. A release value is its own
  closest value, so the star interval of a release value is its own rank interval (``lo``/``hi``).
- The rank deviation of a release row r from a star interval in attribute j is the gap between the
  two intervals (0 when they overlap); without ties it is ``|rank(r_j) - rank(y*_j)|`` of the paper.
  The permutation distance of a query is the minimum over release rows of the maximum over
  attributes of these gaps: an L-infinity nearest-neighbour query in rank space.

Speed: `RankIndex.nearest` does not compare every query with every row. Release rows with the same
rank intervals in every attribute are merged into one point; the points' interval centres go into a
`scipy.spatial.cKDTree` (``p = inf``). The centre distance bounds the gap from above, and from below
up to a *slack*: the query's half-width plus the widest release half-width, in the attribute where
that is largest (0 without ties, small when values are rounded). Each query first takes its k
nearest centres; when the best gap among them is below (k-th centre distance - slack), no other
point can do better and the query is settled exactly. One or two small k-nearest-neighbour rounds
settle almost every query, tied or not; the rest get a ball query holding every point at gap <= the
best so far (radius: that gap + slack), filtered exactly. In the tree, tie blocks wider than the
median over attributes of their widest block are narrowed to that width (the gaps keep their bound:
narrowing a block never lengthens a gap), so that one coarse attribute, such as an ordinal column
of three categories, does not widen every query's slack. Small problems (few distinct points) are
solved by a chunked all-pairs comparison.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.spatial import cKDTree

from coutil.errors import InputError

FloatMatrix = NDArray[np.float64]
IntMatrix = NDArray[np.int64]
IndexArray = NDArray[np.intp]

#: Queries per nearest-neighbour batch: bounds the memory of candidate lists.
QUERY_CHUNK = 32_768
#: All-pairs comparison when (distinct points) x (queries) is at most this, or there are at most
#: `BRUTE_FORCE_POINTS` distinct points; otherwise the k-d tree.
BRUTE_FORCE_PAIRS = 200_000
BRUTE_FORCE_POINTS = 64
#: Elements of a (queries x points) gap matrix computed at once in the all-pairs path.
BRUTE_FORCE_BLOCK = 2_000_000
#: Windows up to this many values get their variance from the values themselves (two-pass, exact to
#: rounding); longer windows use prefix sums in extended precision.
DIRECT_WINDOW = 64
#: Pairs (query, attribute) of direct windows gathered at once.
WINDOW_CHUNK = 65_536
#: Nearest centres fetched per query in the first round of the k-d tree search when some value is
#: tied (a point query on an untied release needs 1, or 2 to see ties); each further round for the
#: queries not yet settled fetches `NEIGHBOUR_GROWTH` times more, up to `MAX_NEIGHBOURS`.
FIRST_NEIGHBOURS_TIED = 2
NEIGHBOUR_GROWTH = 4
MAX_NEIGHBOURS = 64
#: When a round after the first settles less than this share of its queries, the rest go straight to
#: the ball query.
MIN_SETTLED_SHARE = 0.5
#: Margin added to ball radii: centres are half-integers, so any margin below 0.5 is exact.
_RADIUS_MARGIN = 0.25


class MatchLists(Sequence[IndexArray]):
    """Per query, the release rows (0-based, ascending) at minimal distance, stored flat (CSR).

    ``matches[i]`` is ``flat[offsets[i]:offsets[i + 1]]``; no per-query array is built until asked.
    """

    def __init__(self, flat: IndexArray, offsets: IndexArray) -> None:
        self.flat = flat
        self.offsets = offsets

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @overload
    def __getitem__(self, item: int) -> IndexArray: ...

    @overload
    def __getitem__(self, item: slice) -> list[IndexArray]: ...

    def __getitem__(self, item: int | slice) -> IndexArray | list[IndexArray]:
        if isinstance(item, slice):
            return [self[i] for i in range(*item.indices(len(self)))]
        count = len(self)
        i = int(item) + count if int(item) < 0 else int(item)
        if not 0 <= i < count:
            raise IndexError(f"query {item} out of range for {count} queries")
        return self.flat[self.offsets[i] : self.offsets[i + 1]]

    def __iter__(self) -> Iterator[IndexArray]:
        for i in range(len(self)):
            yield self.flat[self.offsets[i] : self.offsets[i + 1]]

    def counts(self) -> IndexArray:
        """Number of matches of each query."""
        return np.asarray(np.diff(self.offsets), dtype=np.intp)


@dataclass(frozen=True)
class Nearest:
    """Result of `RankIndex.nearest`: permutation distance and matching release rows per query."""

    #: Minimal over release rows of the maximal per-attribute rank gap, one per query.
    distance: IntMatrix
    #: All release rows at that distance (``want_ties=True``) or at least one of them (``False``).
    matches: MatchLists


def _as_matrix(values: ArrayLike, what: str) -> FloatMatrix:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 2:
        raise InputError(f"{what} must be a 2-D table (records x attributes), got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise InputError(f"{what} contains missing or infinite values: ranks need finite numbers")
    return array


def _interval_gap(a_lo: IntMatrix, a_hi: IntMatrix, b_lo: IntMatrix, b_hi: IntMatrix) -> IntMatrix:
    """Per attribute, the distance between rank intervals [a_lo, a_hi] and [b_lo, b_hi] (0 on overlap)."""
    gap: IntMatrix = np.maximum(np.maximum(b_lo - a_hi, a_lo - b_hi), 0)
    return gap


def _morton_order(points: IntMatrix, extent: int) -> IndexArray:
    """Order of integer points in [0, extent]^m along a Z-order (Morton) curve on a coarse grid."""
    dims = min(points.shape[1], 62)
    bits = max(1, min(8, 62 // dims))
    cell = (points[:, :dims] * (1 << bits)) // (extent + 1)
    key = np.zeros(points.shape[0], dtype=np.int64)
    for bit in range(bits - 1, -1, -1):
        for j in range(dims):
            key = (key << 1) | ((cell[:, j] >> bit) & 1)
    return np.asarray(np.argsort(key, kind="stable"), dtype=np.intp)


def _width_caps(block_first: IntMatrix) -> NDArray[np.int64]:
    """Per attribute, the widest tie block kept in the search space (`RankIndex._warp`): the median
    over attributes of their widest block, so that one coarse attribute (an ordinal column of three
    categories has blocks of n/3 ranks) does not widen the slack of every query."""
    m, n = block_first.shape
    widest = np.empty(m, dtype=np.int64)
    for j in range(m):
        starts = np.flatnonzero(block_first[j] == np.arange(n))
        widest[j] = int(np.diff(np.append(starts, n)).max())
    return np.minimum(widest, max(1, int(np.median(widest))))


def _search_left(column: FloatMatrix, values: FloatMatrix) -> IndexArray:
    """``np.searchsorted(column, values, "left")``, with the keys sorted first: far fewer cache misses
    on big columns, since each binary search starts where the previous one ended."""
    order = np.argsort(values, kind="stable")
    positions = np.empty(values.shape[0], dtype=np.intp)
    positions[order] = np.searchsorted(column, values[order], side="left")
    return positions


class RankIndex:
    """Ranks of a release (n x m), its distinct rank points and a lazily built k-d tree over them."""

    def __init__(
        self, sorted_values: FloatMatrix, lo: IntMatrix, hi: IntMatrix, block_first: IntMatrix, block_last: IntMatrix
    ) -> None:
        #: ``sorted_values[j]`` is attribute j of the release sorted ascending (the paper's sorted Y^j).
        self.sorted_values = sorted_values
        #: ``block_first[j][p]``/``block_last[j][p]``: 0-based first/last position of the tie block
        #: holding sorted position p (equal to p without ties).
        self._block_first = block_first
        self._block_last = block_last
        #: (n x m) 1-based rank interval of each release value: [first, last] rank of its tie block.
        self.lo = lo
        self.hi = hi
        self.n, self.m = lo.shape
        self.has_ties = bool(np.any(lo != hi))
        if self.has_ties:
            # Rows with identical intervals everywhere are the same point in rank space. The low ends
            # identify the tie blocks; a stable sort of the rows by them groups each point's rows in
            # ascending order (2-3x faster than np.unique(axis=0)).
            order = np.lexsort(lo.T[::-1])
            sorted_lo = lo[order]
            starts = np.empty(self.n, dtype=bool)
            starts[0] = True
            np.any(sorted_lo[1:] != sorted_lo[:-1], axis=1, out=starts[1:])
            first = np.flatnonzero(starts)
            self._point_lo: IntMatrix = sorted_lo[first]
            self._point_hi: IntMatrix = hi[order[first]]
            self._point_rows: IndexArray | None = np.asarray(order, dtype=np.intp)
            self._point_offsets = np.append(first, self.n).astype(np.intp)
        else:
            self._point_lo, self._point_hi = lo, hi
            self._point_rows = None
            self._point_offsets = np.arange(self.n + 1, dtype=np.intp)
        self._tree: cKDTree | None = None
        #: Block edges in the search space (`_warp`) and, per attribute, the largest half-width there.
        self._warp_edges: tuple[FloatMatrix, IntMatrix] | None = None
        self._point_reach = np.zeros(self.m)
        self._tree_order = np.zeros(0, dtype=np.intp)
        self._prefix: tuple[NDArray[np.longdouble], NDArray[np.longdouble]] | None = None
        self._block_number: IntMatrix | None = None

    @classmethod
    def build(cls, release_values: ArrayLike) -> RankIndex:
        """Index a release: n records x m rankable (numeric) attributes, all finite."""
        y = _as_matrix(release_values, "the release")
        n, m = y.shape
        if n == 0 or m == 0:
            raise InputError(f"the release is empty (shape {y.shape})")
        sorted_values = np.empty((m, n), dtype=np.float64)
        block_first = np.empty((m, n), dtype=np.int64)
        block_last = np.empty((m, n), dtype=np.int64)
        lo = np.empty((n, m), dtype=np.int64)
        hi = np.empty((n, m), dtype=np.int64)
        for j in range(m):
            order = np.argsort(y[:, j], kind="stable")
            column = y[order, j]
            sorted_values[j] = column
            starts_block = np.empty(n, dtype=bool)
            starts_block[0] = True
            np.not_equal(column[1:], column[:-1], out=starts_block[1:])
            block = np.cumsum(starts_block) - 1
            first = np.flatnonzero(starts_block)
            last = np.append(first[1:], n) - 1
            block_first[j] = first[block]
            block_last[j] = last[block]
            lo[order, j] = block_first[j] + 1
            hi[order, j] = block_last[j] + 1
        return cls(sorted_values, lo, hi, block_first, block_last)

    @property
    def distinct_points(self) -> int:
        """Number of distinct rank points (rows with identical rank intervals count once)."""
        return int(self._point_lo.shape[0])

    # ------------------------------------------------------------------------------------- star

    def star(self, records: ArrayLike) -> tuple[IntMatrix, IntMatrix]:
        """Rank interval(s) of y*_j, the release value(s) of attribute j closest to x_j (module docstring).

        ``records`` is (r x m); returns (lo, hi), each (r x m) int64, 1-based.
        """
        x = _as_matrix(records, "the records")
        if x.shape[1] != self.m:
            raise InputError(f"the records have {x.shape[1]} attributes but the release has {self.m}")
        lo = np.empty(x.shape, dtype=np.int64)
        hi = np.empty(x.shape, dtype=np.int64)
        for j in range(self.m):
            column = self.sorted_values[j]
            above = _search_left(column, x[:, j])  # first position with value >= x_j
            below = above - 1  # last position with value < x_j
            above_at = np.minimum(above, self.n - 1)
            below_at = np.maximum(below, 0)
            gap_above = np.where(above < self.n, column[above_at] - x[:, j], np.inf)
            gap_below = np.where(below >= 0, x[:, j] - column[below_at], np.inf)
            take_above = gap_above <= gap_below
            take_below = gap_below <= gap_above
            # The interval runs from the first rank of the lower chosen block to the last rank of the
            # upper one (the two blocks when x_j is exactly halfway).
            lo[:, j] = self._block_first[j][np.where(take_below, below_at, above_at)] + 1
            hi[:, j] = self._block_last[j][np.where(take_above, above_at, below_at)] + 1
        return lo, hi

    # ---------------------------------------------------------------------------------- nearest

    def nearest(self, lo: ArrayLike, hi: ArrayLike, *, want_ties: bool) -> Nearest:
        """Permutation distance of each query interval box [lo, hi] (r x m) and its closest release rows.

        ``want_ties=True`` lists all rows at the minimal distance (ascending); ``False`` may give one.
        """
        q_lo = np.asarray(lo, dtype=np.int64)
        q_hi = np.asarray(hi, dtype=np.int64)
        if q_lo.ndim != 2 or q_lo.shape != q_hi.shape or q_lo.shape[1] != self.m:
            raise InputError(f"query intervals must be two (r x {self.m}) arrays, got {q_lo.shape}, {q_hi.shape}")
        if np.any(q_lo > q_hi):
            raise InputError("query intervals must have lo <= hi")
        if q_lo.size and (q_lo.min() < 1 or q_hi.max() > self.n):
            raise InputError(f"query intervals must be ranks within 1..{self.n}")
        r = q_lo.shape[0]
        distance = np.empty(r, dtype=np.int64)
        point_lists: list[IndexArray] = []
        count_lists: list[IndexArray] = []
        brute = self.distinct_points * r <= BRUTE_FORCE_PAIRS or self.distinct_points <= BRUTE_FORCE_POINTS
        step = max(1, BRUTE_FORCE_BLOCK // self.distinct_points) if brute else QUERY_CHUNK
        # Tree queries in space-filling-curve order: neighbouring queries walk the same nodes, which
        # keeps the tree in cache (about 2.5x faster than random order at n = 4 x 10^5).
        order = np.arange(r, dtype=np.intp) if brute else _morton_order(q_lo + q_hi, 2 * self.n)
        for start in range(0, r, step):
            chunk = order[start : start + step]
            search = self._brute_chunk if brute else self._tree_chunk
            dist, points, counts = search(q_lo[chunk], q_hi[chunk], want_ties)
            distance[chunk] = dist
            point_lists.append(points)
            count_lists.append(counts)
        points = np.concatenate(point_lists) if point_lists else np.zeros(0, dtype=np.intp)
        counts = np.concatenate(count_lists) if count_lists else np.zeros(0, dtype=np.intp)
        query = np.repeat(order, counts)
        return Nearest(distance=distance, matches=self._expand(points, query, r, want_ties))

    def _expand(self, points: IndexArray, query: IndexArray, r: int, want_ties: bool) -> MatchLists:
        """Turn matched points (``query[k]`` owns ``points[k]``) into each query's sorted release rows."""
        if self._point_rows is None:
            rows = points
        elif not want_ties:
            # One row of each point is enough.
            rows = self._point_rows[self._point_offsets[points]]
        else:
            sizes = np.diff(self._point_offsets)[points]
            starts = self._point_offsets[points]
            within = np.arange(int(sizes.sum()), dtype=np.intp) - np.repeat(np.cumsum(sizes) - sizes, sizes)
            rows = self._point_rows[np.repeat(starts, sizes) + within]
            query = np.repeat(query, sizes)
        per_query = np.bincount(query, minlength=r).astype(np.intp)
        order = np.lexsort((rows, query))
        offsets = np.concatenate([[0], np.cumsum(per_query)]).astype(np.intp)
        return MatchLists(np.asarray(rows[order], dtype=np.intp), offsets)

    def _brute_chunk(
        self, q_lo: IntMatrix, q_hi: IntMatrix, want_ties: bool
    ) -> tuple[IntMatrix, IndexArray, IndexArray]:
        gap = np.zeros((q_lo.shape[0], self.distinct_points), dtype=np.int64)
        for j in range(self.m):
            np.maximum(
                gap,
                _interval_gap(q_lo[:, j, None], q_hi[:, j, None], self._point_lo[:, j], self._point_hi[:, j]),
                out=gap,
            )
        best = gap.min(axis=1)
        if want_ties:
            query, points = np.nonzero(gap == best[:, None])
            counts = np.bincount(query, minlength=q_lo.shape[0]).astype(np.intp)
            return best, np.asarray(points, dtype=np.intp), counts
        return best, np.asarray(gap.argmin(axis=1), dtype=np.intp), np.ones(q_lo.shape[0], dtype=np.intp)

    def _warp(self, lo: IntMatrix, hi: IntMatrix) -> tuple[FloatMatrix, FloatMatrix]:
        """Centre and half-width of rank intervals in the k-d tree's space, where tie blocks are
        narrowed to at most `_width_caps` ranks (module docstring); without narrowing, the ranks."""
        if self._warp_edges is None:
            caps = _width_caps(self._block_first)
            edges: list[FloatMatrix] = []
            first_edge = [0]
            for j in range(self.m):
                starts = np.flatnonzero(self._block_first[j] == np.arange(self.n))
                widths = np.minimum(np.diff(np.append(starts, self.n)), caps[j])
                # Block b spans [edge_b, edge_(b+1) - 1]; without narrowing, its ranks [lo, hi].
                edges.append(np.concatenate([[1], 1 + np.cumsum(widths)]).astype(np.float64))
                first_edge.append(first_edge[-1] + edges[-1].size)
            self._warp_edges = (np.concatenate(edges), np.asarray(first_edge[:-1], dtype=np.int64))
        flat, offsets = self._warp_edges
        columns = np.arange(self.m)
        numbers = self.block_numbers
        start = flat[offsets + numbers[columns, lo - 1]]
        end = flat[offsets + numbers[columns, hi - 1] + 1] - 1.0
        return (start + end) / 2.0, (end - start) / 2.0

    def _kdtree(self) -> cKDTree:
        if self._tree is None:
            centres, half = self._warp(self._point_lo, self._point_hi)
            self._point_reach = half.max(axis=0)
            # Points stored along a Z-order curve: a leaf's points sit together in memory.
            self._tree_order = _morton_order(self._point_lo + self._point_hi, 2 * self.n)
            self._tree = cKDTree(centres[self._tree_order], balanced_tree=False, compact_nodes=False)
        return self._tree

    def _tree_chunk(
        self, q_lo: IntMatrix, q_hi: IntMatrix, want_ties: bool
    ) -> tuple[IntMatrix, IndexArray, IndexArray]:
        """Nearest points of each query: k nearest centres, settled by a bound, else a ball query.

        A point beyond the k nearest centres is at centre distance >= c_k (the k-th), so its gap is at
        least ``c_k - slack`` with ``slack = max_j (query half-width_j + widest release half-width_j)``:
        0 when neither the query nor the release has a tie block in any attribute, and small when only
        a few values are tied. A query whose best gap among its k neighbours is below that bound (or
        equal, when one answer is enough) is settled exactly without a ball query.
        """
        tree = self._kdtree()
        r = q_lo.shape[0]
        centres, half = self._warp(q_lo, q_hi)
        slack = (half + self._point_reach).max(axis=1)
        best = np.empty(r, dtype=np.int64)
        owners: list[IndexArray] = []
        found_points: list[IndexArray] = []
        pending = np.arange(r, dtype=np.intp)
        # Without any tie the centre distance is the gap: the first neighbour is the answer (and the
        # second tells whether another one is as close).
        untied_k = 2 if want_ties else 1
        k = FIRST_NEIGHBOURS_TIED if np.any(slack) else untied_k
        for round_number in itertools.count():
            k = min(k, self.distinct_points)
            dist, idx = tree.query(centres[pending], k=k, p=np.inf, workers=-1)
            dist = np.asarray(dist, dtype=np.float64).reshape(pending.size, k)
            idx = self._tree_order[np.asarray(idx, dtype=np.intp).reshape(pending.size, k)]
            gap = _interval_gap(
                q_lo[pending, None, :], q_hi[pending, None, :], self._point_lo[idx], self._point_hi[idx]
            ).max(axis=2)
            low = gap.min(axis=1)
            best[pending] = low  # exact for settled queries, an upper bound for the others
            bound = dist[:, -1] - slack[pending]
            settled = (low < bound if want_ties else low <= bound) | (k == self.distinct_points)
            if want_ties:
                rows, cols = np.nonzero(settled[:, None] & (gap == low[:, None]))
            else:
                rows = np.flatnonzero(settled)
                cols = gap[rows].argmin(axis=1)
            owners.append(pending[rows])
            found_points.append(idx[rows, cols])
            share = float(settled.mean())
            pending = pending[~settled]
            # Very coarse data (tie blocks wider than the distances): more neighbours would not help.
            if pending.size == 0 or k >= MAX_NEIGHBOURS or (round_number and share < MIN_SETTLED_SHARE):
                break
            k *= NEIGHBOUR_GROWTH
        if pending.size:
            # Every point at gap <= (the best so far) is within that + slack of the query's centre.
            ball_best, ball_owner, ball_points = self._ball_search(
                tree, q_lo[pending], q_hi[pending], centres[pending], best[pending] + slack[pending], want_ties
            )
            best[pending] = ball_best
            owners.append(pending[ball_owner])
            found_points.append(ball_points)
        owner = np.concatenate(owners)
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=r).astype(np.intp)
        return best, np.asarray(np.concatenate(found_points)[order], dtype=np.intp), counts

    def _ball_search(
        self,
        tree: cKDTree,
        q_lo: IntMatrix,
        q_hi: IntMatrix,
        centres: FloatMatrix,
        reach: FloatMatrix,
        want_ties: bool,
    ) -> tuple[IntMatrix, IndexArray, IndexArray]:
        """Exact answers of the queries from a ball query whose radius ``reach`` holds every point at
        the best gap: the candidates are filtered exactly.

        Returns the best gap per query and the (query, point) pairs of the answers.
        """
        r = q_lo.shape[0]
        found = tree.query_ball_point(centres, r=reach + _RADIUS_MARGIN, p=np.inf, workers=-1, return_sorted=False)
        lengths = np.fromiter((len(f) for f in found), dtype=np.intp, count=r)
        flat = self._tree_order[
            np.fromiter(itertools.chain.from_iterable(found), dtype=np.intp, count=int(lengths.sum()))
        ]
        owner = np.repeat(np.arange(r, dtype=np.intp), lengths)
        gap = _interval_gap(q_lo[owner], q_hi[owner], self._point_lo[flat], self._point_hi[flat]).max(axis=1)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.intp)
        best = np.minimum.reduceat(gap, starts).astype(np.int64)
        keep = np.flatnonzero(gap == best[owner])
        if not want_ties:
            # First candidate at the best gap of each query.
            keep = keep[np.concatenate([[True], owner[keep][1:] != owner[keep][:-1]])]
        return best, owner[keep], np.asarray(flat[keep], dtype=np.intp)

    # ----------------------------------------------------------------------------------- windows

    def window_bounds(self, star_lo: ArrayLike, star_hi: ArrayLike, d: ArrayLike) -> tuple[IntMatrix, IntMatrix]:
        """0-based first and last sorted positions of the windows S^j(d): ranks in [lo - d, hi + d] ∩ [1, n].

        ``star_lo/star_hi`` are (r x m); ``d`` is a scalar, one distance per query (r,) or one per query
        and attribute (r x m, the vector form d^j of (d, v, f)-permuted privacy). Distances are >= 0.
        """
        lo = np.asarray(star_lo, dtype=np.int64)
        hi = np.asarray(star_hi, dtype=np.int64)
        if lo.ndim != 2 or lo.shape != hi.shape or lo.shape[1] != self.m:
            raise InputError(f"star intervals must be two (r x {self.m}) arrays, got {lo.shape}, {hi.shape}")
        distance = np.asarray(d, dtype=np.int64)
        if distance.ndim == 1:
            if distance.shape[0] != lo.shape[0]:
                raise InputError(f"window distances: expected one per query ({lo.shape[0]}), got {distance.shape[0]}")
            distance = distance[:, None]
        elif distance.ndim == 2 and distance.shape != lo.shape:
            raise InputError(f"window distances: expected shape {lo.shape}, got {distance.shape}")
        elif distance.ndim > 2:
            raise InputError(f"window distances must be a scalar, a vector or a matrix, got shape {distance.shape}")
        if np.any(distance < 0):
            raise InputError("window distances must be non-negative")
        first = np.clip(lo - distance, 1, self.n) - 1
        last = np.clip(hi + distance, 1, self.n) - 1
        return first, last

    @staticmethod
    def _per_query(star_lo: ArrayLike, d: ArrayLike) -> IntMatrix:
        """``d`` of `window_variance`/`window_distinct`: a scalar or a vector broadcast to one per query
        (a length-1 vector too); a per-attribute (r x m) matrix passes through."""
        distance = np.asarray(d, dtype=np.int64)
        queries = np.shape(star_lo)
        if distance.ndim <= 1 and len(queries) == 2:
            try:
                return np.broadcast_to(distance, (queries[0],))
            except ValueError:
                raise InputError(f"window distances: expected one per query ({queries[0]})") from None
        return distance

    def window_variance(self, star_lo: ArrayLike, star_hi: ArrayLike, d: ArrayLike) -> FloatMatrix:
        """Population variance of the sorted Y^j values with rank in [lo - d, hi + d], clipped to [1, n].

        ``star_lo/star_hi`` are (r x m); ``d`` is one non-negative distance per query (or a scalar).
        This is condition 2 of Definition 1 with the set S^j of the paper (Table 4).
        """
        first, last = self.window_bounds(star_lo, star_hi, self._per_query(star_lo, d))
        return self.variance_between(first, last)

    def variance_between(self, first: ArrayLike, last: ArrayLike) -> FloatMatrix:
        """Population variance of ``sorted_values[j][first:last + 1]`` for every (query, attribute j).

        ``first``/``last`` are (r x m) 0-based inclusive positions (`window_bounds`), ``first <= last``.
        """
        first_at = np.asarray(first, dtype=np.int64)
        last_at = np.asarray(last, dtype=np.int64)
        result = np.empty(first_at.shape, dtype=np.float64)
        flat_first = first_at.reshape(-1)
        flat_last = last_at.reshape(-1)
        column = np.tile(np.arange(self.m, dtype=np.int64), first_at.shape[0])
        size = flat_last - flat_first + 1
        out = result.reshape(-1)
        short = np.flatnonzero(size <= DIRECT_WINDOW)
        long = np.flatnonzero(size > DIRECT_WINDOW)
        values = self.sorted_values.reshape(-1)
        offsets = np.arange(DIRECT_WINDOW, dtype=np.int64)
        for start in range(0, short.size, WINDOW_CHUNK):
            pick = short[start : start + WINDOW_CHUNK]
            positions = flat_first[pick, None] + offsets
            inside = positions <= flat_last[pick, None]
            window = values[column[pick, None] * self.n + np.minimum(positions, flat_last[pick, None])]
            count = size[pick].astype(np.float64)
            mean = np.where(inside, window, 0.0).sum(axis=1) / count
            deviation = np.where(inside, window - mean[:, None], 0.0)
            out[pick] = (deviation * deviation).sum(axis=1) / count
        if long.size:
            out[long] = self._prefix_variance(column[long], flat_first[long], flat_last[long])
        return result

    def window_distinct(self, star_lo: ArrayLike, star_hi: ArrayLike, d: ArrayLike) -> IntMatrix:
        """Number of distinct values in the same windows as `window_variance` (distinct l-diversity).

        An alternative diversity criterion for condition 2 of Definition 1 (Domingo-Ferrer's slides).
        """
        first, last = self.window_bounds(star_lo, star_hi, self._per_query(star_lo, d))
        columns = np.arange(self.m)
        numbers = self.block_numbers
        distinct: IntMatrix = numbers[columns, last] - numbers[columns, first] + 1
        return distinct

    @property
    def block_first(self) -> IntMatrix:
        """(m x n): 0-based first sorted position of the tie block holding each sorted position."""
        return self._block_first

    @property
    def block_last(self) -> IntMatrix:
        """(m x n): 0-based last sorted position of the tie block holding each sorted position."""
        return self._block_last

    @property
    def block_numbers(self) -> IntMatrix:
        """(m x n): 0-based number of the tie block (distinct value) holding each sorted position."""
        if self._block_number is None:
            # How many blocks start at or before each position, minus one.
            self._block_number = np.cumsum(self._block_first == np.arange(self.n), axis=1) - 1
        return self._block_number

    def _prefix_variance(self, column: IntMatrix, first: IntMatrix, last: IntMatrix) -> FloatMatrix:
        """Variance of long windows from prefix sums of centred values in extended precision."""
        if self._prefix is None:
            centred = (self.sorted_values - self.sorted_values.mean(axis=1, keepdims=True)).astype(np.longdouble)
            zero = np.zeros((self.m, 1), dtype=np.longdouble)
            self._prefix = (
                np.concatenate([zero, np.cumsum(centred, axis=1)], axis=1),
                np.concatenate([zero, np.cumsum(centred * centred, axis=1)], axis=1),
            )
        sums, squares = self._prefix
        count = (last - first + 1).astype(np.longdouble)
        s1 = sums[column, last + 1] - sums[column, first]
        s2 = squares[column, last + 1] - squares[column, first]
        variance = np.maximum((s2 - s1 * s1 / count) / count, 0.0).astype(np.float64)
        # A window of one repeated value has variance exactly 0 (no rounding residue).
        constant = self.sorted_values[column, first] == self.sorted_values[column, last]
        return np.asarray(np.where(constant, 0.0, variance), dtype=np.float64)

    # ------------------------------------------------------------------------------ deviations

    def rank_deviations(self, star_lo: ArrayLike, star_hi: ArrayLike, rows: ArrayLike) -> IntMatrix:
        """Per query and attribute, the rank gap between its star interval and release row ``rows[i]``.

        This is the vector d = (d^1..d^m) of the (d, v, f)-permuted privacy with f(x_i) = rows[i].
        """
        lo = np.asarray(star_lo, dtype=np.int64)
        hi = np.asarray(star_hi, dtype=np.int64)
        target = np.asarray(rows)
        if target.ndim != 1 or target.shape[0] != lo.shape[0]:
            raise InputError(f"the record mapping must give one release row per record ({lo.shape[0]})")
        if not np.issubdtype(target.dtype, np.integer):
            raise InputError("the record mapping must hold integer release row numbers")
        if target.size and (target.min() < 0 or target.max() >= self.n):
            raise InputError(f"the record mapping points outside the release rows 0..{self.n - 1}")
        return _interval_gap(lo, hi, self.lo[target], self.hi[target])
