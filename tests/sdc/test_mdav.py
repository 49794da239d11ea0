"""MDAV: the fast path equals the plain reference bit for bit, both equal an independent pure-Python
oracle on tie-heavy data, and the literature's SSE/SST tables are reproduced."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc import mdav as mdav_module
from coutil.sdc.dataset import Dataset, load_csv
from coutil.sdc.mdav import (
    Microaggregation,
    mdav,
    mdav_partitioned,
    mdav_reference,
    mdav_with_progress,
    squared_distances,
    standardize_to_grid,
)
from coutil.sdc.stats import sse_sst_percent

# ---------------------------------------------------------------- an independent oracle (pure Python lists)


def _oracle_labels(values: NDArray[np.float64], k: int) -> list[int]:
    """MDAV written from the docstring's conventions with plain Python: sorts on (distance, index) keys."""
    data = standardize_to_grid(values)
    rows = data.values.tolist()
    ints = data.integers.tolist()
    n, m = len(rows), len(rows[0])
    remaining = list(range(n))
    labels = [-1] * n

    def dist(a: list[float], b: list[float]) -> float:
        total = (a[0] - b[0]) * (a[0] - b[0])
        for j in range(1, m):
            total += (a[j] - b[j]) * (a[j] - b[j])
        return total

    def centroid() -> list[float]:
        sums = [sum(ints[i][j] for i in remaining) for j in range(m)]
        return [float(np.float64(float(s)) / float(len(remaining)) * 2.0**-data.bits) for s in sums]

    def farthest(point: list[float]) -> int:
        return min(remaining, key=lambda i: (-dist(rows[i], point), i))

    def group(centre: int, label: int) -> None:
        others = sorted((i for i in remaining if i != centre), key=lambda i: (dist(rows[i], rows[centre]), i))
        for i in [centre, *others[: k - 1]]:
            labels[i] = label
            remaining.remove(i)

    label = 0
    while len(remaining) >= 3 * k:
        r = farthest(centroid())
        group(r, label)
        group(farthest(rows[r]), label + 1)
        label += 2
    if len(remaining) >= 2 * k:
        group(farthest(centroid()), label)
        label += 1
    for i in list(remaining):
        labels[i] = label
    return labels


def _same(values: NDArray[np.float64], k: int) -> Microaggregation:
    fast = mdav(values, k)
    reference = mdav_reference(values, k)
    np.testing.assert_array_equal(fast.groups, reference.groups)
    assert fast.centroids.tobytes() == reference.centroids.tobytes()
    return fast


def _check_sizes(result: Microaggregation, n: int, k: int) -> None:
    sizes = result.sizes
    assert sizes.sum() == n and result.n_groups == sizes.size
    assert sizes.min() >= k
    assert sizes.max() <= max(2 * k - 1, k)
    # Every group but the last one has exactly k records (classic MDAV).
    assert np.all(sizes[:-1] == k)
    # Labels are numbered in order of formation: label g appears before g+1 is complete.
    assert set(result.groups.tolist()) == set(range(result.n_groups))


# ---------------------------------------------------------------- fast == reference == oracle


@pytest.mark.parametrize(
    ("n", "m", "k"),
    [(1, 1, 1), (3, 2, 3), (5, 2, 3), (8, 3, 3), (9, 3, 3), (11, 2, 4), (30, 2, 1), (57, 4, 5),
     (200, 3, 7), (400, 10, 5), (1500, 6, 3)],
)
def test_fast_equals_reference_on_random_data(n: int, m: int, k: int) -> None:
    x = np.random.default_rng(n * 31 + k).normal(size=(n, m)) * np.geomspace(1, 1e4, m)
    result = _same(x, k)
    _check_sizes(result, n, k)


@pytest.mark.parametrize("seed", range(6))
def test_ties_and_duplicates_follow_the_documented_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 120))
    k = int(rng.integers(2, 6))
    # A few distinct values per attribute: most distances tie, many records are exact duplicates.
    x = rng.integers(0, 3, size=(n, 2)).astype(np.float64)
    result = _same(x, k)
    assert result.groups.tolist() == _oracle_labels(x, k)
    _check_sizes(result, n, k)


def test_symmetric_ties_pick_the_smallest_index() -> None:
    # Records 0 and 1 are equally far from the centroid (0): record 0 starts the first group; the
    # farthest from it is record 1 (also the tie with 3 is broken towards 1); duplicates 4,5 and 6,7
    # join by index.
    x = np.array([[-3.0], [3.0], [0.0], [3.0], [-3.0], [0.0], [0.0], [-3.0], [3.0]])
    result = _same(x, 2)
    assert result.groups.tolist() == _oracle_labels(x, 2)
    assert result.groups[0] == 0 and result.groups[4] == 0
    assert result.groups[1] == 1 and result.groups[3] == 1


def test_many_identical_records_and_constant_columns() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(size=(40, 3))
    x = np.vstack([base, np.repeat(base[:3], 30, axis=0)])
    x = np.column_stack([x, np.full(x.shape[0], 0.1)])  # a constant column (0.1 is inexact in binary)
    result = _same(x, 4)
    _check_sizes(result, x.shape[0], 4)
    assert np.all(standardize_to_grid(x).values[:, 3] == 0.0)
    assert result.groups.tolist() == _oracle_labels(x, 4)
    assert np.allclose(result.centroids[:, 3], 0.1)


def test_all_records_equal() -> None:
    x = np.ones((13, 2))
    result = _same(x, 3)
    assert result.groups.tolist() == _oracle_labels(x, 3)
    assert np.all(result.masked() == 1.0)


def test_fast_equals_reference_mid_size_with_ties() -> None:
    rng = np.random.default_rng(11)
    x = np.column_stack([rng.normal(size=4000), rng.integers(0, 5, 4000), np.round(rng.normal(size=4000), 1)])
    _check_sizes(_same(x, 5), 4000, 5)


@pytest.mark.parametrize("k", [2, 5])
def test_blas_and_einsum_scans_form_the_same_groups(k: int) -> None:
    # The scanner's product runs on BLAS (pinned to one thread) or on numpy's einsum: the candidates
    # differ only within the error bound, so the groups must not.
    rng = np.random.default_rng(5)
    x = np.column_stack([rng.normal(size=3000), rng.integers(0, 4, 3000), rng.normal(size=(3000, 6))])
    data = standardize_to_grid(x)
    with_blas = mdav_module._mdav_loop(data, k, None, use_blas=True)
    with_einsum = mdav_module._mdav_loop(data, k, None, use_blas=False)
    assert with_blas.tolist() == with_einsum.tolist() == _oracle_labels(x, k)


def test_blas_is_pinned_to_one_thread_only_inside_mdav() -> None:
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [int(info["num_threads"]) for info in threadpool_info() if info["user_api"] == "blas"]

    before = blas_threads()
    with mdav_module._single_threaded_blas() as pinned:
        if before:
            assert pinned
            assert set(blas_threads()) == {1}
        else:  # a numpy without a BLAS threadpoolctl knows: einsum, unless the environment pinned BLAS
            assert pinned == mdav_module._BLAS_PINNED_BY_ENVIRONMENT
    assert blas_threads() == before


# ---------------------------------------------------------------- API


def test_centroids_are_group_means_in_original_units() -> None:
    x = np.random.default_rng(3).normal(size=(50, 3)) * [1.0, 100.0, 1e6] + [0.0, 5.0, -3e6]
    result = mdav(x, 4)
    for g in range(result.n_groups):
        np.testing.assert_allclose(result.centroids[g], x[result.groups == g].mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(result.masked(), result.centroids[result.groups])
    assert result.k == 4


def test_first_group_holds_the_record_farthest_from_the_centroid() -> None:
    x = np.vstack([np.zeros((9, 2)), [[50.0, 50.0]]])
    result = mdav(x, 3)
    assert result.groups[9] == 0


def test_k_one_keeps_every_record_alone() -> None:
    x = np.random.default_rng(5).normal(size=(25, 2))
    result = _same(x, 1)
    assert result.n_groups == 25
    np.testing.assert_array_equal(result.masked(), x)


@pytest.mark.parametrize("k", [0, -2, 6])
def test_bad_k_is_an_input_error(k: int) -> None:
    with pytest.raises(InputError, match="k"):
        mdav(np.zeros((5, 2)), k)
    with pytest.raises(InputError, match="k"):
        mdav_reference(np.zeros((5, 2)), k)


def test_missing_values_and_empty_input_are_input_errors() -> None:
    with pytest.raises(InputError, match="missing"):
        mdav(np.array([[1.0], [np.nan], [2.0]]), 1)
    with pytest.raises(InputError):
        mdav(np.zeros((0, 2)), 1)


def test_squared_distances_are_independent_of_the_other_rows() -> None:
    rng = np.random.default_rng(9)
    rows = rng.normal(size=(300, 10))
    point = rng.normal(size=10)
    together = squared_distances(rows, point)
    alone = np.array([squared_distances(rows[i : i + 1], point)[0] for i in range(300)])
    assert together.tobytes() == alone.tobytes()


# ---------------------------------------------------------------- literature anchors (SSE/SST in %)

CENSUS_SSE = {3: 5.69, 4: 7.49, 5: 9.09, 10: 14.16}
TARRAGONA_SSE = {3: 16.93, 4: 19.55, 5: 22.46, 10: 33.19}


@pytest.mark.parametrize("k", sorted(CENSUS_SSE))
def test_census_sse_sst_matches_the_literature(census_csv: Path, k: int) -> None:
    x = load_csv(census_csv).values
    assert x.shape == (1080, 13)
    result = _same(x, k)
    assert round(sse_sst_percent(x, result.groups), 2) == CENSUS_SSE[k]


@pytest.mark.parametrize("k", sorted(TARRAGONA_SSE))
def test_tarragona_sse_sst_matches_the_literature(tarragona_csv: Path, k: int) -> None:
    x = load_csv(tarragona_csv).values
    assert x.shape == (834, 13)
    result = _same(x, k)
    assert round(sse_sst_percent(x, result.groups), 2) == TARRAGONA_SSE[k]


# ---------------------------------------------------------------- partitioned variant


def test_partitioned_is_close_to_exact_and_exact_for_one_block() -> None:
    x = np.random.default_rng(21).normal(size=(6000, 5))
    exact = mdav(x, 5)
    one_block = mdav_partitioned(x, 5, block_size=6000)
    np.testing.assert_array_equal(one_block.groups, exact.groups)
    split = mdav_partitioned(x, 5, block_size=3000)  # two blocks
    assert split.sizes.min() >= 5 and split.sizes.max() <= 9
    ratio = sse_sst_percent(x, split.groups) / sse_sst_percent(x, exact.groups)
    assert 0.95 <= ratio <= 1.05
    assert not np.array_equal(split.groups, exact.groups)


def test_partitioned_rejects_tiny_blocks() -> None:
    with pytest.raises(InputError, match="block_size"):
        mdav_partitioned(np.zeros((50, 2)), 5, block_size=9)


# ---------------------------------------------------------------- progress and other inputs


@pytest.mark.parametrize(("n", "k"), [(1, 1), (29, 3), (200, 7), (1000, 5)])
def test_progress_reports_every_group_and_changes_nothing(n: int, k: int) -> None:
    x = np.random.default_rng(n).normal(size=(n, 3))
    sizes: list[int] = []
    result = mdav_with_progress(x, k, sizes.append)
    exact = mdav(x, k)
    np.testing.assert_array_equal(result.groups, exact.groups)
    # One call per group, in the order the groups were formed, with each group's size.
    assert sizes == exact.sizes.tolist()
    blocks: list[int] = []
    split = mdav_with_progress(x, k, blocks.append, block_size=max(2 * k, n // 3))
    np.testing.assert_array_equal(split.groups, mdav_partitioned(x, k, block_size=max(2 * k, n // 3)).groups)
    assert sum(blocks) == n and blocks == split.sizes.tolist()


def test_datasets_and_dataframes_are_accepted() -> None:
    x = np.random.default_rng(2).normal(size=(40, 2))
    expected = mdav(x, 3)
    np.testing.assert_array_equal(mdav(Dataset.from_array(x), 3).groups, expected.groups)
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(x, columns=["a", "b"])
    np.testing.assert_array_equal(mdav(frame, 3).groups, expected.groups)
    levels = ["low", "mid", "high"]
    frame["level"] = pd.Categorical([levels[i % 3] for i in range(40)], categories=levels, ordered=True)
    ranks = np.array([i % 3 + 1 for i in range(40)], dtype=float)
    with_ranks = mdav(np.column_stack([x, ranks]), 3)
    np.testing.assert_array_equal(mdav(frame, 3).groups, with_ranks.groups)
    frame["name"] = [f"n{i}" for i in range(40)]
    with pytest.raises(InputError, match="not numeric"):
        mdav(frame, 3)
    with pytest.raises(InputError, match="numeric"):
        mdav([["1", "x"], ["2", "3"]], 1)


def test_squared_distances_add_left_to_right_whatever_the_number_of_rows() -> None:
    """Small and large candidate sets take different code paths; both must give the bits of a strictly
    left-to-right sum (`np.cumsum`), so that a record's distance never depends on its company."""
    from coutil.sdc.mdav import _COLUMN_LOOP_FROM, squared_distances

    rng = np.random.default_rng(7)
    rows = rng.standard_normal((3 * _COLUMN_LOOP_FROM, 10)) * 10.0 ** rng.integers(-6, 6, size=10)
    point = rng.standard_normal(10)
    expected = np.cumsum(np.square(rows - point), axis=1)[:, -1]
    for count in (1, _COLUMN_LOOP_FROM - 1, _COLUMN_LOOP_FROM, 3 * _COLUMN_LOOP_FROM):
        assert np.array_equal(squared_distances(rows[:count], point), expected[:count])
    # Each row's distance is the same alone and in company.
    assert all(squared_distances(rows[i:i + 1], point)[0] == expected[i] for i in range(0, rows.shape[0], 97))
