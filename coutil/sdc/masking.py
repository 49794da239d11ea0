"""Masking baselines: rank swapping, additive and multiplicative noise, synthetic data, local noise.

These are the classic perturbative methods the co-utile protocol is compared against (slides of
Domingo-Ferrer, ``../shared/papers/000_*``; rank swapping as in Torra's slides, ``003_*``, slide 41).
Every function takes an ``(n, m)`` matrix of numeric attributes (ordinal attributes as ranks) and
returns a new ``(n, m)`` float64 matrix whose row ``i`` is the masked version of record ``i``.

Randomness is always injected: ``seed`` is an ``int`` (turned into ``np.random.default_rng(seed)``)
or a ready ``np.random.Generator``; the same seed gives the same output, byte for byte.

Variances and standard deviations here are population ones (``ddof=0``), as in `coutil.sdc.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc.dataset import Dataset

FloatMatrix = NDArray[np.float64]
SeedLike = int | np.random.Generator


def _rng(seed: SeedLike) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InputError(f"bad seed {seed!r}: expected a non-negative integer")
    return np.random.default_rng(int(seed))


def _matrix(values: Any) -> FloatMatrix:
    """The data as a finite 2-D float64 matrix (a 1-D array is one attribute).

    Accepts arrays, nested lists, a `Dataset` or a pandas DataFrame (ordered categoricals as ranks).
    """
    if hasattr(values, "columns") and hasattr(values, "dtypes"):
        values = Dataset.from_dataframe(values)
    if isinstance(values, Dataset):
        values = values.values
    matrix = np.array(values, dtype=np.float64)  # a copy: callers' arrays are never modified
    if matrix.ndim == 1:
        matrix = matrix.reshape(-1, 1)
    if matrix.ndim != 2:
        raise InputError(f"data must be a 2-D table, got {matrix.ndim} dimension(s)")
    if matrix.shape[0] == 0 or matrix.shape[1] == 0:
        raise InputError("data must have at least one record and one attribute")
    if not np.all(np.isfinite(matrix)):
        raise InputError("data contains missing or non-finite values")
    return matrix


def _check_fraction(name: str, value: float, *, upper: float | None = None) -> float:
    v = float(value)
    if not math.isfinite(v) or v < 0 or (upper is not None and v > upper):
        bound = f"between 0 and {upper:g}" if upper is not None else "a non-negative number"
        raise InputError(f"bad {name} {value!r}: expected {bound}")
    return v


# ----------------------------------------------------------------------------------- rank swapping


def rank_swap_window(n: int, p: float) -> int:
    """Largest rank distance of a swap: ``floor(p * n / 100)`` (mu-Argus' p% of the records)."""
    # The small epsilon keeps a product that is an integer on paper from rounding down in floats
    # (e.g. 2.8 * 2750 / 100 is 76.99999999999999).
    return math.floor(p * n / 100.0 + 1e-9)


def rank_swap_column(column: NDArray[np.float64], p: float, rng: np.random.Generator) -> NDArray[np.float64]:
    """Rank-swap one attribute (Torra, slide 41; mu-Argus semantics).

    Sort the values; walk the ranks i = 1..n in increasing order and, for each value still
    unswapped, pick a partner rank l uniformly among the *unswapped* ranks in
    ``(i, min(n, i + p*n/100)]`` and exchange the two values (both become swapped). A value with no
    unswapped partner left in its window stays in place. Finally undo the sort, so the marginal
    distribution is exactly preserved and every value moves at most ``p*n/100`` ranks.
    """
    n = column.shape[0]
    window = rank_swap_window(n, p)
    # Stable sort: tied values keep their record order, which makes the output reproducible.
    order = np.argsort(column, kind="stable")
    sorted_values = column[order].copy()
    swapped = np.zeros(n, dtype=bool)
    if window >= 1:
        for i in range(n - 1):
            if swapped[i]:
                continue
            hi = min(n - 1, i + window)
            candidates = np.flatnonzero(~swapped[i + 1 : hi + 1])
            if candidates.size == 0:
                continue
            partner = i + 1 + int(candidates[rng.integers(candidates.size)])
            sorted_values[i], sorted_values[partner] = sorted_values[partner], sorted_values[i]
            swapped[i] = swapped[partner] = True
    result = np.empty(n, dtype=np.float64)
    result[order] = sorted_values
    return result


def rank_swap(
    values: Any, p: float, seed: SeedLike, on_column: Callable[[int], None] | None = None
) -> FloatMatrix:
    """Rank swapping of every attribute independently with a p% rank window (0 <= p <= 100).

    ``on_column(j)``, if given, is called after attribute j is swapped (for a progress display).
    """
    data = _matrix(values)
    p_value = _check_fraction("p", p, upper=100.0)
    rng = _rng(seed)
    out = np.empty_like(data)
    for j in range(data.shape[1]):
        out[:, j] = rank_swap_column(data[:, j], p_value, rng)
        if on_column is not None:
            on_column(j)
    return out


# ------------------------------------------------------------------------------------------- noise


def additive_noise(values: Any, a: float, seed: SeedLike) -> FloatMatrix:
    """Uncorrelated additive noise: ``y_ij = x_ij + e_ij`` with ``e_ij ~ N(0, a * var_j)``.

    ``var_j`` is the (population) variance of attribute j, so ``a`` is the noise-to-signal variance
    ratio: the masked variance is about ``(1 + a) var_j`` and correlations shrink by ``1/(1 + a)``.
    """
    data = _matrix(values)
    a_value = _check_fraction("a", a)
    rng = _rng(seed)
    scale = np.sqrt(a_value * data.var(axis=0))
    noise = rng.standard_normal(data.shape) * scale
    return np.asarray(data + noise, dtype=np.float64)


def multiplicative_noise(values: Any, a: float, seed: SeedLike) -> FloatMatrix:
    """Multiplicative noise: ``y_ij = x_ij * u_ij`` with ``u_ij ~ U(1 - a, 1 + a)``, ``0 <= a <= 1``.

    The factor has mean 1, so means are preserved in expectation; since the factor is never
    negative (a <= 1), signs are preserved too, which keeps positive attributes positive.
    """
    data = _matrix(values)
    a_value = _check_fraction("a", a, upper=1.0)
    rng = _rng(seed)
    factors = rng.uniform(1.0 - a_value, 1.0 + a_value, size=data.shape)
    return np.asarray(data * factors, dtype=np.float64)


# ---------------------------------------------------------------------------------- synthetic data


def synthetic_normal(values: Any, seed: SeedLike, n_records: int | None = None) -> FloatMatrix:
    """Fully synthetic data drawn from a multivariate normal fitted to the original.

    The model is the original's mean vector and (unbiased, ``ddof=1``) covariance matrix; each of
    the ``n_records`` rows (default: as many as the original) is an independent draw. No synthetic
    row is derived from a particular original record, so row i is *not* a masked version of
    record i: only the distribution-level statistics are meant to be preserved.
    """
    data = _matrix(values)
    count = data.shape[0] if n_records is None else int(n_records)
    if count < 1:
        raise InputError(f"bad number of synthetic records {n_records!r}: expected a positive integer")
    if data.shape[0] < 2:
        raise InputError("synthetic data needs at least 2 original records to fit a covariance")
    rng = _rng(seed)
    mean = data.mean(axis=0)
    covariance = np.atleast_2d(np.cov(data, rowvar=False))
    # eigh tolerates singular (e.g. collinear or constant) attributes where Cholesky would fail.
    draws = rng.multivariate_normal(mean, covariance, size=count, method="eigh")
    return np.asarray(draws, dtype=np.float64)


# ---------------------------------------------------------------------------- local anonymization


def _public_scales(scales: Sequence[float] | NDArray[np.float64], m: int) -> NDArray[np.float64]:
    scale_array = np.asarray(scales, dtype=np.float64).reshape(-1)
    if scale_array.shape[0] != m:
        raise InputError(f"{scale_array.shape[0]} public scales given for {m} attributes")
    if not np.all(np.isfinite(scale_array)) or np.any(scale_array < 0):
        raise InputError("public scales must be finite non-negative numbers")
    return scale_array


def perturb_record(
    record: Sequence[float] | NDArray[np.float64],
    scales: Sequence[float] | NDArray[np.float64],
    a: float,
    rng: np.random.Generator,
) -> NDArray[np.float64]:
    """One subject's local anonymization of her own record (see `local_anonymization`)."""
    own = np.asarray(record, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(own)):
        raise InputError("the record contains missing or non-finite values")
    scale_array = _public_scales(scales, own.shape[0])
    a_value = _check_fraction("a", a)
    noise = rng.standard_normal(own.shape[0]) * (math.sqrt(a_value) * scale_array)
    return np.asarray(own + noise, dtype=np.float64)


def local_anonymization(
    values: Any, scales: Sequence[float] | NDArray[np.float64], a: float, seed: SeedLike
) -> FloatMatrix:
    """Local anonymization: every subject adds noise to her own record without seeing anyone else's.

    Model: ``y_ij = x_ij + e_ij`` with ``e_ij ~ N(0, a * s_j**2)``, where ``s_j`` are *public*
    per-attribute scales fixed before collection (e.g. published by the collector from a previous
    survey or from the attribute's plausible range), not statistics of the data being protected:
    a subject alone cannot compute those. Consequently record i's output depends only on record i,
    the public scales, ``a`` and the randomness; changing any other record changes nothing for it.
    With ``s_j`` equal to the data's own standard deviations this coincides in distribution with
    `additive_noise`, which is the centralized counterpart.

    The whole file is simulated with one generator drawing record after record; a real subject
    would call `perturb_record` with her own generator.
    """
    data = _matrix(values)
    scale_array = _public_scales(scales, data.shape[1])
    a_value = _check_fraction("a", a)
    rng = _rng(seed)
    noise = rng.standard_normal(data.shape) * (math.sqrt(a_value) * scale_array)
    return np.asarray(data + noise, dtype=np.float64)


#: Names of the masking methods as used by the CLI and the JSON reports.
METHODS = ("rankswap", "noise", "mult-noise", "synthetic", "local", "mdav")
