"""The measures of a cell: utility of a release, per-subject disclosure risk, per-subject cost.

Every definition, with its formula, is in README.md ("Co-utility experiments"). In short, with X the
true records of the subjects whose values are in the release and Y their released rows (ground-truth
mapping, so Y is row-aligned with X):

- utility: SSE/SST (%) on X's z-scores, IL1s, mean |relative change| of means and variances, mean
  |change| of correlations, the relative error of an OLS fit, and the scalar U = 1 - SSE/SST used in
  payoffs;
- risk against the collector r_C: the probability that the collector attributes to her the released
  row holding her values, from everything it saw (`collector_risk`);
- risk against the maximum-knowledge intruder r_I: 1/t when her true row is among the t rows the
  intruder links to her record (Section 5 of the paper), with her permutation distance d;
- risk against k-1 colluding members of her group r_G = 1/(g - (k - 1)) (g her group's size).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats

from coutil.audit.intruder import maximum_knowledge_attack
from coutil.sdc.infoloss import correlation_mean_abs_difference, il1s, sse_sst_percent_pair

FloatMatrix = NDArray[np.float64]
IndexArray = NDArray[np.intp]

#: The collector's best ordering strategy counts only when its hit rate beats chance at this level
#: (family-wise: Bonferroni over the strategies tried).
LINK_ALPHA = 0.01


@dataclass(frozen=True)
class Utility:
    sse_sst_percent: float
    il1s: float
    mean_change: float
    variance_change: float
    correlation_change: float
    ols_relative_error: float

    @property
    def u(self) -> float:
        """The scalar utility of payoffs: 1 - SSE/SST."""
        return 1.0 - self.sse_sst_percent / 100.0

    def as_dict(self) -> dict[str, float]:
        return {"utility": self.u, "sse_sst_percent": self.sse_sst_percent, "il1s": self.il1s,
                "mean_change": self.mean_change, "variance_change": self.variance_change,
                "correlation_change": self.correlation_change, "ols_relative_error": self.ols_relative_error}


NO_RELEASE = Utility(100.0, math.nan, math.nan, math.nan, math.nan, math.nan)


def _relative_change(original: NDArray[np.float64], masked: NDArray[np.float64]) -> float:
    safe = np.where(np.abs(original) > 0, np.abs(original), 1.0)
    return float(np.mean(np.abs(masked - original) / safe))


def ols_coefficients(x: FloatMatrix, y: NDArray[np.float64]) -> NDArray[np.float64]:
    """Least-squares slopes of y on the columns of x, with an intercept (the intercept is dropped)."""
    design = np.hstack([np.ones((x.shape[0], 1)), x])
    beta, *_ = np.linalg.lstsq(design, y, rcond=None)
    return np.asarray(beta[1:], dtype=np.float64)


def ols_relative_error(original: FloatMatrix, released: FloatMatrix, n_qi: int) -> float:
    """||b_Y - b_X|| / ||b_X|| for the OLS slopes of the first confidential attribute on the QIs."""
    bx = ols_coefficients(original[:, :n_qi], original[:, n_qi])
    by = ols_coefficients(released[:, :n_qi], released[:, n_qi])
    norm = float(np.linalg.norm(bx))
    return float(np.linalg.norm(by - bx) / norm) if norm > 0 else float(np.linalg.norm(by))


def utility(original: FloatMatrix, released: FloatMatrix, n_qi: int) -> Utility:
    """All utility measures of a release row-aligned with ``original`` (both: QIs then confidential)."""
    x = np.asarray(original, dtype=np.float64)
    y = np.asarray(released, dtype=np.float64)
    if x.shape[0] < 2:
        return NO_RELEASE
    return Utility(
        sse_sst_percent=sse_sst_percent_pair(x, y),
        il1s=il1s(x, y),
        mean_change=_relative_change(x.mean(axis=0), y.mean(axis=0)),
        variance_change=_relative_change(x.var(axis=0), y.var(axis=0)),
        correlation_change=correlation_mean_abs_difference(x, y),
        ols_relative_error=ols_relative_error(x, y, n_qi) if x.shape[0] > n_qi + 1 else math.nan,
    )


@dataclass(frozen=True)
class IntruderRisk:
    #: Per released record (in the order given): 1/t if the true row is among its t matches, else 0.
    success: NDArray[np.float64]
    distance: NDArray[np.int64]
    hellinger: float


def intruder_risk(original: FloatMatrix, release: FloatMatrix, rows: IndexArray, *, seed: int,
                  random_records: int = 2000) -> IntruderRisk:
    """The maximum-knowledge intruder (knows ``original`` and ``release``) against each record.

    ``rows[i]``: the release row of original record i (the true mapping, 0-based).
    """
    attack = maximum_knowledge_attack(original, release, random=random_records, seed=seed)
    success = np.zeros(len(rows), dtype=np.float64)
    for i, matches in enumerate(attack.matches):
        if int(rows[i]) in set(matches.tolist()):
            success[i] = 1.0 / len(matches)
    return IntruderRisk(success, np.asarray(attack.distances, dtype=np.int64), attack.hellinger)


def collusion_risk(group_size: int, k: int) -> float:
    """r_G = 1/(g - (k - 1)): k-1 colluding members of her group of size g strike out their own
    records; she is one of the g - k + 1 left (1 when g = k, and 1 for a group smaller than k)."""
    return 1.0 / max(1, group_size - (k - 1))


@dataclass(frozen=True)
class CollectorLinking:
    #: Per subject of the blocks: the probability that the collector attributes her row to her.
    risk: dict[int, float]
    #: The collector's best strategy, its hits, the records it was tried on and the chance expectation.
    best: str
    hits: int
    records: int
    chance: float
    p_value: float


def collector_risk(orders: dict[int, dict[str, list[int]]], block_of_subject: IndexArray,
                   row_of_subject: IndexArray, block_starts: Sequence[int], block_sizes: Sequence[int],
                   release_conf: FloatMatrix, submitted_conf: FloatMatrix) -> CollectorLinking:
    """The curious collector's linking of group members to released rows (as in the unlinkability test).

    Each strategy lines the members of a group up in some order it observed (submission, reverse
    submission, reveal, mixing order) and attributes the p-th released row of the group to the p-th
    member; a hit is a row holding exactly her shared values. The collector keeps its best strategy
    if its hits exceed chance (the sum over members of 1/g) with a one-sided binomial p-value below
    `LINK_ALPHA` divided by the number of strategies tried: then r_C is 1 for a hit and 0 otherwise.
    Otherwise it can do no better than a uniform guess within her group: r_C = 1/g.
    """
    hits: dict[str, dict[int, float]] = {}
    for block, by_strategy in orders.items():
        start, size = block_starts[block], block_sizes[block]
        for name, order in by_strategy.items():
            table = hits.setdefault(name, {})
            for position, row in enumerate(order[:size]):
                if block_of_subject[row] == block:
                    table[row] = float(np.array_equal(release_conf[start + position], submitted_conf[row]))
    members = [int(i) for i in np.flatnonzero(block_of_subject >= 0)]
    chance = sum(1.0 / block_sizes[int(block_of_subject[i])] for i in members)
    uniform = {i: 1.0 / block_sizes[int(block_of_subject[i])] for i in members}
    best, best_hits = "uniform_guess", 0
    for name, table in sorted(hits.items()):
        count = int(sum(table.get(i, 0.0) for i in members))
        if count > best_hits:
            best, best_hits = name, count
    p_value = 1.0
    if members and best != "uniform_guess":
        p_value = float(stats.binomtest(best_hits, len(members), min(1.0, chance / len(members)),
                                        alternative="greater").pvalue)
    if best != "uniform_guess" and p_value < LINK_ALPHA / max(1, len(hits)):
        return CollectorLinking({i: hits[best].get(i, 0.0) for i in members}, best, best_hits, len(members),
                                chance, p_value)
    return CollectorLinking(uniform, "uniform_guess", best_hits, len(members), chance, p_value)


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and the Student-t confidence interval (lo, hi) over independent replicates (seeds)."""
    data = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if data.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(data.mean())
    if data.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, data.size - 1) * data.std(ddof=1) / math.sqrt(data.size))
    return mean, mean - half, mean + half
