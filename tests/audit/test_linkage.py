"""Tests of the classical linkage attacks (coutil.audit.linkage)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from coutil.audit.linkage import (
    GLOBAL_LINKAGE_MAX_RECORDS,
    LinkageScore,
    distance_linkage,
    global_linkage,
    rank_swap_intersection_attack,
    resolve_true_mapping,
    score_linkages,
    swap_window,
)
from coutil.errors import InputError

# Torra's worked example (slides 58-60 of 003_b47b63cd83368cfb.txt): 10 records, 4 attributes, values
# 1..10 in each column, rank swapping with a window of 2 ranks. Row i of MASKED is the masked row i.
ORIGINAL = np.array(
    [
        [8, 9, 1, 3],
        [6, 7, 10, 2],
        [10, 3, 4, 1],
        [7, 1, 2, 6],
        [9, 4, 6, 4],
        [2, 2, 8, 8],
        [1, 10, 3, 9],
        [4, 8, 7, 10],
        [5, 5, 5, 5],
        [3, 6, 9, 7],
    ],
    dtype=np.float64,
)
MASKED = np.array(
    [
        [10, 10, 3, 5],
        [5, 5, 8, 1],
        [8, 4, 2, 2],
        [9, 2, 4, 4],
        [7, 3, 5, 6],
        [4, 1, 10, 10],
        [3, 9, 1, 7],
        [2, 6, 9, 8],
        [6, 7, 6, 3],
        [1, 8, 7, 9],
    ],
    dtype=np.float64,
)
# The slides' B_j(x_2) for x_2 = (6, 7, 10, 2), as masked records.
SLIDE_B_SETS = [
    {(4, 1, 10, 10), (5, 5, 8, 1), (6, 7, 6, 3), (7, 3, 5, 6), (8, 4, 2, 2)},
    {(5, 5, 8, 1), (2, 6, 9, 8), (6, 7, 6, 3), (1, 8, 7, 9), (3, 9, 1, 7)},
    {(5, 5, 8, 1), (2, 6, 9, 8), (4, 1, 10, 10)},
    {(5, 5, 8, 1), (8, 4, 2, 2), (6, 7, 6, 3), (9, 2, 4, 4)},
]


def _as_records(rows: NDArray[np.intp]) -> set[tuple[int, ...]]:
    return {tuple(int(v) for v in MASKED[r]) for r in rows}


def test_slide_example_single_attribute_sets() -> None:
    # p = 20% of 10 records = a window of 2 ranks.
    assert swap_window(20, 10) == 2
    for j, expected in enumerate(SLIDE_B_SETS):
        result = rank_swap_intersection_attack(ORIGINAL[:, [j]], MASKED[:, [j]], 20)
        assert _as_records(result.candidates[1]) == expected


def test_slide_example_intersection_is_the_true_record() -> None:
    result = rank_swap_intersection_attack(ORIGINAL, MASKED, 20, true_mapping="identity")
    assert result.window == 2
    assert _as_records(result.candidates[1]) == {(5, 5, 8, 1)}
    # With the right p the true record is always a candidate (the slides' "no uncertainty").
    assert result.contains_true_fraction == 1.0
    sizes = result.candidate_sizes
    assert result.mean_candidate_size == pytest.approx(float(sizes.mean()))
    assert result.unique_fraction == pytest.approx(float(np.mean(sizes == 1)))
    # Every unique candidate is then the true one.
    assert result.unique_correct_fraction == result.unique_fraction
    # A too small window can exclude the true record.
    narrow = rank_swap_intersection_attack(ORIGINAL, MASKED, 0, true_mapping="identity")
    assert narrow.contains_true_fraction is not None and narrow.contains_true_fraction < 1.0


def _tiny_rank_swap(column: NDArray[np.float64], p: float, rng: np.random.Generator) -> NDArray[np.float64]:
    """Rank swapping as on slide 41: a_i swapped with an unswapped a_l, l in [i+1, i + p*n/100]."""
    n = column.size
    order = np.argsort(column, kind="stable")
    values = column[order].copy()
    swapped = np.zeros(n, dtype=bool)
    width = math.floor(p * n / 100 + 1e-9)
    for i in range(n):
        if swapped[i]:
            continue
        choices = [ell for ell in range(i + 1, min(n - 1, i + width) + 1) if not swapped[ell]]
        if choices:
            ell = int(rng.choice(choices))
            values[i], values[ell] = values[ell], values[i]
            swapped[i] = swapped[ell] = True
    out = np.empty(n)
    out[order] = values
    return out


def _swap_all(data: NDArray[np.float64], p: float, seed: int) -> NDArray[np.float64]:
    rng = np.random.default_rng(seed)
    return np.column_stack([_tiny_rank_swap(data[:, j], p, rng) for j in range(data.shape[1])])


def test_intersection_on_rank_swapped_data_with_ties() -> None:
    rng = np.random.default_rng(7)
    # Integer data: many tied values, handled by rank intervals.
    data = rng.integers(0, 40, size=(300, 4)).astype(np.float64)
    sizes = []
    for p in (2, 6, 15):
        masked = _swap_all(data, p, seed=p)
        result = rank_swap_intersection_attack(data, masked, p, true_mapping="identity")
        assert result.contains_true_fraction == 1.0
        assert np.all(result.candidate_sizes >= 1)
        sizes.append(result.mean_candidate_size)
    # Wider swaps leave more candidates.
    assert sizes[0] < sizes[1] < sizes[2]


def test_intersection_without_swap_identifies_distinct_records() -> None:
    rng = np.random.default_rng(3)
    data = rng.normal(size=(200, 3))
    shuffle = rng.permutation(200)
    result = rank_swap_intersection_attack(data, data[shuffle], 0, true_mapping=np.argsort(shuffle))
    assert result.unique_fraction == 1.0
    assert result.unique_correct_fraction == 1.0
    assert result.score is not None and result.score.correct_rate == 1.0


def test_intersection_with_project_rank_swap() -> None:
    masking = pytest.importorskip("coutil.sdc.masking")
    rng = np.random.default_rng(11)
    continuous = rng.normal(size=(400, 3))
    integers = rng.integers(0, 30, size=(400, 3)).astype(np.float64)
    for data in (continuous, integers):
        for p in (2.0, 5.0):
            masked = masking.rank_swap(data, p, seed=100)
            result = rank_swap_intersection_attack(data, masked, p, true_mapping="identity")
            # The attack's window is the swap's window, so the true record is never excluded.
            assert result.contains_true_fraction == 1.0
            assert 0.0 < result.unique_fraction <= 1.0
            assert result.unique_correct_fraction == result.unique_fraction


def test_score_linkages_credits_ties() -> None:
    matches = [np.array([0]), np.array([1, 2]), np.array([0, 1, 2, 3]), np.array([2]), np.array([], np.intp)]
    truth = np.array([0, 2, 1, 1, 4])
    score = score_linkages(matches, truth)
    assert score == LinkageScore(correct_rate=(1 + 0.5 + 0.25) / 5, unique_correct=1, multiple=2)


def test_distance_linkage_identity_and_ties() -> None:
    rng = np.random.default_rng(1)
    data = rng.normal(size=(50, 3)) * [1, 100, 0.01]
    exact = distance_linkage(data, data, true_mapping="identity")
    assert exact.score is not None and exact.score.correct_rate == 1.0
    assert np.allclose(exact.distances, 0.0)
    # A release with a duplicated row: both copies tie for the duplicated record.
    release = data.copy()
    release[5] = release[4]
    tied = distance_linkage(data, release, true_mapping="identity")
    assert list(tied.matches[4]) == [4, 5]
    assert tied.score is not None
    assert tied.score.multiple >= 1
    assert tied.score.unique_correct <= 48


@pytest.mark.parametrize("metric", ["euclidean", "mahalanobis"])
def test_distance_linkage_noise_and_scale_invariance(metric: str) -> None:
    rng = np.random.default_rng(2)
    data = rng.multivariate_normal([0, 0, 0], [[1, 0.8, 0.2], [0.8, 1, 0.1], [0.2, 0.1, 1]], size=300)
    small = data + rng.normal(scale=0.05, size=data.shape)
    large = data + rng.normal(scale=1.0, size=data.shape)
    good = distance_linkage(data, small, metric=metric, true_mapping="identity")  # type: ignore[arg-type]
    bad = distance_linkage(data, large, metric=metric, true_mapping="identity")  # type: ignore[arg-type]
    assert good.score is not None and bad.score is not None
    assert good.score.correct_rate > 0.9
    assert bad.score.correct_rate < good.score.correct_rate
    # Rescaling an attribute in both files changes nothing (z-scores / Mahalanobis are scale-free).
    scale = np.array([1000.0, 1.0, 0.001])
    scaled = distance_linkage(data * scale, large * scale, metric=metric, true_mapping="identity")  # type: ignore[arg-type]
    assert [list(m) for m in scaled.matches] == [list(m) for m in bad.matches]


def test_global_linkage_is_one_to_one_and_beats_greedy() -> None:
    # Small noise: nearest-neighbour linkage sends several originals to the same release record,
    # the one-to-one assignment cannot, and recovers more true pairs.
    rng = np.random.default_rng(4)
    data = rng.normal(size=(200, 2))
    release = data + rng.normal(scale=0.05, size=data.shape)
    greedy = distance_linkage(data, release, true_mapping="identity")
    glob = global_linkage(data, release, true_mapping="identity")
    assert len({int(m[0]) for m in greedy.matches}) < 200
    assert sorted(int(m[0]) for m in glob.matches) == list(range(200))
    assert glob.score is not None and greedy.score is not None
    assert glob.score.correct_rate > greedy.score.correct_rate + 0.05
    # The assignment's distances are those of the chosen pairs.
    zs = (data - data.mean(0)) / data.std(0)
    zr = (release - release.mean(0)) / release.std(0)
    chosen = np.array([int(m[0]) for m in glob.matches])
    assert np.allclose(glob.distances, np.linalg.norm(zs - zr[chosen], axis=1))
    # Fewer release rows than originals: the unassigned records get no match.
    short = global_linkage(data[:5], release[:3])
    assert sum(m.size for m in short.matches) == 3
    assert int(np.isnan(short.distances).sum()) == 2


def test_global_linkage_cap_and_input_errors() -> None:
    big = np.zeros((GLOBAL_LINKAGE_MAX_RECORDS + 1, 1))
    with pytest.raises(InputError, match="global linkage"):
        global_linkage(big, big)
    with pytest.raises(InputError, match="attributes"):
        distance_linkage(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(InputError, match="metric"):
        distance_linkage(np.zeros((3, 2)), np.zeros((3, 2)), metric="manhattan")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="swap parameter"):
        rank_swap_intersection_attack(ORIGINAL, MASKED, -1)


def test_resolve_true_mapping() -> None:
    assert resolve_true_mapping(None, 3, 3) is None
    assert list(resolve_true_mapping("identity", 3, 3)) == [0, 1, 2]  # type: ignore[arg-type]
    assert list(resolve_true_mapping([2, 0, 1], 3, 3)) == [2, 0, 1]  # type: ignore[arg-type]
    with pytest.raises(InputError, match="identity"):
        resolve_true_mapping("identity", 3, 4)
    with pytest.raises(InputError, match="outside"):
        resolve_true_mapping([0, 1, 5], 3, 3)
    with pytest.raises(InputError, match="unknown true mapping"):
        resolve_true_mapping("shuffle", 3, 3)
