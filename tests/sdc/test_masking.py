"""Masking baselines: reproducibility, the defining properties of each method, parameter errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.errors import InputError
from coutil.sdc import masking
from coutil.sdc.masking import (
    additive_noise,
    local_anonymization,
    multiplicative_noise,
    perturb_record,
    rank_swap,
    rank_swap_column,
    rank_swap_window,
    synthetic_normal,
)


def _data(n: int = 500, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n, 1))
    return np.hstack([50 + 10 * base, 3000 + 800 * (base + rng.normal(size=(n, 1))), rng.gamma(2.0, 3.0, (n, 1))])


ALL_METHODS = [
    lambda x, s: rank_swap(x, 10, s),
    lambda x, s: additive_noise(x, 0.2, s),
    lambda x, s: multiplicative_noise(x, 0.2, s),
    synthetic_normal,
    lambda x, s: local_anonymization(x, x.std(axis=0), 0.2, s),
]


@pytest.mark.parametrize("method", ALL_METHODS)
def test_same_seed_same_output_other_seed_other_output(method: object) -> None:
    x = _data()
    before = x.copy()
    first = method(x, 7)  # type: ignore[operator]
    again = method(x, 7)  # type: ignore[operator]
    other = method(x, 8)  # type: ignore[operator]
    assert first.shape == x.shape
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(x, before)  # the input is never modified


def test_generator_is_accepted_and_bad_seed_rejected() -> None:
    x = _data(50)
    np.testing.assert_array_equal(additive_noise(x, 0.1, np.random.default_rng(3)), additive_noise(x, 0.1, 3))
    with pytest.raises(InputError, match="seed"):
        additive_noise(x, 0.1, -1)


def test_rank_swap_window_is_floor_of_p_percent_of_n() -> None:
    assert rank_swap_window(1000, 5) == 50
    assert rank_swap_window(10, 25) == 2
    assert rank_swap_window(2750, 2.8) == 77  # 76.99999999999999 in floats
    assert rank_swap_window(10, 5) == 0


@given(
    values=st.lists(st.integers(-50, 50), min_size=1, max_size=60),
    p=st.floats(0, 100),
    seed=st.integers(0, 2**32),
)
@settings(max_examples=150, deadline=None)
def test_rank_swap_preserves_marginal_and_bounds_rank_moves(values: list[int], p: float, seed: int) -> None:
    column = np.asarray(values, dtype=np.float64)
    out = rank_swap_column(column, p, np.random.default_rng(seed))
    np.testing.assert_array_equal(np.sort(out), np.sort(column))
    n = column.size
    window = rank_swap_window(n, p)
    order = np.argsort(column, kind="stable")
    rank_of_record = np.empty(n, dtype=np.int64)
    rank_of_record[order] = np.arange(n)
    sorted_values = column[order]
    # Each record's new value must occur within `window` ranks of its own rank (ties make the
    # exact source rank ambiguous, so look for the value anywhere in the window).
    for i in range(n):
        r = rank_of_record[i]
        lo, hi = max(0, r - window), min(n - 1, r + window)
        assert out[i] in sorted_values[lo : hi + 1]


def test_rank_swap_pairs_values_and_swaps_almost_everything() -> None:
    column = np.arange(1.0, 1001.0)  # distinct values: rank = value - 1
    out = rank_swap_column(column, 5, np.random.default_rng(0))
    moved = out != column
    # Each swap is a transposition: if record a got b's value, b got a's.
    partner = (out - 1).astype(int)
    np.testing.assert_array_equal(partner[partner], np.arange(1000))
    assert np.abs(out - column).max() <= 50
    # Only the last few ranks can lack an unswapped partner.
    assert moved.sum() >= 1000 - 50
    assert np.all(out[~moved] == column[~moved])


def test_rank_swap_p_zero_is_identity_and_p_out_of_range_rejected() -> None:
    x = _data(100)
    np.testing.assert_array_equal(rank_swap(x, 0, 1), x)
    with pytest.raises(InputError, match="p"):
        rank_swap(x, 101, 1)
    with pytest.raises(InputError, match="p"):
        rank_swap(x, float("nan"), 1)


def test_rank_swap_torra_example_window() -> None:
    # Torra's slide example: 10 records, p = 2 -> window floor(2*10/100) = 0, no swap at all.
    column = np.array([8.0, 6, 10, 7, 9, 4, 2, 1, 5, 3])
    np.testing.assert_array_equal(rank_swap_column(column, 2, np.random.default_rng(0)), column)
    # With p = 10 the window is 1: ranks are swapped with their next unswapped neighbour only.
    out = rank_swap_column(np.arange(10.0), 10, np.random.default_rng(0))
    np.testing.assert_array_equal(out, [1, 0, 3, 2, 5, 4, 7, 6, 9, 8])


def test_additive_noise_variance_grows_by_one_plus_a() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(10, 3, size=(40_000, 2))
    y = additive_noise(x, 0.5, 11)
    ratio = y.var(axis=0) / x.var(axis=0)
    np.testing.assert_allclose(ratio, 1.5, rtol=0.03)
    np.testing.assert_allclose(y.mean(axis=0), x.mean(axis=0), atol=0.05)
    np.testing.assert_array_equal(additive_noise(x, 0.0, 1), x)


def test_multiplicative_noise_factors_are_bounded_and_keep_sign() -> None:
    x = _data(2000)
    y = multiplicative_noise(x, 0.25, 3)
    factors = y / x
    assert factors.min() >= 0.75 and factors.max() <= 1.25
    assert factors.min() < 0.76 and factors.max() > 1.24  # the whole range is used
    np.testing.assert_allclose(factors.mean(), 1.0, atol=0.01)
    with pytest.raises(InputError, match="a"):
        multiplicative_noise(x, 1.5, 3)


def test_synthetic_normal_reproduces_mean_and_covariance() -> None:
    x = _data(4000)
    y = synthetic_normal(x, 2)
    np.testing.assert_allclose(y.mean(axis=0), x.mean(axis=0), rtol=0.02)
    np.testing.assert_allclose(np.corrcoef(y, rowvar=False), np.corrcoef(x, rowvar=False), atol=0.05)
    assert synthetic_normal(x, 2, n_records=10).shape == (10, 3)
    # A collinear attribute (singular covariance) still works.
    collinear = np.column_stack([x[:, 0], 2 * x[:, 0]])
    z = synthetic_normal(collinear, 1)
    np.testing.assert_allclose(z[:, 1], 2 * z[:, 0], rtol=1e-6, atol=1e-6)
    with pytest.raises(InputError):
        synthetic_normal(x[:1], 1)


def test_local_anonymization_record_depends_only_on_itself() -> None:
    x = _data(300)
    scales = [10.0, 800.0, 4.0]
    y = local_anonymization(x, scales, 0.3, 9)
    changed = x.copy()
    changed[1:] = changed[1:] * 3 + 100  # everyone else's data changes
    y2 = local_anonymization(changed, scales, 0.3, 9)
    np.testing.assert_array_equal(y[0], y2[0])
    noise_sd = (y - x).std(axis=0)
    np.testing.assert_allclose(noise_sd, np.sqrt(0.3) * np.asarray(scales), rtol=0.15)
    with pytest.raises(InputError, match="scales"):
        local_anonymization(x, [1.0, 2.0], 0.3, 9)
    with pytest.raises(InputError, match="scales"):
        local_anonymization(x, [1.0, -2.0, 1.0], 0.3, 9)


def test_perturb_record_is_one_subjects_step() -> None:
    record = [40.0, 2000.0]
    out = perturb_record(record, [10.0, 500.0], 0.2, np.random.default_rng(4))
    assert out.shape == (2,)
    assert not np.array_equal(out, record)
    np.testing.assert_array_equal(perturb_record(record, [0.0, 0.0], 0.2, np.random.default_rng(4)), record)


def test_bad_inputs_are_input_errors() -> None:
    with pytest.raises(InputError):
        additive_noise([[1.0, float("nan")]], 0.1, 1)
    with pytest.raises(InputError):
        additive_noise(np.zeros((0, 2)), 0.1, 1)
    with pytest.raises(InputError, match="a"):
        additive_noise(_data(10), -0.1, 1)
    assert "rankswap" in masking.METHODS


def test_dataframes_and_datasets_are_accepted() -> None:
    from coutil.sdc.dataset import Dataset

    x = _data(40)
    np.testing.assert_array_equal(rank_swap(Dataset.from_array(x), 10, 2), rank_swap(x, 10, 2))
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(x, columns=["a", "b", "c"])
    np.testing.assert_array_equal(additive_noise(frame, 0.1, 2), additive_noise(x, 0.1, 2))


def test_rank_swap_reports_each_attribute_without_changing_the_result() -> None:
    x = _data(80)
    seen: list[int] = []
    np.testing.assert_array_equal(rank_swap(x, 10, 4, on_column=seen.append), rank_swap(x, 10, 4))
    assert seen == [0, 1, 2]
