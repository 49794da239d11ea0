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
