"""The deviation library (coutil.adversary) inside the co-utility experiments: every subject and collector
strategy is a study strategy, runs as its node, and its outcome (detection, exclusion, the collector's leak)
reaches the subjects' rows, the summaries and the payoff tables."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coutil.adversary import COLLECTOR_STRATEGIES, SUBJECT_STRATEGIES
from coutil.errors import InputError
from coutil.experiment.config import Study, load_study
from coutil.experiment.payoffs import payoff_table
from coutil.experiment.runner import load_results, run_study
from coutil.experiment.strategies import DATA_LEVEL, CollectorStrategy, collector_strategy, subject_strategy


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


def _run(tmp_path: Path, text: str) -> tuple[Study, list[dict[str, Any]]]:
    """The study of ``text``, run in ``tmp_path``, and its results."""
    study = load_study(_study(tmp_path, text))
    run_study(study, tmp_path / "out")
    return study, load_results(study, tmp_path / "out")


def test_every_library_strategy_is_a_study_strategy() -> None:
    for name in SUBJECT_STRATEGIES:
        strategy = subject_strategy(name)
        if name in DATA_LEVEL:  # applied to the values the node is given (shift in public sds)
            assert strategy.node is None and (strategy.qi_shift or strategy.confidential_shift)
        else:
            assert strategy.node == name and strategy.channel == "protocol" and strategy.deviates
    for name in COLLECTOR_STRATEGIES:
        assert collector_strategy(name).node == name
    assert collector_strategy("honest").node is None
    alias = subject_strategy("silent-vote", {"strategy": "silent", "phase": "vote"})
    assert (alias.name, alias.node, alias.node_params) == ("silent-vote", "silent", (("phase", "vote"),))
    sybils = collector_strategy("fabricate-isolate", {"strategy": "fabricate-members", "isolate": True})
    assert (sybils.name, sybils.node, sybils.node_params) == ("fabricate-isolate", "fabricate-members",
                                                              (("isolate", True),))
    with pytest.raises(InputError, match="unknown key"):
        subject_strategy("silent", {"phaze": "vote"})
    with pytest.raises(InputError, match="must be one of"):
        subject_strategy("silent", {"phase": "never"})
    with pytest.raises(InputError, match="unknown collector strategy"):
        collector_strategy("bogus")
    with pytest.raises(InputError, match="must name another strategy"):
        subject_strategy("loop", {"strategy": "loop"})


def test_collector_payoff_formula() -> None:
    # u_C = U + w_leak * share - w_detection * [public]
    assert CollectorStrategy.payoff(0.9) == pytest.approx(0.9)
    assert CollectorStrategy.payoff(0.9, 0.02, True) == pytest.approx(0.9 + 0.02 - 1.0)
    assert CollectorStrategy.payoff(0.9, 0.02, True, {"leak": 50.0, "detection": 0.0}) == pytest.approx(1.9)


#: Three seeds of 30 synthetic subjects, k = 3, two focal subjects, the collaborative round only.
SMALL = """
[study]
seeds = [1, 2, 3]
methods = ["collaborative"]
focal = 2
intruder_random_records = 100
[grid]
dataset = ["synthetic"]
n = [30]
k = [3]
"""

SUBJECTS = SMALL + """deviation = ["honest", "copycat", "silent-vote"]
[strategies.silent-vote]
strategy = "silent"
phase = "vote"
[round]
random_records = 30
"""


def test_a_library_deviation_is_detected_its_author_excluded_and_it_costs_her(tmp_path: Path) -> None:
    study, results = _run(tmp_path, SUBJECTS)
    for result in results:
        deviation = result["cell"]["deviation"]
        focal = [r for r in result["rows"] if r["focal"]]
        others = [r for r in result["rows"] if not r["focal"]]
        assert all(r["strategy"] == deviation for r in focal)
        if deviation == "honest":
            assert not any(r["excluded"] or r["detected"] for r in result["rows"])
            continue
        # Her deviation is detected and she, not an honest member, is excluded; the round completes.
        assert all(r["detected"] and r["excluded"] and not r["released"] for r in focal), focal
        assert not any(r["excluded"] for r in others)
        summary = result["summary"][0]
        assert summary["completed"] and summary["released"] == 30 - len(focal)
        assert summary["honest_excluded"] == 0
    table = payoff_table(study, results)
    for name in ("copycat", "silent-vote"):
        row = next(r for r in table["rows"] if r["strategy"] == name)
        assert row["seeds"] == 3 and row["gain_hi"] < 0 and row["verdict"] == "costly", row


COLLECTOR = SMALL + """collector = ["honest", "rerun-subtract", "fabricate-isolate"]
[collectors.fabricate-isolate]
strategy = "fabricate-members"
isolate = true
[collector_types.reputation]
leak = 1.0
detection = 1.0
[collector_types.curious]
leak = 30.0
detection = 0.0
[round]
random_records = 30
"""


def test_collector_deviations_their_leak_detection_and_payoff(tmp_path: Path) -> None:
    study, results = _run(tmp_path, COLLECTOR)
    for result in results:
        summary = result["summary"][0]
        strategy = result["cell"]["collector"]
        assert summary["collector_strategy"] == strategy
        victim = next(r for r in result["rows"] if r["focal"])  # the first focal subject
        if strategy == "honest":
            assert "collector_leak" not in summary
        elif strategy == "rerun-subtract":
            # Refused by the members who revealed, made public in their verdicts; it learns nothing.
            assert summary["collector_deviated"] and summary["collector_public"]
            assert summary["collector_leak"] == 0
        else:
            # The remaining limit (Sybils): her record alone in a group of the collector's identities.
            assert summary["collector_leak"] == 1 and victim["r_collector"] == 1.0, summary
    table = payoff_table(study, results)
    rows = {(r["type"], r["strategy"]): r for r in table["collector"]}
    assert rows[("reputation", "rerun-subtract")]["verdict"] == "costly"
    assert rows[("curious", "rerun-subtract")]["gain"] == pytest.approx(0.0)
    # To a collector that values one record like the whole release and does not mind being caught,
    # isolating a victim among Sybils pays: the measured limit of the threat model (SPEC §3).
    assert rows[("curious", "fabricate-isolate")]["verdict"] == "profitable"
    assert rows[("curious", "fabricate-isolate")]["leak"] == 1.0


def test_study_file_errors_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown collector strategy 'bogus'"):
        load_study(_study(tmp_path, COLLECTOR.replace('"rerun-subtract"', '"bogus"')))
    with pytest.raises(InputError, match=r"\[collector_types.curious\]: unknown key\(s\) leek"):
        load_study(_study(tmp_path, COLLECTOR.replace("leak = 30.0", "leek = 30.0")))
    with pytest.raises(InputError, match="unknown key"):
        load_study(_study(tmp_path, SUBJECTS.replace('phase = "vote"', 'phaze = "vote"')))
    with pytest.raises(InputError, match=r"\[collectors.fabricate-isolate\]: victim row 30 is not in every cell"):
        load_study(_study(tmp_path, COLLECTOR.replace("isolate = true", "isolate = true\nvictim = 30")))
    with pytest.raises(InputError, match=r"\[collectors.fabricate-isolate\]: strategy must name another"):
        load_study(_study(tmp_path, COLLECTOR.replace('strategy = "fabricate-members"', "strategy = 5")))


def test_a_collector_targets_the_first_focal_subject_who_takes_part(tmp_path: Path) -> None:
    """Focal subjects who decline are not in the round: the collector's victim is then the round's first subject."""
    text = COLLECTOR.replace('collector = ["honest", "rerun-subtract", "fabricate-isolate"]',
                             'collector = ["fabricate-isolate"]\ndeviation = ["decline"]').replace("seeds = [1, 2, 3]",
                                                                                                  "seeds = [1]")
    _, (result,) = _run(tmp_path, text)
    victim = next(r for r in result["rows"] if not r["focal"])
    assert result["summary"][0]["collector_leak"] == 1 and victim["r_collector"] == 1.0
