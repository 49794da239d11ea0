"""Transport outages on the in-memory bus (virtual time: fast and deterministic).

What each test proves:

- `test_outage_mid_phase_loses_nobody`: every subject, the collector, or everyone (a broker outage)
  cut off for 150 s (7.5 step timeouts) in the middle of sharing, or just after the release: the
  round completes with every subject released and accepting. With the subjects cut off the collector
  is not told and must infer the outage from silence; with the collector cut off it is told (as the
  MQTT driver tells it when its connection drops).
- `test_a_silent_member_is_still_excluded_promptly`: one subject vanishing mid-shuffle while every
  other one talks is excluded as ``silent`` within a few step timeouts, as before (not taken for an
  outage, not kept waiting for `OUTAGE_LIMIT`).
- `test_an_outage_longer_than_the_limit_excludes`: the inference is bounded: subjects silent for
  longer than the collector's outage limit are excluded (a round whose subjects all vanished ends).
"""

from __future__ import annotations

import pytest

from coutil.protocol.config import RoundConfig
from coutil.round import simulate_round, synthetic_dataset
from coutil.round.memory import MemoryRound
from coutil.round.simulation import FaultPlan, Outage
from coutil.sdc.dataset import Dataset

N = 60
OUTAGE = 150.0  # seconds: 7.5 step timeouts of 20 s


def _config() -> RoundConfig:
    return RoundConfig(qi=("age", "height"), confidential=("income",), k=5, random_records=100, expected_subjects=N)


@pytest.fixture(scope="module")
def baseline() -> tuple[Dataset, RoundConfig, MemoryRound]:
    config = _config()
    data = synthetic_dataset(N, config, 3)
    return data, config, simulate_round(data, config, seed=3)


def _release_time(simulated: MemoryRound) -> float:
    times = simulated.report.outcome.phase_times
    return float(times["registration"] + times["sharing"])


def _assert_everyone(simulated: MemoryRound) -> None:
    outcome = simulated.report.outcome
    assert outcome.completed, simulated.report.summary()
    assert outcome.excluded == []
    assert outcome.rows.shape[0] == N
    assert len(outcome.verdicts) == N and all(v["accept"] for v in outcome.verdicts)


@pytest.mark.parametrize("who", ["subjects", "collector", "everyone"])
@pytest.mark.parametrize("phase", ["sharing", "auditing"])
def test_outage_mid_phase_loses_nobody(baseline: tuple[Dataset, RoundConfig, MemoryRound], who: str,
                                       phase: str) -> None:
    data, config, base = baseline
    _assert_everyone(base)
    times = base.report.outcome.phase_times
    # Same seed: the round is identical up to the outage, so these instants fall in that phase.
    start = float(times["registration"]) + float(times["sharing"]) / 2 if phase == "sharing" \
        else _release_time(base) + 0.05
    simulated = simulate_round(data, config, seed=3, outages=[Outage(start, start + OUTAGE, who)])
    _assert_everyone(simulated)
    # It cost time, and the round really was cut off for longer than several step timeouts.
    assert simulated.report.virtual_time > start + OUTAGE
    assert simulated.report.dropped["partition"] > 0
    kinds = simulated.report.node_events
    if who == "subjects":
        assert kinds.get("outage_suspected", 0) > 0, kinds  # inferred from silence
    else:
        assert kinds.get("transport", 0) == 2, kinds  # told: down, then up


def test_a_silent_member_is_still_excluded_promptly(baseline: tuple[Dataset, RoundConfig, MemoryRound]) -> None:
    data, config, _ = baseline
    simulated = simulate_round(data, config, seed=4, faults=FaultPlan(vanish_fraction=1 / N, vanish_window=0.5))
    report = simulated.report
    assert report.completed
    assert len(report.vanished) == 1
    vanished = report.sids[report.vanished[0]]
    assert report.outcome.excluded == [{"sid": vanished, "reason": "silent"}]
    assert report.outcome.rows.shape[0] == N - 1
    assert report.node_events.get("outage_suspected", 0) == 0
    # Excluded at the step deadline, as before: the round does not wait anything like the outage limit.
    assert report.virtual_time < 5 * config.step_timeout


def test_an_outage_longer_than_the_limit_excludes(baseline: tuple[Dataset, RoundConfig, MemoryRound]) -> None:
    data, config, base = baseline
    times = base.report.outcome.phase_times
    start = float(times["registration"]) + float(times["sharing"]) / 2
    # The subjects never come back: after OUTAGE_LIMIT (600 s) of silence they are excluded.
    simulated = simulate_round(data, config, seed=3, outages=[Outage(start, 10_000.0, "subjects")])
    outcome = simulated.report.outcome
    assert simulated.report.stop_reason == "finished"
    assert not outcome.completed or outcome.rows.shape[0] < N
    assert any(e["reason"] == "silent" for e in outcome.excluded)
    assert 600.0 < simulated.report.virtual_time < 600.0 + 10 * config.step_timeout + start
