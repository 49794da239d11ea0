"""coutil.sdc.dp: the (epsilon, delta) of (k, beta)-SDGS, against ARX's ParameterCalculation.

HOW THE ARX VALUES WERE OBTAINED (nothing of ARX is in this repository): repository
github.com/arx-deidentifier/arx at commit aacd487fb77b3af7970d5d6fa1b2f6cca1182b64 (2025-09-12); the four files
src/main/org/deidentifier/arx/dp/ParameterCalculation.java and reliability/{IntervalArithmeticDouble,
IntervalArithmeticException,IntervalDouble}.java were copied to /tmp/arx-dp (outside the repository), compiled
with OpenJDK 17 (``javac -d out $(find src -name '*.java')``) beside a ten-line driver that prints
``new ParameterCalculation(epsilon, delta)``'s ``getBeta()`` (``%.17g``) and ``getK()`` for each grid point,
run as ``java -cp out Grid``. The last column is ARX's run time in seconds on the development machine.
"""

from __future__ import annotations

import math
import time
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import binom

from coutil.errors import InputError
from coutil.sdc import dp

# epsilon, delta, ARX beta (lower bound of its interval), ARX k, ARX seconds
ARX_GRID = [
    (0.01, 1e-3, 0.0099501662508317800, 27, 2.34),
    (0.05, 1e-3, 0.048770575499285866, 27, 0.13),
    (0.1, 1e-3, 0.095162581964040250, 27, 0.03),
    (0.25, 1e-3, 0.22119921692859498, 28, 0.01),
    (0.5, 1e-3, 0.39346934028736640, 28, 0.01),
    (0.9, 1e-3, 0.59343034025940070, 33, 0.01),
    (1.0, 1e-3, 0.63212055882855740, 35, 0.01),
    (1.5, 1e-3, 0.77686983985157000, 45, 0.01),
    (2.0, 1e-3, 0.86466471676338710, 65, 0.02),
    (3.0, 1e-3, 0.95021293163213590, 137, 2.99),
    (0.01, 1e-6, 0.0099501662508317800, 61, 8.49),
    (0.05, 1e-6, 0.048770575499285866, 61, 0.44),
    (0.1, 1e-6, 0.095162581964040250, 61, 0.12),
    (0.25, 1e-6, 0.22119921692859498, 63, 0.03),
    (0.5, 1e-6, 0.39346934028736640, 64, 0.02),
    (0.9, 1e-6, 0.59343034025940070, 74, 0.02),
    (1.0, 1e-6, 0.63212055882855740, 75, 0.01),
    (1.5, 1e-6, 0.77686983985157000, 100, 0.02),
    (2.0, 1e-6, 0.86466471676338710, 132, 1.51),
    (3.0, 1e-6, 0.95021293163213590, 272, 21.9),
    (0.01, 1e-9, 0.0099501662508317800, 96, 17.2),
    (0.05, 1e-9, 0.048770575499285866, 96, 0.67),
    (0.1, 1e-9, 0.095162581964040250, 96, 0.19),
    (0.25, 1e-9, 0.22119921692859498, 97, 0.05),
    (0.5, 1e-9, 0.39346934028736640, 102, 0.02),
    (0.9, 1e-9, 0.59343034025940070, 114, 0.02),
    (1.0, 1e-9, 0.63212055882855740, 119, 0.02),
    (1.5, 1e-9, 0.77686983985157000, 155, 0.03),
    (2.0, 1e-9, 0.86466471676338710, 201, 4.70),
    (3.0, 1e-9, 0.95021293163213590, 470, 80.3),
    (0.01, 1e-12, 0.0099501662508317800, 131, 28.5),
    (0.05, 1e-12, 0.048770575499285866, 131, 1.34),
    (0.1, 1e-12, 0.095162581964040250, 131, 0.44),
    (0.25, 1e-12, 0.22119921692859498, 132, 0.09),
    (0.5, 1e-12, 0.39346934028736640, 138, 0.05),
    (0.9, 1e-12, 0.59343034025940070, 155, 0.05),
    (1.0, 1e-12, 0.63212055882855740, 163, 0.05),
    (1.5, 1e-12, 0.77686983985157000, 204, 2.59),
    (2.0, 1e-12, 0.86466471676338710, 285, 13.7),
    (3.0, 1e-12, 0.95021293163213590, 610, 166.7),  # ARX's slowest point; ours takes milliseconds
]


@pytest.mark.parametrize(("epsilon", "delta", "arx_beta", "arx_k", "_arx_seconds"), ARX_GRID)
def test_agrees_with_arx(epsilon: float, delta: float, arx_beta: float, arx_k: int, _arx_seconds: float) -> None:
    p = dp.parameters_for(epsilon, delta)
    assert p.beta == pytest.approx(arx_beta, rel=1e-9)
    # ARX's loop returns one more than the smallest sufficient k (see coutil.sdc.dp): ours is that smallest k.
    assert p.k_arx == arx_k
    assert p.k == arx_k - 1
    assert p.delta < delta
    assert dp.delta_for(p.k, epsilon, p.beta) == p.delta
    # ... and it is the smallest: one less does not reach the target.
    assert dp.delta_for(p.k - 1, epsilon, p.beta) >= delta
    # ARX's k is sufficient too (delta is non-increasing in k).
    assert dp.delta_for(arx_k, epsilon, p.beta) <= p.delta


def test_slowest_point_is_fast() -> None:
    start = time.perf_counter()
    p = dp.parameters_for(3.0, 1e-12)
    elapsed = time.perf_counter() - start
    assert p.delta < 1e-12
    assert dp.delta_for(p.k - 1, 3.0, p.beta) >= 1e-12
    assert elapsed < 5.0, elapsed


def _a_exact(n: int, beta: Fraction, gamma: Fraction) -> Fraction:
    """a_n by the definition, in exact rational arithmetic."""
    return sum(
        (Fraction(math.comb(n, j)) * beta**j * (1 - beta) ** (n - j) for j in range(n + 1) if j > gamma * n),
        Fraction(0),
    )


@pytest.mark.parametrize("n", [1, 2, 7, 30, 101])
def test_a_n_matches_the_definition(n: int) -> None:
    beta, gamma = 0.4, 0.55
    exact = _a_exact(n, Fraction(beta), Fraction(gamma))
    got = float(np.exp(dp.log_a(n, beta, gamma)[0]))
    assert got == pytest.approx(float(exact), rel=1e-10)
    assert dp.log_a(n, beta, gamma)[0] <= dp.log_c(n, beta, gamma)[0] + 1e-12  # a_n <= c_n


def test_a_is_not_monotonic_but_c_is() -> None:
    beta = dp.beta_from_epsilon(1.0)
    gamma = dp.gamma_of(1.0, beta)
    la = dp.log_a(np.arange(1, 200), beta, gamma)
    lc = dp.log_c(np.arange(1, 200), beta, gamma)
    assert np.any(np.diff(la) > 0) and np.any(np.diff(la) < 0)
    assert np.all(np.diff(lc) < 0)


def test_robust_at_ten_million_records() -> None:
    n = 10_000_000
    beta = dp.beta_from_epsilon(0.01)
    gamma = dp.gamma_of(0.01, beta)
    # Near the mean (a_n not tiny) the value is scipy's exact tail; compare with a direct log-space sum.
    for gamma_near in (beta * 1.001, beta * 1.01, beta * 1.05):
        la = dp.log_a(np.array([n]), beta, gamma_near)[0]
        m = math.floor(n * gamma_near * (1 - 1e-12))
        direct = logsumexp(binom.logpmf(np.arange(m + 1, m + 200_001), n, beta))
        assert math.isfinite(la) and la == pytest.approx(direct, rel=1e-9, abs=1e-9)
    # Far in the tail a_n underflows a double: the value is then a log-space upper bound, never -inf or nan,
    # and close (within ln 2) to the direct sum.
    gamma_far = 3 * beta
    la_far = dp.log_a(np.array([n]), beta, gamma_far)[0]
    m = math.floor(n * gamma_far)
    direct_far = logsumexp(binom.logpmf(np.arange(m + 1, m + 50_001), n, beta))
    assert direct_far < math.log(1e-300)
    assert direct_far - 1e-9 <= la_far <= direct_far + math.log(2)
    # The whole delta for a k whose n_m is about 10^7 (and back through the reverse function).
    k = int(gamma * n)
    start = time.perf_counter()
    p = dp.parameters_from_beta_k(beta, k)
    assert abs(p.n_m - n) <= 20
    assert 0.0 <= p.delta < 1e-300  # astronomically small; a double may round it to 0, never nan or inf
    assert time.perf_counter() - start < 30


def test_reverse_matches_forward() -> None:
    forward = dp.parameters_for(1.0, 1e-6)
    back = dp.parameters_from_beta_k(forward.beta, forward.k)
    assert back.epsilon == pytest.approx(1.0, rel=1e-12)
    assert back.delta == forward.delta
    assert dp.parameters_from_beta_k(forward.beta, forward.k - 1).delta >= 1e-6


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(0.0, 1e-6), (-1.0, 1e-6), (math.inf, 1e-6), (math.nan, 1e-6), (1.0, 0.0), (1.0, 1.0),
                           (1.0, -1e-6), (1.0, math.nan)]
)
def test_bad_targets(epsilon: float, delta: float) -> None:
    with pytest.raises(InputError):
        dp.parameters_for(epsilon, delta)


@pytest.mark.parametrize(("beta", "k"), [(0.0, 5), (1.0, 5), (0.5, 0), (0.5, -3), (math.nan, 5)])
def test_bad_reverse(beta: float, k: int) -> None:
    with pytest.raises(InputError):
        dp.parameters_from_beta_k(beta, k)
