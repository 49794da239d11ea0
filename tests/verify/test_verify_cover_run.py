"""The auditor's `_covered` rule against a collector that manufactures its condition (`cover-run`, SPEC §3, found by
an attacker of the rule): it runs the victim's group with the registrations nearest to her from other groups, and at
the deadline excludes her `silent` and states the outsiders `merged` in the run that goes on; she refuses
(`run_not_in_group`). Then it signs her an assign covering that run, which it never delivers: the transcript keeps a
subject's latest assign, and an excluded member's only has to be well-formed. `coutil verify` took her complaint for
a merge's assign a broker held past the step and passed the round (3 of 3 seeds). Now the run must be one of her
group by every member's assign (`complaints`), and `merged` is stated only in a closing shuffle_start
(`exclusion_evidence`): both fail it, while the broker's hold (`answer-old-assign` with ``hold = 12``,
tests/adversary/test_broker_strategies.py) still verifies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coutil.cli import main

ROUND = '[round]\nk = 3\nrandom_records = 50\n[data]\nrows = 37\n[adversary.collector]\nstrategy = "cover-run"\n'


@pytest.mark.parametrize("seed", [3, 5, 8])
def test_a_run_outside_her_group_covered_by_an_assign_never_sent_fails_verify(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "round.toml"
    config.write_text(ROUND)
    out = tmp_path / "out"
    main(["simulate", "--config", str(config), "--seed", str(seed), "--out", str(out), "--with-registrations",
          "--json"])
    report = json.loads((out / "report.json").read_text())["adversary"]
    [collector] = report["deviants"]
    # The deviation happened and she refused it: excluded `silent`, her complaint signed; nothing of hers opened.
    assert collector["deviated"] and collector["leak"] == []
    assert report["honest_complaints"] == {"run_not_in_group": 1} and report["honest_excluded"] == {"silent": 1}
    assigns = json.loads((out / "transcript.json").read_text())["assignments"]
    assert len(assigns) == 37  # one per subject: hers the covering one it never sent
    capsys.readouterr()
    code = main(["verify", str(out)])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code == 3, text[-800:]  # before: 0, "1 subject complained run_not_in_group, each excluded by a signed ..."
    assert "FAIL complaints: 1 subject complained run_not_in_group" in text
    assert "FAIL exclusion_evidence" in text and "merged in a run that goes on" in text
