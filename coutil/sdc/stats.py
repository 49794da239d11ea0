"""Standardization and the SSE/SST information-loss ratio shared by MDAV, its tests and the CLI.

Conventions (as in the microaggregation literature quoted in ../shared/reference-figures.md):
attributes are z-scored with the population standard deviation (ddof=0; a constant attribute is only
centred); SSE is the within-group sum of squared Euclidean distances to the group centroid and SST the
total sum of squares, both on the z-scored data. The ratio is independent of the ddof choice.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

FloatMatrix = NDArray[np.float64]
IntArray = NDArray[np.intp]


def zscore(values: FloatMatrix) -> FloatMatrix:
    """Centre each column and divide by its population standard deviation (1 where it is 0)."""
    v = np.asarray(values, dtype=np.float64)
    mean = v.mean(axis=0)
    std = v.std(axis=0)
    std = np.where(std > 0, std, 1.0)
    return np.asarray((v - mean) / std, dtype=np.float64)


def group_centroids(values: FloatMatrix, groups: IntArray) -> FloatMatrix:
    """Mean of each group's rows; ``groups`` holds labels 0..G-1."""
    v = np.asarray(values, dtype=np.float64)
    labels = np.asarray(groups, dtype=np.intp)
    count = np.bincount(labels)
    sums = np.zeros((count.size, v.shape[1]), dtype=np.float64)
    np.add.at(sums, labels, v)
    return np.asarray(sums / count[:, None], dtype=np.float64)


def sse_sst(values: FloatMatrix, groups: IntArray) -> tuple[float, float]:
    """(SSE, SST) of a partition, computed on the z-scored attributes."""
    z = zscore(values)
    centroids = group_centroids(z, groups)
    sse = float(((z - centroids[np.asarray(groups, dtype=np.intp)]) ** 2).sum())
    sst = float((z**2).sum())  # z is centred, so the grand mean is 0
    return sse, sst


def sse_sst_percent(values: FloatMatrix, groups: IntArray) -> float:
    """SSE/SST in percent on z-scored attributes (0 when SST is 0)."""
    sse, sst = sse_sst(values, groups)
    return 100.0 * sse / sst if sst > 0 else 0.0
