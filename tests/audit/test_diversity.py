"""The diversity criteria of the windows S^j(d) (coutil.audit.diversity) and the (d, v[, f]) check
(coutil.audit.privacy_check) against plain references written here from the definitions: each window
is sliced out of the sorted column and measured value by value, with Python loops and dictionaries."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from coutil.audit.diversity import (
    CRITERIA,
    DiversityCriterion,
    lower_is_safer,
    meets,
    parse_criterion,
    validate_thresholds,
    window_diversity,
    worst,
)
from coutil.audit.privacy_check import check_permuted_privacy
from coutil.audit.ranks import RankIndex
from coutil.errors import InputError
from tests.audit.test_paper_tables import TABLE3_DEVIATIONS, TABLE4, TABLE4_DATASET
from tests.audit.test_ranks import ref_gap, ref_nearest, ref_rank_interval, ref_star, release_and_records, search_path

Matrix = NDArray[np.float64]
NAMES = ["X1", "X2", "X3"]


# ------------------------------------------------------------------------------- the reference


def ref_window(release: Matrix, lo: int, hi: int, d: int, j: int) -> list[float]:
    """S^j(d): the sorted values of attribute j whose 1-based rank lies in [lo - d, hi + d]."""
    column = sorted(float(value) for value in release[:, j])
    return [value for rank, value in enumerate(column, start=1) if lo - d <= rank <= hi + d]


def ref_measure(window: list[float], column: list[float], criterion: str) -> float:
    if criterion == "variance":
        mean = sum(window) / len(window)
        return sum((value - mean) ** 2 for value in window) / len(window)
    counts = Counter(window)
    if criterion == "distinct-l":
        return float(len(counts))
    if criterion == "entropy-l":
        return math.exp(-sum(c / len(window) * math.log(c / len(window)) for c in counts.values()))
    # t-closeness: EMD with the ordered distance |i - k| / (D - 1) over the column's distinct values.
    support = sorted(set(column))
    if len(support) < 2:
        return 0.0
    whole = Counter(column)
    total, running = 0.0, 0.0
    for value in support:
        running += counts[value] / len(window) - whole[value] / len(column)
        total += abs(running)
    return total / (len(support) - 1)


def ref_meets(criterion: str, measure: float, threshold: float) -> bool:
    # Thresholds are compared with a relative slack of 1e-9 (documented): two windows with the same
    # values can get variances one rounding step apart, and a threshold there must not split them.
    slack = 1e-9 * abs(threshold) + 1e-12
    return measure <= threshold + slack if criterion == "t-closeness" else measure >= threshold - slack


# ----------------------------------------------------------------------------------- properties


@settings(max_examples=120, deadline=None)
@given(
    data=release_and_records(),
    criterion=st.sampled_from(CRITERIA),
    path=st.sampled_from(["brute", "tree"]),
    seed=st.integers(0, 2**16),
)
def test_window_measures_agree_with_reference(
    data: tuple[Matrix, Matrix], criterion: DiversityCriterion, path: str, seed: int
) -> None:
    release, records = data
    distances = np.random.default_rng(seed).integers(0, 6, size=records.shape)  # one d^j per attribute
    with search_path(path):
        index = RankIndex.build(release)
        lo, hi = index.star(records)
        measures = window_diversity(index, lo, hi, distances, criterion)
    for i in range(records.shape[0]):
        for j in range(release.shape[1]):
            window = ref_window(release, int(lo[i, j]), int(hi[i, j]), int(distances[i, j]), j)
            expected = ref_measure(window, [float(v) for v in release[:, j]], criterion)
            assert measures[i, j] == pytest.approx(expected, rel=1e-9, abs=1e-12), (criterion, i, j)


@settings(max_examples=100, deadline=None)
@given(data=release_and_records(), criterion=st.sampled_from(CRITERIA), d=st.integers(0, 5), data_draw=st.data())
def test_check_agrees_with_reference(
    data: tuple[Matrix, Matrix], criterion: DiversityCriterion, d: int, data_draw: st.DataObject
) -> None:
    release, records = data
    n, m = release.shape
    columns = [[float(v) for v in release[:, j]] for j in range(m)]
    stars = [ref_star(release, record) for record in records]
    mapped = data_draw.draw(st.none() | st.lists(st.integers(0, n - 1), min_size=len(records), max_size=len(records)))
    measures = [
        [ref_measure(ref_window(release, lo[j], hi[j], d, j), columns[j], criterion) for j in range(m)]
        for lo, hi in stars
    ]
    # Thresholds on both sides of the measures, and exactly at them (equality holds).
    pool = sorted({value for row in measures for value in row} | {0.0, 0.5, 1.0})
    thresholds = [data_draw.draw(st.sampled_from(pool)) for _ in range(m)]
    result = check_permuted_privacy(records, release, d, thresholds, criterion=criterion, mapping=mapped)
    for i, (lo, hi) in enumerate(stars):
        if mapped is None:
            distance_ok = ref_nearest(release, lo, hi)[0] >= d
            deviation_ok = [True] * m
        else:
            row = [ref_rank_interval(release[:, j], float(release[mapped[i], j])) for j in range(m)]
            deviation_ok = [ref_gap(row[j], (lo[j], hi[j])) >= d for j in range(m)]
            distance_ok = all(deviation_ok)
        diverse = [ref_meets(criterion, measures[i][j], thresholds[j]) for j in range(m)]
        assert bool(result.record_holds[i]) == (distance_ok and all(diverse)), i
        failing = [f"attribute {j + 1}" for j in range(m) if not (deviation_ok[j] and diverse[j])]
        assert result.failing_attributes(i) == failing, i
    assert result.holds == bool(np.all(result.record_holds))


# ------------------------------------------------------------------------------ running example


def _read(folder: Path, name: str) -> Matrix:
    return np.loadtxt(folder / name, delimiter=",", skiprows=1)


@pytest.fixture
def xy(running_example: Path) -> tuple[Matrix, Matrix]:
    return _read(running_example, "X.csv"), _read(running_example, "Y.csv")


def test_paper_conclusion_and_named_failures(xy: tuple[Matrix, Matrix]) -> None:
    x, y = xy
    dataset_d, printed = TABLE4_DATASET
    # The paper: (1, (0.01, 11.07, 30.26))-permuted privacy holds. Its v is rounded: X1's minimum is
    # 0.009025, so v1 = 0.009 holds and v1 = 0.01 fails.
    holds = check_permuted_privacy(x, y, dataset_d, [0.009, *printed[1:]], names=NAMES)
    assert holds.holds and holds.failing_attributes() == [] and holds.failing_records().size == 0
    for j, name in enumerate(NAMES):
        # Just above the printed minimum of attribute j (half a unit of the last printed digit): only
        # the records printed at that minimum in Table 4 (variance at d = 1) fail, on attribute j only.
        thresholds = [0.0, 0.0, 0.0]
        thresholds[j] = printed[j] + 0.005
        result = check_permuted_privacy(x, y, dataset_d, thresholds, names=NAMES)
        expected = [r for r, row in TABLE4.items() if row[2 + j][0] == printed[j]]
        assert not result.holds
        assert result.failing_attributes() == [name]
        assert (result.failing_records() + 1).tolist() == expected
        assert all(result.failing_attributes(r - 1) == [name] for r in expected)
        assert result.failing_attributes(expected[0] % 20) == []  # a record that holds
    # d = 2: the records at permutation distance 1 fail as a whole; no attribute is to blame.
    short = check_permuted_privacy(x, y, 2, [0, 0, 0], names=NAMES)
    assert (short.failing_records() + 1).tolist() == [r for r, row in TABLE4.items() if row[1] < 2]
    assert short.failing_attributes() == []
    assert short.problems() == ["permutation distance below d = 2 for 4 record(s)"]


def test_mapping_form_on_table3(xy: tuple[Matrix, Matrix]) -> None:
    x, y = xy
    # Record 3 against its own masked record (identity f) and against its closest record 10.
    own = [int(v) for v in TABLE3_DEVIATIONS[2][:3]]
    closest = [int(v) for v in TABLE3_DEVIATIONS[9][:3]]
    identity = check_permuted_privacy(x[2:3], y, own, [0, 0, 0], mapping=[2], names=NAMES)
    assert identity.holds and identity.form == "mapping"
    assert identity.deviations is not None and identity.deviations[0].tolist() == own
    tighter = check_permuted_privacy(x[2:3], y, [own[0], own[1] + 1, own[2]], [0, 0, 0], mapping=[2], names=NAMES)
    assert not tighter.holds and tighter.failing_attributes() == ["X2"]
    # A vector d without a mapping: the subject's approximation f(x) = the closest record.
    approx = check_permuted_privacy(x[2:3], y, closest, [0, 0, 0], names=NAMES)
    assert approx.mapping is not None and approx.mapping.tolist() == [9]
    assert approx.holds
    # Windows at d^j per attribute: S^1(4), S^2(1), S^3(4) of Table 3's record.
    index = RankIndex.build(y)
    lo, hi = index.star(x[2:3])
    for j in range(3):
        window = ref_window(y, int(lo[0, j]), int(hi[0, j]), closest[j], j)
        assert approx.diversity[0, j] == pytest.approx(ref_measure(window, list(y[:, j]), "variance"))
    identity_all = check_permuted_privacy(x, y, 0, [0, 0, 0], mapping="identity", names=NAMES)
    assert identity_all.deviations is not None and identity_all.deviations[2].tolist() == own


def test_alternative_criteria_without_ties(xy: tuple[Matrix, Matrix]) -> None:
    x, y = xy
    index = RankIndex.build(y)
    lo, hi = index.star(x)
    for d in (0, 1, 4, 30):
        # No ties: every window value is distinct, so both l's are the window's size.
        size = np.minimum(hi + d, 20) - np.maximum(lo - d, 1) + 1
        assert np.array_equal(window_diversity(index, lo, hi, d, "distinct-l"), size)
        assert np.allclose(window_diversity(index, lo, hi, d, "entropy-l"), size, rtol=1e-12)
    # A window covering the whole column has its distribution: t = 0.
    assert np.all(window_diversity(index, lo, hi, 20, "t-closeness") == 0.0)
    entropy = check_permuted_privacy(x, y, 1, [3, 3, 3], criterion="entropy-l", names=NAMES)
    # Windows of 3 values, except where y* is the lowest or highest value (rank 1 or 20).
    expected = sorted({i + 1 for i, j in zip(*np.nonzero((lo == 1) | (hi == 20)), strict=True)})
    assert (entropy.failing_records() + 1).tolist() == expected
    assert entropy.worst_diversity().tolist() == pytest.approx([2.0, 2.0, 2.0])


def test_thresholds_and_helpers() -> None:
    assert [parse_criterion(c) for c in CRITERIA] == list(CRITERIA)
    with pytest.raises(InputError, match="t-closeness"):
        parse_criterion("k-anonymity")
    with pytest.raises(InputError, match="one threshold per attribute"):
        validate_thresholds("variance", [1, 2], 3)
    with pytest.raises(InputError, match="between 0 and 1"):
        validate_thresholds("t-closeness", [0.5, 2], 2)
    with pytest.raises(InputError, match="non-negative"):
        validate_thresholds("entropy-l", [-1], 1)
    # exp(log 3) is 2.9999999999999996: a window of three values is 3-diverse.
    assert meets("entropy-l", [[math.exp(math.log(3))]], [3]).tolist() == [[True]]
    assert meets("t-closeness", [[0.3, 0.31]], [0.3, 0.3]).tolist() == [[True, False]]
    assert lower_is_safer("t-closeness") and not lower_is_safer("variance")
    assert worst("t-closeness", [[0.1, 0.5], [0.4, 0.2]]).tolist() == [0.4, 0.5]
    assert worst("variance", [[0.1, 0.5], [0.4, 0.2]]).tolist() == [0.1, 0.2]
    release = np.arange(12, dtype=np.float64).reshape(4, 3)
    with pytest.raises(InputError, match="needs a record mapping"):
        from coutil.audit.privacy_check import check_records

        index = RankIndex.build(release)
        lo, hi = index.star(release)
        check_records(index, lo, hi, [0, 0, 0, 0], [1, 1, 1], [0, 0, 0])
    with pytest.raises(InputError, match="non-negative integers"):
        check_permuted_privacy(release, release, -1, [0, 0, 0])
    with pytest.raises(InputError, match="one per attribute"):
        check_permuted_privacy(release, release, [1, 1], [0, 0, 0])
    with pytest.raises(InputError, match="identity mapping"):
        check_permuted_privacy(release[:2], release, 1, [0, 0, 0], mapping="identity")
    with pytest.raises(InputError, match="window distances"):
        RankIndex.build(release).window_bounds(lo, hi, np.zeros((2, 3), dtype=np.int64))
