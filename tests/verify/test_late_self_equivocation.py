"""A member who votes go and, once the reveal_open came, signs a no-go vote of her own and blames with it (never
publishing that vote), withholding her reveal: her blame is a late equivocation of her own (`late_equivocation`),
so she is recorded both as the equivocator and as the blamer. Found by a reviewer of the relabelling of late
blamers (`silent` -> `suppressed`): she was excluded `suppressed` like the honest members of her group she had
suppressed, neither `silent` (before the relabelling) nor `blamed_equivocation` (what her own signatures prove)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.adversary import SUBJECT_STRATEGIES
from coutil.adversary.subjects import SubjectStrategy
from coutil.protocol import topics
from coutil.protocol.messages import RevealOpen
from coutil.protocol.node import Outgoing
from tests.verify.test_verify_blames import _simulate, _verify


class LateSelfNoGo(SubjectStrategy):
    """Votes go; at the reveal_open signs a no-go vote (sent to nobody) and blames with it, never revealing."""

    NAME = "late-self-no-go"

    def _on_reveal_open(self, message: RevealOpen, digest: bytes, now: float) -> list[Outgoing]:
        run = self._run
        if run is None or run.number != message.run or not run.my_vote or run.revealed or run.blamed \
                or run.final_digest is None or self._round_id is None or not self._deviate(run.number):
            return super()._on_reveal_open(message, digest, now)
        no_go = self._emit(topics.subject_group(self._round_id, self.public_key),
                           self._vote(run, False, run.final_digest))
        run.no_go_vote = no_go.payload  # carried by her blame, published nowhere else
        return self._start_blame(run, now)


@pytest.mark.parametrize("seed", [3, 8])
def test_a_member_blaming_with_her_own_late_no_go_is_convicted(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(SUBJECT_STRATEGIES, LateSelfNoGo.NAME, f"{__name__}:LateSelfNoGo")
    out = _simulate(tmp_path, "late-self-no-go", seed,
                    f'[[adversary.subjects]]\nstrategy = "{LateSelfNoGo.NAME}"\nrows = [4]\n')
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
