"""`late-no-go`: a member who votes go and, once the reveal_open came, signs a no-go vote of her own and blames with
it (never publishing that vote), withholding her reveal: her blame is a late equivocation of her own
(`late_equivocation`), so she is recorded both as the equivocator and as the blamer. Found by a reviewer of the
relabelling of late blamers (`silent` -> `suppressed`): she was excluded `suppressed` like the honest members of her
group she had suppressed, neither `silent` (before the relabelling) nor `blamed_equivocation` (what her own
signatures prove)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.cli import main
from tests.verify.test_verify_blames import _simulate, _verify


@pytest.mark.parametrize("seed", [3, 8])
def test_a_member_blaming_with_her_own_late_no_go_is_convicted(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _simulate(tmp_path, "late-no-go", seed, '[[adversary.subjects]]\nstrategy = "late-no-go"\nrows = [4]\n')
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    [subject] = [e for e in report["adversary"]["deviants"] if e["role"] == "subject"]
    assert subject["deviated"], subject
    exclusions = json.loads((out / "transcript.json").read_text())["exclusions"]
    # Her own go and no-go votes of one run prove her equivocation; the honest members of her group, suppressed.
    assert exclusions[subject["node"]] == "blamed_equivocation", exclusions
    others = {reason for sid, reason in exclusions.items() if sid != subject["node"]}
    assert others == {"suppressed"}, exclusions
    assert report["adversary"]["honest_excluded"] == {"suppressed": len(exclusions) - 1}, report["adversary"]
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)


def test_a_member_suppressed_with_her_group_is_not_reported_detected(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The report's `adversary` section counted any exclusion of a deviator as the collector's detection, so a member
    excluded only with her group (`suppressed`) was reported detected like one it convicted (found by a reviewer).
    One member silent at the reveal, every other one misreporting her confidential values (which nobody can tell):
    the silent one is detected, her group-mates, `suppressed`, are not, nor is anyone else."""
    others = [row for row in range(36) if row != 4]
    config, out = tmp_path / "silent-reveal.toml", tmp_path / "silent-reveal"
    config.write_text('[round]\nk = 3\nrandom_records = 50\n[data]\nrows = 36\n'
                      '[[adversary.subjects]]\nstrategy = "silent"\nphase = "reveal"\nrows = [4]\n'
                      f'[[adversary.subjects]]\nstrategy = "misreport-confidential"\nrows = {others}\n')
    # Exit 5: the suppressed members complain (`not_included`).
    assert main(["simulate", "--config", str(config), "--seed", "3", "--out", str(out), "--json"]) == 5
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    entries = [e for e in report["adversary"]["deviants"] if e["role"] == "subject"]
    reasons = [e["exclusion_reason"] for e in entries]
    assert reasons.count("silent") == 1 and reasons.count("suppressed") >= 2, reasons
    for entry in entries:
        assert entry["detected"] == (entry["exclusion_reason"] == "silent"), entry
