"""Information-loss measures: hand-computed values, the partition/pair SSE identity, edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coutil.errors import InputError
from coutil.sdc.dataset import Dataset
from coutil.sdc.infoloss import (
    correlation_abs_difference_per_attribute,
    correlation_matrix,
    correlation_mean_abs_difference,
    il1s,
    il1s_per_attribute,
    information_loss,
    sse_sst_percent_groups,
    sse_sst_percent_pair,
    sse_sst_percent_per_attribute,
)
from coutil.sdc.stats import group_centroids, sse_sst_percent


def test_identical_data_has_no_loss() -> None:
    x = np.random.default_rng(0).normal(size=(50, 3))
    report = information_loss(x, x.copy())
    assert report.sse_sst_percent == 0.0
    assert report.il1s == 0.0
    assert report.correlation_mean_abs_difference == 0.0
    assert report.mean_abs_mean_relative_difference == 0.0
    assert report.names == ("x1", "x2", "x3")


def test_hand_computed_values() -> None:
    x = np.array([[1.0], [2.0], [3.0], [4.0]])
    y = np.array([[2.0], [2.0], [3.0], [3.0]])
    # z with mean 2.5, population std sqrt(1.25): SSE = (1 + 1)/1.25, SST = 5/1.25 -> 40 %.
    assert sse_sst_percent_pair(x, y) == pytest.approx(40.0)
    # IL1s: mean |x-y| = 0.5; S = sample std = sqrt(5/3).
    assert il1s(x, y) == pytest.approx(0.5 / (math.sqrt(2) * math.sqrt(5 / 3)))
    # A shift is a loss too: scaled with X's mean, SSE = 4 * 1/1.25, SST = 5/1.25 -> 80 %.
    assert sse_sst_percent_pair(x, x + 1.0) == pytest.approx(80.0)
    report = information_loss(x, y, names=["a"])
    assert report.mean_relative_difference == (0.0,)
    assert report.variance_original[0] == pytest.approx(1.25)
    assert report.variance_masked[0] == pytest.approx(0.25)
    assert report.variance_relative_difference[0] == pytest.approx(-0.8)
    assert report.correlation_mean_abs_difference == 0.0  # one attribute


def test_pair_sse_equals_partition_sse_for_centroid_release() -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(90, 4)) * [1, 10, 100, 0.1] + [0, 5, -3, 7]
    groups = np.repeat(np.arange(30), 3)
    rng.shuffle(groups)
    centroids = group_centroids(x, groups)[groups]
    expected = sse_sst_percent(x, groups)
    assert sse_sst_percent_pair(x, centroids) == pytest.approx(expected)
    assert sse_sst_percent_groups(x, groups) == pytest.approx(expected)
    assert information_loss(x, centroids, groups=groups).sse_sst_percent == pytest.approx(expected)
    assert 0 < expected < 100


def test_correlation_difference() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(size=2000)
    x = np.column_stack([a, a + 0.1 * rng.normal(size=2000)])
    y = np.column_stack([a, rng.normal(size=2000)])  # the correlation is destroyed
    r_x = np.corrcoef(x, rowvar=False)[0, 1]
    r_y = np.corrcoef(y, rowvar=False)[0, 1]
    assert correlation_mean_abs_difference(x, y) == pytest.approx(abs(r_x - r_y))
    np.testing.assert_allclose(correlation_matrix(x), np.corrcoef(x, rowvar=False))
    constant = np.column_stack([a, np.ones(2000)])
    np.testing.assert_array_equal(correlation_matrix(constant), np.eye(2))


def test_relative_difference_of_zero_mean_uses_plain_difference() -> None:
    x = np.array([[-1.0], [1.0]])
    y = np.array([[0.0], [1.0]])
    report = information_loss(x, y)
    assert report.mean_relative_difference[0] == pytest.approx(0.5)


def test_report_to_dict_and_dataset_names() -> None:
    x = Dataset(("age", "income"), np.array([[20.0, 1.0], [30.0, 2.0], [40.0, 4.0]]))
    y = x.with_values(x.values + np.array([[1.0, 0.0], [0.0, 0.0], [-1.0, 0.0]]))
    d = information_loss(x, y).to_dict()
    assert d["columns"] == ["age", "income"]
    assert d["n"] == 3
    assert [a["name"] for a in d["attributes"]] == ["age", "income"]
    assert d["attributes"][1]["variance_relative_difference"] == 0.0
    assert d["il1s"] > 0


def test_shape_mismatch_and_bad_values() -> None:
    with pytest.raises(InputError, match="same records"):
        information_loss(np.zeros((3, 2)), np.zeros((4, 2)))
    with pytest.raises(InputError):
        il1s([[1.0, float("inf")]], [[1.0, 2.0]])
    with pytest.raises(InputError):
        information_loss(np.zeros((3, 2)), np.zeros((3, 2)), names=["a"])


def test_dataframes_are_accepted() -> None:
    pd = pytest.importorskip("pandas")
    x = pd.DataFrame({"age": [20.0, 30.0, 40.0], "income": [1.0, 2.0, 4.0]})
    y = x.copy()
    y["age"] = [21.0, 30.0, 39.0]
    report = information_loss(x, y)
    assert report.names == ("age", "income")
    assert report.il1s == pytest.approx(il1s(x.to_numpy(), y.to_numpy()))


def test_per_attribute_figures_are_hand_computable_and_add_up() -> None:
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
    y = np.array([[2.0, 10.0], [2.0, 20.0], [3.0, 30.0], [3.0, 40.0]])  # only the first attribute changes
    report = information_loss(x, y, names=["a", "b"])
    assert report.sse_sst_percent_by_attribute == pytest.approx((40.0, 0.0))
    assert report.sse_sst_percent == pytest.approx(20.0)  # (SSE_a + SSE_b) / (SST_a + SST_b)
    assert report.il1s_by_attribute[0] == pytest.approx(0.5 / (math.sqrt(2) * math.sqrt(5 / 3)))
    assert report.il1s_by_attribute[1] == 0.0
    assert report.il1s == pytest.approx(sum(report.il1s_by_attribute) / 2)  # IL1s is a mean, not a sum
    r_y = np.corrcoef(y, rowvar=False)[0, 1]
    assert report.correlation_abs_difference_by_attribute == pytest.approx((1 - r_y, 1 - r_y))
    d = report.to_dict()
    assert d["il1s_aggregation"] == "mean"
    assert d["attributes"][0]["sse_sst_percent"] == pytest.approx(40.0)
    assert d["attributes"][1]["correlation_mean_abs_difference"] == pytest.approx(1 - r_y)


def test_per_attribute_sse_of_a_partition_matches_the_centroid_release() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(60, 3)) * [1.0, 50.0, 0.01]
    groups = np.repeat(np.arange(20), 3)
    centroids = group_centroids(x, groups)[groups]
    by_partition = sse_sst_percent_per_attribute(x, x, groups)
    np.testing.assert_allclose(by_partition, sse_sst_percent_per_attribute(x, centroids))
    np.testing.assert_allclose(il1s_per_attribute(x, centroids).mean(), il1s(x, centroids))
    assert np.all(by_partition > 0)
    three = correlation_abs_difference_per_attribute(x, centroids)
    assert three.shape == (3,)
    assert three.mean() == pytest.approx(correlation_mean_abs_difference(x, centroids))
