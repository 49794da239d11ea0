"""Information loss of a masked data set Y with respect to its original X (same records, same order).

Measures (all on the selected numeric attributes; ordinal attributes as ranks):

- **SSE/SST (%)**. With a known partition (microaggregation groups) it is `stats.sse_sst_percent`:
  within-group over total sum of squares of the z-scored X. For two data sets of the same shape,
  both are scaled with *X's* mean and standard deviation and ``SSE = sum_i ||z(x_i) - z(y_i)||^2``,
  ``SST = sum_i ||z(x_i)||^2``. When Y replaces every record by its group's centroid both versions
  are equal (z-scoring is affine), so the figure is comparable across masking methods.
- **IL1s** (Yancey, Winkler & Creecy 2002): the *mean* (not the sum) over records i and attributes j
  of ``|x_ij - y_ij| / (sqrt(2) * S_j)``, S_j the sample standard deviation (``ddof=1``) of X^j
  (an attribute with S_j = 0 uses S_j = 1). Being a mean, it does not grow with n or m; the sum
  is ``n * m`` times it.
- **Preservation of means, variances and correlations**: per attribute the relative differences
  ``(mean(Y^j) - mean(X^j)) / |mean(X^j)|`` and ``(var(Y^j) - var(X^j)) / var(X^j)`` (population
  variances; the plain difference when the denominator is 0), overall the mean of their absolute
  values, and the mean absolute difference between the off-diagonal entries of the two Pearson
  correlation matrices (a constant attribute is taken as uncorrelated with everything).

Every measure is given overall and per attribute: the SSE/SST of attribute j is its own share
``SSE_j / SST_j``, its IL1s the mean over records (the overall IL1s is the mean of these), and its
correlation figure the mean absolute difference of its correlations with the other attributes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc.dataset import Dataset
from coutil.sdc.stats import group_centroids
from coutil.sdc.stats import sse_sst_percent as partition_sse_sst_percent

FloatMatrix = NDArray[np.float64]
IntArray = NDArray[np.intp]


def _is_dataframe(values: Any) -> bool:
    return hasattr(values, "columns") and hasattr(values, "dtypes")


def _matrix(values: Any, what: str) -> FloatMatrix:
    if _is_dataframe(values):  # pandas (optional): ordered categoricals become ranks
        values = Dataset.from_dataframe(values)
    raw = values.values if isinstance(values, Dataset) else values
    matrix = np.asarray(raw, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix.reshape(-1, 1)
    if matrix.ndim != 2 or matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise InputError(f"{what} must be a non-empty 2-D table")
    if not np.all(np.isfinite(matrix)):
        raise InputError(f"{what} contains missing or non-finite values")
    return matrix


def _pair(original: Any, masked: Any) -> tuple[FloatMatrix, FloatMatrix]:
    x = _matrix(original, "the original data")
    y = _matrix(masked, "the masked data")
    if x.shape != y.shape:
        raise InputError(
            f"the original has {x.shape[0]} records x {x.shape[1]} attributes but the masked data has "
            f"{y.shape[0]} x {y.shape[1]}: information loss compares the same records and attributes"
        )
    return x, y


def sse_sst_percent_pair(original: Any, masked: Any) -> float:
    """SSE/SST (%) between X and Y, both z-scored with X's mean and population standard deviation."""
    x, y = _pair(original, masked)
    zx, zy = _z_pair(x, y)  # a constant attribute is only centred, as in stats.zscore
    sse = float(((zx - zy) ** 2).sum())
    sst = float((zx**2).sum())
    return 100.0 * sse / sst if sst > 0 else 0.0


def sse_sst_percent_groups(values: Any, groups: Sequence[int] | IntArray) -> float:
    """SSE/SST (%) of a partition of X (labels 0..G-1), as `coutil.sdc.stats.sse_sst_percent`."""
    x = _matrix(values, "the original data")
    labels = np.asarray(groups, dtype=np.intp)
    if labels.shape != (x.shape[0],) or (labels.size and labels.min() < 0):
        raise InputError("groups must be one non-negative label per record")
    return partition_sse_sst_percent(x, labels)


def il1s(original: Any, masked: Any) -> float:
    """IL1s: the MEAN over records and attributes of ``|x - y| / (sqrt(2) * S_j)`` (S_j: ddof=1 std of X^j)."""
    return float(il1s_per_attribute(original, masked).mean())


def _relative_difference(masked: NDArray[np.float64], original: NDArray[np.float64]) -> NDArray[np.float64]:
    denominator = np.abs(original)
    safe = np.where(denominator > 0, denominator, 1.0)
    return np.asarray((masked - original) / safe, dtype=np.float64)


def correlation_matrix(values: FloatMatrix) -> FloatMatrix:
    """Pearson correlations; entries involving a constant attribute are 0 (1 on the diagonal)."""
    centred = values - values.mean(axis=0)
    norms = np.sqrt((centred**2).sum(axis=0))
    constant = norms == 0
    safe = np.where(constant, 1.0, norms)
    corr = (centred.T @ centred) / np.outer(safe, safe)
    corr[constant, :] = 0.0
    corr[:, constant] = 0.0
    np.fill_diagonal(corr, 1.0)
    return np.asarray(np.clip(corr, -1.0, 1.0), dtype=np.float64)


def _z_pair(x: FloatMatrix, y: FloatMatrix) -> tuple[FloatMatrix, FloatMatrix]:
    """X and Y z-scored with X's mean and population standard deviation (a constant X^j only centred)."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return (x - mean) / std, (y - mean) / std


def _percent_ratios(sse: NDArray[np.float64], sst: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.asarray(np.where(sst > 0, 100.0 * sse / np.where(sst > 0, sst, 1.0), 0.0), dtype=np.float64)


def sse_sst_percent_per_attribute(
    original: Any, masked: Any, groups: Sequence[int] | IntArray | None = None
) -> NDArray[np.float64]:
    """SSE_j / SST_j (%) of every attribute: of X against Y, or of X's partition when ``groups`` is given."""
    x, y = _pair(original, masked)
    zx, zy = _z_pair(x, y)
    if groups is not None:
        labels = np.asarray(groups, dtype=np.intp)
        if labels.shape != (x.shape[0],) or (labels.size and labels.min() < 0):
            raise InputError("groups must be one non-negative label per record")
        zy = group_centroids(zx, labels)[labels]
    return _percent_ratios(((zx - zy) ** 2).sum(axis=0), (zx**2).sum(axis=0))


def il1s_per_attribute(original: Any, masked: Any) -> NDArray[np.float64]:
    """IL1s of every attribute: the mean over records of ``|x_ij - y_ij| / (sqrt(2) * S_j)``."""
    x, y = _pair(original, masked)
    std = x.std(axis=0, ddof=1) if x.shape[0] > 1 else np.zeros(x.shape[1])
    std = np.where(std > 0, std, 1.0)
    return np.asarray((np.abs(x - y) / (math.sqrt(2.0) * std)).mean(axis=0), dtype=np.float64)


def correlation_abs_difference_per_attribute(original: Any, masked: Any) -> NDArray[np.float64]:
    """For every attribute, the mean |r_X(j, l) - r_Y(j, l)| over the other attributes l (0 with one attribute)."""
    x, y = _pair(original, masked)
    m = x.shape[1]
    if m < 2:
        return np.zeros(m, dtype=np.float64)
    difference = np.abs(correlation_matrix(x) - correlation_matrix(y))
    np.fill_diagonal(difference, 0.0)
    return np.asarray(difference.sum(axis=1) / (m - 1), dtype=np.float64)


def correlation_mean_abs_difference(original: Any, masked: Any) -> float:
    """Mean absolute difference of the off-diagonal correlations of X and Y (0 with one attribute)."""
    x, y = _pair(original, masked)
    m = x.shape[1]
    if m < 2:
        return 0.0
    upper = np.triu_indices(m, k=1)
    return float(np.abs(correlation_matrix(x)[upper] - correlation_matrix(y)[upper]).mean())


@dataclass(frozen=True)
class InfoLossReport:
    """Information loss of a masked data set; per-attribute tuples follow ``names``."""

    names: tuple[str, ...]
    n: int
    #: SSE/SST in percent (partition version when the groups were given, else the two-data-set one).
    sse_sst_percent: float
    #: IL1s: the MEAN (not the sum) over cells of |x - y| / (sqrt(2) S_j).
    il1s: float
    mean_original: tuple[float, ...]
    mean_masked: tuple[float, ...]
    mean_relative_difference: tuple[float, ...]
    variance_original: tuple[float, ...]
    variance_masked: tuple[float, ...]
    variance_relative_difference: tuple[float, ...]
    #: Mean over attributes of |relative difference| of the means and of the variances.
    mean_abs_mean_relative_difference: float
    mean_abs_variance_relative_difference: float
    #: Mean absolute difference of the off-diagonal correlations.
    correlation_mean_abs_difference: float
    #: Per attribute: SSE_j/SST_j (%), IL1s (mean over records), mean |correlation difference| with the others.
    sse_sst_percent_by_attribute: tuple[float, ...]
    il1s_by_attribute: tuple[float, ...]
    correlation_abs_difference_by_attribute: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: overall figures plus one entry per attribute."""
        return {
            "n": self.n,
            "columns": list(self.names),
            "sse_sst_percent": self.sse_sst_percent,
            "il1s": self.il1s,
            "il1s_aggregation": "mean",
            "mean_abs_mean_relative_difference": self.mean_abs_mean_relative_difference,
            "mean_abs_variance_relative_difference": self.mean_abs_variance_relative_difference,
            "correlation_mean_abs_difference": self.correlation_mean_abs_difference,
            "attributes": [
                {
                    "name": name,
                    "mean_original": self.mean_original[j],
                    "mean_masked": self.mean_masked[j],
                    "mean_relative_difference": self.mean_relative_difference[j],
                    "variance_original": self.variance_original[j],
                    "variance_masked": self.variance_masked[j],
                    "variance_relative_difference": self.variance_relative_difference[j],
                    "sse_sst_percent": self.sse_sst_percent_by_attribute[j],
                    "il1s": self.il1s_by_attribute[j],
                    "correlation_mean_abs_difference": self.correlation_abs_difference_by_attribute[j],
                }
                for j, name in enumerate(self.names)
            ],
        }


def _floats(values: NDArray[np.float64]) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


def information_loss(
    original: Any,
    masked: Any,
    groups: Sequence[int] | IntArray | None = None,
    names: Sequence[str] | None = None,
) -> InfoLossReport:
    """All the measures above for X (``original``) and Y (``masked``): arrays, `Dataset`s or DataFrames.

    ``groups`` (one label 0..G-1 per record) is the microaggregation partition when known; then the
    SSE/SST is the partition's, as the microaggregation literature reports it.
    """
    x, y = _pair(original, masked)
    if names is None:
        if _is_dataframe(original):
            names = [str(c) for c in original.columns]
        elif isinstance(original, Dataset):
            names = original.names
        else:
            names = [f"x{j + 1}" for j in range(x.shape[1])]
    name_tuple = tuple(names)
    if len(name_tuple) != x.shape[1]:
        raise InputError(f"{len(name_tuple)} names for {x.shape[1]} attributes")
    sse = sse_sst_percent_pair(x, y) if groups is None else sse_sst_percent_groups(x, groups)
    mean_x, mean_y = x.mean(axis=0), y.mean(axis=0)
    var_x, var_y = x.var(axis=0), y.var(axis=0)
    mean_rel = _relative_difference(mean_y, mean_x)
    var_rel = _relative_difference(var_y, var_x)
    return InfoLossReport(
        names=name_tuple,
        n=int(x.shape[0]),
        sse_sst_percent=sse,
        il1s=il1s(x, y),
        mean_original=_floats(mean_x),
        mean_masked=_floats(mean_y),
        mean_relative_difference=_floats(mean_rel),
        variance_original=_floats(var_x),
        variance_masked=_floats(var_y),
        variance_relative_difference=_floats(var_rel),
        mean_abs_mean_relative_difference=float(np.abs(mean_rel).mean()),
        mean_abs_variance_relative_difference=float(np.abs(var_rel).mean()),
        correlation_mean_abs_difference=correlation_mean_abs_difference(x, y),
        sse_sst_percent_by_attribute=_floats(sse_sst_percent_per_attribute(x, y, groups)),
        il1s_by_attribute=_floats(il1s_per_attribute(x, y)),
        correlation_abs_difference_by_attribute=_floats(correlation_abs_difference_per_attribute(x, y)),
    )
