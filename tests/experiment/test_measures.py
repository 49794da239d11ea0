"""Each measure of coutil.experiment.measures against a small case computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coutil.errors import InputError
from coutil.experiment.measures import (
    collector_risk,
    collusion_risk,
    intruder_risk,
    mean_ci,
    ols_relative_error,
    utility,
)
from coutil.experiment.strategies import subject_strategy


def test_utility_of_a_two_group_microaggregation_by_hand() -> None:
    # One QI, one confidential attribute; groups {1,2} and {3,4} on the QI (centroids 1.5 and 3.5).
    x = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [4.0, 40.0]])
    y = np.array([[1.5, 10.0], [1.5, 20.0], [3.5, 30.0], [3.5, 40.0]])
    u = utility(x, y, n_qi=1)
    # z-scores of the QI: (x - 2.5) / sqrt(1.25); SSE = 4 * 0.25 / 1.25 = 0.8; SST = 4 + 4 (two attributes).
    assert u.sse_sst_percent == pytest.approx(100 * 0.8 / 8)
    assert u.u == pytest.approx(0.9)
    # IL1s: mean over 8 cells of |x - y| / (sqrt 2 S), S = sd(ddof=1) of the QI = sqrt(5/3); 4 cells of 0.5.
    assert u.il1s == pytest.approx(4 * 0.5 / (math.sqrt(2) * math.sqrt(5 / 3)) / 8)
    assert u.mean_change == pytest.approx(0.0)
    # Variance of the QI: 1.25 -> 1.0 (relative change 0.2); confidential unchanged: mean of (0.2, 0) = 0.1.
    assert u.variance_change == pytest.approx(0.1)
    # OLS of the confidential on the QI: slope 10 on X; on Y the slope of (10,20,30,40) on (1.5,1.5,3.5,3.5) is 10.
    assert u.ols_relative_error == pytest.approx(0.0, abs=1e-12)
    # Correlation 1 on X; on Y centred QI (-1,-1,1,1) against (-15,-5,5,15): 40 / (2 sqrt 500) = 2/sqrt 5.
    assert u.correlation_change == pytest.approx(1 - 2 / math.sqrt(5))


def test_ols_relative_error_by_hand() -> None:
    x = np.array([[0.0, 0.0], [1.0, 2.0], [2.0, 4.0]])  # slope 2
    y = np.array([[0.0, 0.0], [1.0, 3.0], [2.0, 6.0]])  # slope 3
    assert ols_relative_error(x, y, 1) == pytest.approx(0.5)


def test_collusion_risk() -> None:
    assert collusion_risk(5, 5) == 1.0  # the k-1 others strike out their own records: hers is the one left
    assert collusion_risk(7, 5) == pytest.approx(1 / 3)
    assert collusion_risk(3, 5) == 1.0


def test_intruder_risk_plain_release_is_certain() -> None:
    x = np.array([[1.0, 5.0], [2.0, 6.0], [3.0, 7.0], [4.0, 8.0]])
    plain = intruder_risk(x, x.copy(), np.arange(4), seed=1, random_records=50)
    assert plain.success.tolist() == [1.0, 1.0, 1.0, 1.0] and plain.distance.tolist() == [0, 0, 0, 0]
    # The same release in another row order: the true mapping follows the rows, the risk does not change.
    shuffled = intruder_risk(x, x[[2, 0, 3, 1]], np.array([1, 3, 0, 2]), seed=1, random_records=50)
    assert shuffled.success.tolist() == [1.0, 1.0, 1.0, 1.0]
    # A wrong mapping scores nothing.
    wrong = intruder_risk(x, x.copy(), np.array([1, 0, 3, 2]), seed=1, random_records=50)
    assert wrong.success.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_collector_risk_chance_and_a_leaking_order() -> None:
    # Two groups of 3 subjects (rows 0-2 -> block 0, rows 3-5 -> block 1); released rows sorted by value.
    submitted = np.array([[3.0], [1.0], [2.0], [6.0], [4.0], [5.0]])
    release = np.array([[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]])
    blocks = np.array([0, 0, 0, 1, 1, 1])
    rows = np.array([2, 0, 1, 5, 3, 4])
    # An order that never lines up: the collector can do no better than 1/g.
    blind = {0: {"submission_order": [0, 1, 2]}, 1: {"submission_order": [3, 4, 5]}}
    chance = collector_risk(blind, blocks, rows, [0, 3], [3, 3], release, submitted)
    assert chance.best == "uniform_guess" and chance.hits == 0
    assert all(v == pytest.approx(1 / 3) for v in chance.risk.values())
    # Twenty groups whose reveal order is exactly the sorted order: every attribution hits.
    g = 20
    sub = np.arange(3 * g, dtype=float)[:, None]
    order = {b: {"reveal_order": [3 * b, 3 * b + 1, 3 * b + 2]} for b in range(g)}
    leak = collector_risk(order, np.repeat(np.arange(g), 3), np.arange(3 * g), list(range(0, 3 * g, 3)),
                          [3] * g, sub, sub)
    assert leak.best == "reveal_order" and leak.hits == 3 * g and leak.p_value < 1e-6
    assert set(leak.risk.values()) == {1.0}


def test_mean_ci_by_hand() -> None:
    mean, lo, hi = mean_ci([1.0, 2.0, 3.0])
    # t_{0.975, 2} = 4.302653; sd = 1; half-width = 4.302653 / sqrt 3.
    assert mean == 2.0
    assert hi - mean == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert mean - lo == pytest.approx(hi - mean)


def test_strategy_registry() -> None:
    honest = subject_strategy("honest")
    assert honest.channel == "protocol" and not honest.deviates
    shifted = subject_strategy("misreport-qi", {"shift": 2.0})
    qi, conf = shifted.submitted(np.array([1.0, 2.0]), np.array([3.0]), np.array([0.5, 1.0]), np.array([1.0]))
    assert qi.tolist() == [2.0, 4.0] and conf.tolist() == [3.0]
    assert subject_strategy("silent@registered").vanish_state == "registered"
    # free-rider is the deviation library's node (registers, publishes her run keys, never submits).
    free_rider = subject_strategy("free-rider")
    assert free_rider.node == "free-rider" and free_rider.vanish_state is None
    with pytest.raises(InputError, match="unknown subject strategy"):
        subject_strategy("bogus")
    with pytest.raises(InputError, match="unknown subject state"):
        subject_strategy("silent@nowhere")
    with pytest.raises(InputError, match="unknown parameter"):
        subject_strategy("misreport-qi", {"shfit": 1})
