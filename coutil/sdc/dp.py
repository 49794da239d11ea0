"""Parameters of (k, beta)-SDGS: the (epsilon, delta) of sampling plus k-anonymization, and back.

Li, Qardaji and Su (ASIACCS 2012) show that drawing each record with probability ``beta``, generalizing
with a scheme chosen independently of the data and suppressing every class of fewer than ``k`` records is
(epsilon, delta)-differentially private with (the formulas of SafePub, Bild, Kuhn and Prasser, PoPETs 2018)::

    epsilon = -ln(1 - beta)
    gamma   = (e^epsilon - 1 + beta) / e^epsilon          (= 1 - (1 - beta) e^-epsilon)
    n_m     = ceil(k / gamma - 1)
    a_n     = P[Binomial(n, beta) > gamma n] = sum_{j > gamma n}^{n} C(n, j) beta^j (1 - beta)^(n - j)
    delta   = max_{n >= n_m} a_n

``a_n`` is not monotonic in n, but the Chernoff bound ``c_n = exp(-n (gamma ln(gamma / beta) - (gamma - beta)))``
is (it decreases) and ``a_n <= c_n``: once the running maximum of ``a_n`` reaches ``c_n`` no later term can
exceed it, which makes the maximum computable.

Reference: ARX's ``org.deidentifier.arx.dp.ParameterCalculation`` (interval arithmetic, summing binomial
probabilities term by term; about two minutes at epsilon 3, delta 1e-12). Here everything is in log space
(``scipy.stats.binom`` and a bounded geometric tail where scipy's tail underflows), vectorized over n, and the
smallest sufficient k is found in one pass instead of one maximum per candidate k. Where ARX rounds an
interval's lower bound (``floor(n gamma)``, ``ceil(k / gamma - 1)``) we round a value nudged down by a relative
1e-12, which is never less conservative than the exact value.

**Which k.** ARX's search loop is ``for (k = 1; !(delta_k < delta); ++k) delta_k = delta(k); return k;``: the
increment runs once more after the k whose delta_k is below the target has been found, so ARX returns that
k plus one. We return the **smallest k whose achieved delta is strictly below the target** (that is what the
theorem needs; a larger k only suppresses more), and report ARX's value beside it as ``k_arx`` (= k + 1); the
tests check both against values produced by ARX's class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError

FloatArray = NDArray[np.float64]

#: Relative nudge applied before floor/ceil, in the conservative direction (as ARX's interval lower bounds).
_ROUNDING_CUSHION = 1e-12
#: A term counts as reaching the target when it is within this relative margin of it (floating-point slack).
_TARGET_MARGIN = 1e-10
#: Below this, scipy's binomial tail (a double) underflows; we switch to a log-space bound.
_LOG_TINY = math.log(1e-290)
_CHUNK = 1 << 15
#: No data set holds more records; a k or n beyond this is a mistake.
_N_MAX = 10**12


@dataclass(frozen=True)
class DPParameters:
    """The parameters of one (k, beta)-SDGS release and the privacy they buy."""

    #: epsilon of sampling + k-anonymization (the search budget is separate; see `coutil.sdc.safepub`).
    epsilon: float
    #: The delta asked for (None when computed from beta and k).
    delta_target: float | None
    beta: float
    #: Smallest k whose achieved delta is below the target (or the k given).
    k: int
    #: max_{n >= n_m} a_n for this k: the delta actually achieved.
    delta: float
    #: What ARX's ParameterCalculation returns for the same target (k + 1; see the module docstring).
    k_arx: int | None
    gamma: float
    n_m: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta_target": self.delta_target,
            "beta": self.beta,
            "k": self.k,
            "delta": self.delta,
            "k_arx": self.k_arx,
            "gamma": self.gamma,
            "n_m": self.n_m,
        }


def _check_epsilon(epsilon: float) -> None:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise InputError(f"epsilon must be a finite number > 0, not {epsilon!r}")
    if epsilon > 700:
        raise InputError(f"epsilon {epsilon!r} is beyond any meaningful privacy level (at most 700)")


def _check_delta(delta: float) -> None:
    if not (isinstance(delta, (int, float)) and math.isfinite(delta) and 0 < delta < 1):
        raise InputError(f"delta must be a number with 0 < delta < 1, not {delta!r}")


def _check_beta(beta: float) -> None:
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and 0 < beta < 1):
        raise InputError(f"beta (the sampling probability) must satisfy 0 < beta < 1, not {beta!r}")


def _check_k(k: int) -> None:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= _N_MAX:
        raise InputError(f"k must be an integer between 1 and {_N_MAX}, not {k!r}")


def beta_from_epsilon(epsilon: float) -> float:
    """The sampling probability whose epsilon is ``epsilon``: beta = 1 - e^-epsilon."""
    _check_epsilon(epsilon)
    return float(-math.expm1(-epsilon))


def epsilon_from_beta(beta: float) -> float:
    """epsilon = -ln(1 - beta)."""
    _check_beta(beta)
    return float(-math.log1p(-beta))


def gamma_of(epsilon: float, beta: float) -> float:
    """gamma = (e^epsilon - 1 + beta) / e^epsilon = 1 - (1 - beta) e^-epsilon, computed without cancellation."""
    return float(-math.expm1(math.log1p(-beta) - epsilon))


def _rate(beta: float, gamma: float) -> float:
    """gamma ln(gamma / beta) - (gamma - beta) > 0, the exponent of the Chernoff bound c_n = exp(-n rate)."""
    return float(gamma * math.log(gamma / beta) - (gamma - beta))


def n_m_of(k: int, gamma: float) -> int:
    """n_m = ceil(k / gamma - 1), rounded from a value nudged down (never above the exact n_m)."""
    x = k / gamma - 1.0
    return max(1, math.ceil(x - _ROUNDING_CUSHION * max(1.0, abs(x))))


def log_a(n: NDArray[np.int64] | int, beta: float, gamma: float) -> FloatArray:
    """ln a_n = ln P[Binomial(n, beta) > gamma n] for an array of n, exact where a double can hold a_n.

    Where ``a_n`` underflows a double (below 1e-290) the value is an upper bound: the first term of the tail
    over one minus the ratio of consecutive terms (the terms of a binomial tail above the mean decrease at
    least geometrically with that ratio).
    """
    # Imported here: scipy.stats takes about a second to import (no cached bytecode), which every worker process
    # of a round would pay for a report figure it never computes (`coutil.round.report` imports this module).
    from scipy.stats import binom

    ns = np.atleast_1d(np.asarray(n, dtype=np.float64))
    ng = ns * gamma
    m = np.floor(ng - _ROUNDING_CUSHION * ng)  # a_n sums j = m + 1 .. n
    with np.errstate(divide="ignore"):
        out = np.asarray(binom.logsf(m, ns, beta), dtype=np.float64)
    small = ~(out > _LOG_TINY)
    if np.any(small):
        ns_s, j0 = ns[small], m[small] + 1.0
        first = np.asarray(binom.logpmf(j0, ns_s, beta), dtype=np.float64)
        ratio = (ns_s - j0) / (j0 + 1.0) * (beta / (1.0 - beta))
        with np.errstate(divide="ignore"):
            bound = first - np.log1p(-np.minimum(ratio, 1.0 - 1e-16))
        bound[j0 > ns_s] = -np.inf  # empty tail
        out[small] = bound
    return out


def log_c(n: NDArray[np.int64] | int, beta: float, gamma: float) -> FloatArray:
    """ln c_n = -n (gamma ln(gamma / beta) - (gamma - beta)), the decreasing bound on a_n."""
    return -np.atleast_1d(np.asarray(n, dtype=np.float64)) * _rate(beta, gamma)


def delta_for(k: int, epsilon: float, beta: float) -> float:
    """The delta of (k, beta)-SDGS at this epsilon: max_{n >= n_m} a_n, stopped by the bound c_n."""
    gamma = gamma_of(epsilon, beta)
    start = n_m_of(k, gamma)
    best = -math.inf
    while start <= _N_MAX:
        ns = np.arange(start, start + _CHUNK, dtype=np.int64)
        la = log_a(ns, beta, gamma)
        lc = log_c(ns, beta, gamma)
        running = np.maximum.accumulate(np.maximum(la, best))
        # ARX stops after the first n whose bound c_n no longer exceeds the running maximum.
        stop = np.nonzero(running >= lc)[0]
        if stop.size:
            return float(math.exp(running[stop[0]]))
        best = float(running[-1])
        start += _CHUNK
    raise InputError(f"delta for k={k} did not converge below n = {_N_MAX}")  # pragma: no cover


def _smallest_k(delta: float, epsilon: float, beta: float, gamma: float) -> int:
    """Smallest k with max_{n >= n_m(k)} a_n < delta, in one pass over n.

    Past ``n_end`` (where c_n < delta) every a_n is below the target, so only n < n_end can be "bad"
    (a_n >= delta); k must push n_m past the last bad n. max over n >= n_m is non-increasing in n_m,
    and n_m is non-decreasing in k, so the search is monotone.
    """
    rate = _rate(beta, gamma)
    log_target = math.log(delta) + math.log1p(-_TARGET_MARGIN)
    n_end = math.ceil(-log_target / rate) + 1
    if n_end > _N_MAX:
        raise InputError(f"epsilon {epsilon!r} and delta {delta!r} need data sets beyond {_N_MAX} records")
    last_bad = 0
    for start in range(1, n_end + 1, _CHUNK):
        ns = np.arange(start, min(start + _CHUNK, n_end + 1), dtype=np.int64)
        bad = np.nonzero(log_a(ns, beta, gamma) >= log_target)[0]
        if bad.size:
            last_bad = int(ns[bad[-1]])
    # n_m(k) = ceil(k / gamma - 1) >= last_bad + 1  <=>  k > (last_bad + 1) gamma: start just below that.
    k = max(1, math.floor((last_bad + 1) * gamma) - 1)
    while n_m_of(k, gamma) <= last_bad:
        k += 1
    while k > 1 and n_m_of(k - 1, gamma) > last_bad:  # pragma: no cover - the start is below the answer
        k -= 1
    return k


def parameters_for(epsilon: float, delta: float) -> DPParameters:
    """beta, the smallest sufficient k and the achieved delta for an (epsilon, delta) target."""
    _check_epsilon(epsilon)
    _check_delta(delta)
    beta = beta_from_epsilon(epsilon)
    gamma = gamma_of(epsilon, beta)
    k = _smallest_k(delta, epsilon, beta, gamma)
    achieved = delta_for(k, epsilon, beta)
    while achieved >= delta * (1 - _TARGET_MARGIN):  # pragma: no cover - defensive; _smallest_k is exact
        k += 1
        achieved = delta_for(k, epsilon, beta)
    return DPParameters(epsilon, delta, beta, k, achieved, k + 1, gamma, n_m_of(k, gamma))


def parameters_from_beta_k(beta: float, k: int) -> DPParameters:
    """The reverse: the (epsilon, delta) of sampling with probability beta and suppressing classes below k."""
    _check_beta(beta)
    _check_k(k)
    epsilon = epsilon_from_beta(beta)
    gamma = gamma_of(epsilon, beta)
    return DPParameters(epsilon, None, beta, int(k), delta_for(int(k), epsilon, beta), None, gamma, n_m_of(k, gamma))
