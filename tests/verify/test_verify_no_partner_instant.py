"""`below_k_no_partner` at one instant (b410e13's `_no_partner`), found by an attacker of that commit: the last two
groups of a round fall below k at one `now`; an honest collector merges the first it handles into the other, still
sealed; a collector that dissolves both `below_k_no_partner` (their members' records dropped) passed verify, since
`_sealed_at` leaves out a group closed at the very time of the exclusion, each the other's excuse. Now the groups
dissolved so at one instant need an order in which none would have fitted into one still sealed after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from coutil.protocol.collector_groups import GroupState
from coutil.round.transcript import read_transcript
from tests.verify.test_verify import failed, run_round, verify
from tests.verify.test_verify_merge_order import _one_step

OneStep = _one_step(0, 1, {})


class BothNoPartner(OneStep):  # type: ignore[misc, valid-type]
    def _merge_target(self, group: GroupState) -> GroupState | None:
        super()._merge_target(group)
        return None


@pytest.mark.parametrize("seed", [1, 3])
def test_two_groups_dissolved_below_k_no_partner_beside_each_other_at_one_instant_are_caught(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vanish = {0: 6.0, 5: 6.0}  # one member of each of the two groups of 3
    honest = run_round(tmp_path / "honest", OneStep, n=6, seed=seed, vanish=vanish)
    assert [m[:2] for m in honest.collector.merges] == [(1, 0)]  # type: ignore[attr-defined]
    code, result, _ = verify(honest.directory, capsys)
    assert code == 0, failed(result)
    run = run_round(tmp_path / "dropped", BothNoPartner, n=6, seed=seed, vanish=vanish)
    reasons = sorted(read_transcript(run.directory / "transcript.json").exclusions.values())
    assert reasons == ["below_k_no_partner"] * 4 + ["silent"] * 2
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and list(problems) == ["grouping"], problems
    assert "whichever dissolved first, another was still sealed" in problems["grouping"][0]
