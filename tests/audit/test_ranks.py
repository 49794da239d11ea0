"""coutil.audit.ranks and coutil.audit.permutation against a plain O(n^2) reference written here.

The reference follows the definitions word for word (ranks by counting, closest values by scanning,
every query against every release row), so it shares no code or trick with the fast index. Property
tests run both on random data with many ties, halfway points and on both search paths (all-pairs and
k-d tree, forced by lowering the thresholds)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from coutil.audit import ranks
from coutil.audit.permutation import (
    closest_distance_vector,
    closest_record_mapping,
    distance_vector,
    permutation_distances,
    reverse_map,
)
from coutil.audit.ranks import RankIndex
from coutil.errors import InputError

Matrix = NDArray[np.float64]


# ------------------------------------------------------------------------------- the reference


def ref_rank_interval(column: Matrix, value: float) -> tuple[int, int]:
    """1-based [first, last] rank of ``value`` among ``column`` (it must occur in it)."""
    return 1 + int(np.sum(column < value)), int(np.sum(column <= value))


def ref_star(release: Matrix, record: Matrix) -> tuple[list[int], list[int]]:
    lo, hi = [], []
    for j, x in enumerate(record):
        column = release[:, j]
        gaps = [abs(float(v) - float(x)) for v in column]
        best = min(gaps)
        closest = [float(v) for v, g in zip(column, gaps, strict=True) if g == best]
        lo.append(min(ref_rank_interval(column, v)[0] for v in closest))
        hi.append(max(ref_rank_interval(column, v)[1] for v in closest))
    return lo, hi


def ref_gap(a: tuple[int, int], b: tuple[int, int]) -> int:
    return max(0, b[0] - a[1], a[0] - b[1])


def ref_nearest(release: Matrix, q_lo: list[int], q_hi: list[int]) -> tuple[int, list[int]]:
    n, m = release.shape
    distances = []
    for r in range(n):
        row = [ref_rank_interval(release[:, j], float(release[r, j])) for j in range(m)]
        distances.append(max(ref_gap(row[j], (q_lo[j], q_hi[j])) for j in range(m)))
    best = min(distances)
    return best, [r for r in range(n) if distances[r] == best]


def ref_window_variance(release: Matrix, lo: int, hi: int, d: int, j: int) -> float:
    column = np.sort(release[:, j])
    first = max(1, lo - d)
    last = min(column.size, hi + d)
    return float(np.var(column[first - 1 : last]))


# ------------------------------------------------------------------------------------ strategies


@st.composite
def release_and_records(draw: st.DrawFn) -> tuple[Matrix, Matrix]:
    """A release with ties (values on a small grid) and records: release values, halfway points, others."""
    n = draw(st.integers(1, 30))
    m = draw(st.integers(1, 4))
    levels = draw(st.integers(1, 12))
    grid = draw(st.lists(st.integers(0, levels), min_size=n * m, max_size=n * m))
    release = np.array(grid, dtype=np.float64).reshape(n, m)
    r = draw(st.integers(1, 12))
    # Halves of integers: exact release values, exact halfway points, and values outside the range.
    halves = draw(st.lists(st.integers(-4, 2 * levels + 4), min_size=r * m, max_size=r * m))
    records = np.array(halves, dtype=np.float64).reshape(r, m) / 2.0
    return release, records


@st.composite
def partly_tied(draw: st.DrawFn) -> tuple[Matrix, Matrix]:
    """A release of mostly distinct values with a few heavily tied ones, and records of which some hit
    a tied value and others do not (release rows, halfway points, values outside the range)."""
    n = draw(st.integers(2, 40))
    m = draw(st.integers(1, 4))
    columns = []
    for _ in range(m):
        values = draw(st.lists(st.integers(0, 400), min_size=n, max_size=n, unique=True))
        tied = draw(st.lists(st.integers(0, n - 1), max_size=n // 2))
        blocks = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
        for k, row in enumerate(tied):
            values[row] = blocks[k % len(blocks)]  # a few values repeated many times
        columns.append(values)
    release = np.array(columns, dtype=np.float64).T
    rows = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8))
    extra = draw(st.lists(st.integers(-10, 820), min_size=m, max_size=4 * m))
    others = np.array(extra[: len(extra) // m * m], dtype=np.float64).reshape(-1, m) / 2.0
    return release, np.vstack([release[rows], others])


@contextmanager
def search_path(path: str) -> Iterator[None]:
    """Force the all-pairs or the k-d tree search (and tiny chunks) whatever the problem size.

    ``tree``: the normal tree search; ``ball``: one neighbour round, then every query not settled
    goes to the ball query.
    """
    with pytest.MonkeyPatch.context() as patch:
        if path in ("tree", "ball"):
            patch.setattr(ranks, "BRUTE_FORCE_PAIRS", 0)
            patch.setattr(ranks, "BRUTE_FORCE_POINTS", 0)
            patch.setattr(ranks, "QUERY_CHUNK", 5)
            if path == "ball":
                patch.setattr(ranks, "MAX_NEIGHBOURS", 1)
        else:
            patch.setattr(ranks, "BRUTE_FORCE_PAIRS", 10**12)
            patch.setattr(ranks, "BRUTE_FORCE_BLOCK", 7)
        yield


# ----------------------------------------------------------------------------------- properties


PATHS = ["brute", "tree", "ball"]


@settings(max_examples=150, deadline=None)
@given(data=release_and_records(), path=st.sampled_from(PATHS), want_ties=st.booleans())
def test_fast_index_agrees_with_reference(data: tuple[Matrix, Matrix], path: str, want_ties: bool) -> None:
    check_against_reference(data, path, want_ties)


@settings(max_examples=150, deadline=None)
@given(data=partly_tied(), path=st.sampled_from(PATHS), want_ties=st.booleans())
def test_partly_tied_release_agrees_with_reference(
    data: tuple[Matrix, Matrix], path: str, want_ties: bool
) -> None:
    # Heavy ties on a few values only: point queries and interval queries mixed in one batch.
    check_against_reference(data, path, want_ties)


def check_against_reference(data: tuple[Matrix, Matrix], path: str, want_ties: bool) -> None:
    release, records = data
    with search_path(path):
        index = RankIndex.build(release)
        for i in range(release.shape[0]):
            for j in range(release.shape[1]):
                assert (int(index.lo[i, j]), int(index.hi[i, j])) == ref_rank_interval(
                    release[:, j], float(release[i, j])
                )
        lo, hi = index.star(records)
        found = index.nearest(lo, hi, want_ties=want_ties)
        assert len(found.matches) == records.shape[0]
        for i, record in enumerate(records):
            star_lo, star_hi = ref_star(release, record)
            assert lo[i].tolist() == star_lo and hi[i].tolist() == star_hi
            distance, rows = ref_nearest(release, star_lo, star_hi)
            assert int(found.distance[i]) == distance
            got = [int(r) for r in found.matches[i]]
            if want_ties:
                assert got == rows
            else:
                assert got and set(got) <= set(rows)
        d = np.arange(records.shape[0]) % 4
        variances = index.window_variance(lo, hi, d)
        distinct = index.window_distinct(lo, hi, d)
        for i in range(records.shape[0]):
            for j in range(release.shape[1]):
                expected = ref_window_variance(release, int(lo[i, j]), int(hi[i, j]), int(d[i]), j)
                assert variances[i, j] == pytest.approx(expected, rel=1e-12, abs=1e-12)
                window = np.sort(release[:, j])[max(0, lo[i, j] - d[i] - 1) : hi[i, j] + d[i]]
                assert int(distinct[i, j]) == np.unique(window).size


@settings(max_examples=60, deadline=None)
@given(data=release_and_records())
def test_release_values_are_their_own_star(data: tuple[Matrix, Matrix]) -> None:
    # The subject's random records use index.lo/hi as star intervals: that must equal star().
    release, _ = data
    index = RankIndex.build(release)
    lo, hi = index.star(release)
    assert np.array_equal(lo, index.lo) and np.array_equal(hi, index.hi)
    assert np.all(index.nearest(lo, hi, want_ties=False).distance == 0)


@pytest.mark.parametrize("tied", [False, True])
def test_tree_path_on_larger_data(tied: bool) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(1500, 3))
    release = x + rng.normal(scale=0.3, size=x.shape)
    if tied:
        release = np.round(release * 4) / 4  # about 40 values per attribute
    queries = np.vstack([x[:150], rng.normal(scale=2.0, size=(50, 3))])
    index = RankIndex.build(release)
    lo, hi = index.star(queries)
    fast = index.nearest(lo, hi, want_ties=True)
    # Vectorised reference over all rows (same definitions as ref_nearest).
    for i in range(queries.shape[0]):
        gap = np.maximum(np.maximum(index.lo - hi[i], lo[i] - index.hi), 0).max(axis=1)
        assert int(fast.distance[i]) == int(gap.min())
        assert fast.matches[i].tolist() == np.flatnonzero(gap == gap.min()).tolist()
    single = index.nearest(lo, hi, want_ties=False)
    assert np.array_equal(single.distance, fast.distance)
    assert all(int(single.matches[i][0]) in fast.matches[i].tolist() for i in range(queries.shape[0]))


class CountingTree(ranks.cKDTree):  # type: ignore[misc]
    """A k-d tree that counts the queries sent to its (slow) ball search."""

    ball_queries = 0

    def query_ball_point(self, x: Matrix, *args: object, **kwargs: object) -> object:
        CountingTree.ball_queries += int(np.atleast_2d(x).shape[0])
        return super().query_ball_point(x, *args, **kwargs)


@pytest.mark.parametrize("kind", ["one tie", "2 decimals", "ordinal column"])
def test_point_queries_skip_the_ball_search_on_a_tied_release(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    # One tied value, values rounded to 2 decimals (ties everywhere), or an attribute of 3 categories
    # (blocks of n/3 ranks): nearly every query is settled by its nearest neighbours; only a few
    # need the ball search (all of them did before).
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3000, 3))
    release = x + rng.normal(scale=0.5, size=x.shape)
    if kind == "one tie":
        release[1, 0] = release[0, 0]
    else:
        release = np.round(release, 2)
    if kind == "ordinal column":
        x[:, 2] = np.clip(np.round(x[:, 2]), -1, 1)
        release[:, 2] = np.clip(np.round(release[:, 2]), -1, 1)
    monkeypatch.setattr(ranks, "cKDTree", CountingTree)
    monkeypatch.setattr(CountingTree, "ball_queries", 0)
    index = RankIndex.build(release)
    assert index.has_ties
    lo, hi = index.star(x)
    found = index.nearest(lo, hi, want_ties=True)
    random = index.nearest(index.lo, index.hi, want_ties=False)
    assert CountingTree.ball_queries <= 0.02 * (x.shape[0] + release.shape[0])
    # Same answers as the plain scan of every row, on a sample.
    for i in rng.choice(x.shape[0], size=60, replace=False):
        gap = np.maximum(np.maximum(index.lo - hi[i], lo[i] - index.hi), 0).max(axis=1)
        assert int(found.distance[i]) == int(gap.min())
        assert found.matches[i].tolist() == np.flatnonzero(gap == gap.min()).tolist()
    assert np.all(random.distance == 0)


def test_long_windows_use_prefix_sums_accurately() -> None:
    rng = np.random.default_rng(8)
    # Large offset, small spread: the case where naive sums of squares cancel catastrophically.
    release = 5000.0 + rng.normal(scale=0.01, size=(5000, 2))
    release[:300, 1] = 5000.0  # a long constant run: variance exactly 0
    index = RankIndex.build(release)
    lo, hi = index.star(release[:50])
    d = np.array([0, 40, 100, 1000, 6000] * 10)
    variances = index.window_variance(lo, hi, d)
    for i in range(50):
        for j in range(2):
            expected = ref_window_variance(release, int(lo[i, j]), int(hi[i, j]), int(d[i]), j)
            assert variances[i, j] == pytest.approx(expected, rel=1e-7, abs=1e-15)
    block_lo, block_hi = index.star(np.array([[5000.0, 5000.0]]))
    assert int(block_hi[0, 1] - block_lo[0, 1]) == 299  # the tie block is one rank interval
    assert index.window_variance(block_lo, block_hi, 0)[0, 1] == 0.0


# -------------------------------------------------------------------------------- permutation


@settings(max_examples=80, deadline=None)
@given(data=release_and_records(), seed=st.integers(0, 2**32))
def test_reverse_map_is_a_rank_preserving_permutation(data: tuple[Matrix, Matrix], seed: int) -> None:
    release, _ = data
    rng = np.random.default_rng(seed)
    original = rng.normal(size=release.shape)
    z = reverse_map(original, release, seed=seed)
    assert np.array_equal(reverse_map(original, release, seed=seed), z)
    for j in range(release.shape[1]):
        assert np.array_equal(np.sort(z[:, j]), np.sort(original[:, j]))
        # Rank order of Y is kept: y_a < y_b implies z_a < z_b (original values are distinct).
        order = np.argsort(release[:, j], kind="stable")
        y_sorted, z_sorted = release[order, j], z[order, j]
        for a in range(len(order) - 1):
            if y_sorted[a] < y_sorted[a + 1]:
                assert z_sorted[a] < z_sorted[a + 1]


def test_reverse_map_without_ties_and_seeded_tie_breaking() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 2))
    y = x + rng.normal(size=x.shape)
    z = reverse_map(x, y, seed=0)
    for j in range(2):
        ranks_y = np.argsort(np.argsort(y[:, j]))
        assert np.array_equal(z[:, j], np.sort(x[:, j])[ranks_y])
    tied = np.zeros((40, 1))
    a = reverse_map(x[:, :1], tied, seed=1)
    assert not np.array_equal(a, reverse_map(x[:, :1], tied, seed=2))
    assert np.array_equal(a, reverse_map(x[:, :1], tied, seed=1))
    with pytest.raises(InputError, match="same shape"):
        reverse_map(x, y[:30], seed=0)
    with pytest.raises(InputError, match="missing or infinite"):
        reverse_map(x, np.where(y > 1, np.nan, y), seed=0)


@settings(max_examples=60, deadline=None)
@given(data=release_and_records(), seed=st.none() | st.integers(0, 100))
def test_closest_mapping_vector_max_is_the_distance(data: tuple[Matrix, Matrix], seed: int | None) -> None:
    release, records = data
    result = permutation_distances(records, release)
    mapping, vector = closest_distance_vector(records, release, seed=seed)
    assert np.array_equal(vector.max(axis=1), result.distance)
    for i in range(records.shape[0]):
        assert int(mapping[i]) in result.closest[i].tolist()
        if seed is None:
            assert int(mapping[i]) == int(result.closest[i][0])
    # Against any mapping, the vector's maximum is at least the permutation distance.
    other = np.arange(records.shape[0]) % release.shape[0]
    assert np.all(distance_vector(records, release, other).max(axis=1) >= result.distance)


def test_input_errors() -> None:
    release = np.arange(12, dtype=np.float64).reshape(4, 3)
    index = RankIndex.build(release)
    with pytest.raises(InputError, match="attributes"):
        index.star(np.zeros((2, 2)))
    with pytest.raises(InputError, match="empty"):
        RankIndex.build(np.zeros((0, 3)))
    with pytest.raises(InputError, match="2-D"):
        RankIndex.build(np.zeros(3))
    with pytest.raises(InputError, match="outside the release"):
        distance_vector(release[:2], release, [0, 4])
    with pytest.raises(InputError, match="one release row per record"):
        distance_vector(release[:2], release, [0])
    with pytest.raises(InputError, match="non-negative"):
        index.window_variance(index.lo, index.hi, -1)
    assert closest_record_mapping(release, release).tolist() == [0, 1, 2, 3]
