"""Attacks on the signed transcript's comparison of copies (SPEC §8.5, check `transcript_signature`), each found by an
attacker playing a collector that hands two auditors two stories of one round, and failing before its fix."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from coutil.cli import main
from coutil.protocol import codec, crypto
from coutil.protocol.messages import Register
from coutil.protocol.topics import sid_of
from coutil.round.transcript import read_transcript
from tests.verify.test_verify import Run, failed, resigned, run_round, verify


def _pair(run: Run, other: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    capsys.readouterr()
    code = main(["verify", str(run.directory), "--other-transcript", str(other), "--json"])
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    return code, checks["transcript_signature"]


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_round(tmp_path_factory.mktemp("honest"))


@pytest.mark.parametrize("phase", ["done ", "DONE", "finished"])
def test_a_copy_signed_with_no_collector_phase_fails_alone_and_convicts_beside_the_final_one(
        phase: str, honest: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A second copy with a complaint left out, signed, its phase a string no collector writes: before, it passed alone
    (exit 0, no skip), and beside the final copy it was "not final", so not compared: the pair proved nothing."""
    document = json.loads((honest.directory / "transcript.json").read_text())
    other = tmp_path / "other.json"
    other.write_text(json.dumps(resigned({**document, "phase": phase, "verdicts": document["verdicts"][1:]},
                                         honest.collector)))
    code, result, _ = verify(other, capsys)
    assert code == 3 and list(failed(result)) == ["transcript_signature"], failed(result)
    assert "no collector phase" in failed(result)["transcript_signature"][0]
    code, check = _pair(honest, other, capsys)
    assert code == 3 and check["status"] == "fail" and "no collector phase" in check["problems"][0]


def test_a_copy_not_final_is_compared_in_what_never_changes_once_signed(
        honest: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A copy labelled `auditing` escaped every comparison, whatever it held. Now it is compared with a final copy in
    what the collector signs once (announce, roster, release, each subject's verdict) and what it only adds to (a
    verdict of the unfinished copy missing from the final one convicts: the complaint shown to one auditor, hidden
    from the other). An honest earlier copy (fewer verdicts) is no conviction (SPEC §3's open row: a copy not final
    cannot prove that a verdict was left out); alone, it is said to be unfinished (skipped, not "every check
    passes")."""
    first = honest.directory / "transcript.json"
    document = json.loads(first.read_text())
    # The final copy without one verdict, the unfinished one with it: no honest collector drops an accepted verdict.
    first_copy = tmp_path / "final.json"
    first_copy.write_text(json.dumps(resigned({**document, "verdicts": document["verdicts"][1:]}, honest.collector)))
    unfinished = tmp_path / "auditing.json"
    unfinished.write_text(json.dumps(resigned({**document, "phase": "auditing"}, honest.collector)))
    capsys.readouterr()
    code = main(["verify", str(first_copy), "--other-transcript", str(unfinished), "--json"])
    check = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["transcript_signature"]
    assert code == 3 and check["status"] == "fail" and "verdicts" in check["problems"][0], check
    # Another release in the unfinished copy (signed by the collector): two releases of one round.
    release = codec.decode(bytes.fromhex(document["release"])).message
    other_release = dataclasses.replace(release, roster_root=bytes(32))
    assert other_release != release
    forged = {**document, "phase": "auditing", "verdicts": [],
              "release": honest.collector._sign(other_release).hex()}
    unfinished.write_text(json.dumps(resigned(forged, honest.collector)))
    code, check = _pair(honest, unfinished, capsys)
    assert code == 3 and check["status"] == "fail" and "release" in check["problems"][0], check
    # An honest earlier copy: no conviction, and alone it says it is unfinished.
    unfinished.write_text(json.dumps(resigned({**document, "phase": "auditing", "verdicts": document["verdicts"][1:]},
                                              honest.collector)))
    code, check = _pair(honest, unfinished, capsys)
    assert code == 0 and check["status"] == "pass", check
    code, result, _ = verify(unfinished, capsys)
    assert code == 0 and "transcript_signature" in result["skipped"], result
    assert any("not finished" in note for c in result["checks"] if c["check"] == "transcript_signature"
               for note in c["notes"])


@pytest.mark.parametrize("signed", [True, False])
def test_an_auditor_requiring_a_final_transcript_fails_one_never_finished(
        signed: bool, honest: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC §3's open row: a collector that never finishes its transcript is compared with another copy only in what
    never changes once signed, and alone such a copy is skipped (exit 0). An auditor who publishes her conclusion
    asks for the final statement (`--require-final`): a copy of a round not finished then fails, signed or not
    (exit 3), while the final copy of the same round still passes."""
    document = json.loads((honest.directory / "transcript.json").read_text())
    assert document["phase"] == "done"
    unfinished = tmp_path / "auditing.json"
    held = {**document, "phase": "auditing", "verdicts": document["verdicts"][1:]}
    unfinished.write_text(json.dumps(resigned(held, honest.collector) if signed else
                                     {**held, "collector_signature": ""}))
    capsys.readouterr()
    code = main(["verify", str(unfinished), "--json", "--require-final"])
    check = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["transcript_signature"]
    assert code == 3 and check["status"] == "fail", check
    assert any("not finished" in problem and "--require-final" in problem for problem in check["problems"]), check
    capsys.readouterr()
    assert main(["verify", str(honest.directory), "--require-final", "--json"]) == 0
    capsys.readouterr()


def test_registrations_beside_registrations_included_false_are_not_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The registrations are outside the signed statement, and the roster root checks them only when the transcript
    says it holds them. Said not held but there, they were read all the same: a registration of an identity of the
    collector's (off the roster) made its exclusion one of a roster member's (`membership` passed it). A list whose
    flag is false is now not read."""
    run = run_round(tmp_path, registrations=True)
    path = run.directory / "transcript.json"
    document = json.loads(path.read_text())
    registration = codec.decode(bytes.fromhex(document["registrations"][0])).message
    assert isinstance(registration, Register)
    puppet = crypto.SigningKey(bytes(range(32)))
    fake = codec.encode(dataclasses.replace(registration, sender=puppet.public), puppet).hex()
    document.update(registrations=[fake], registrations_included=False,
                    exclusions={**document["exclusions"], sid_of(puppet.public): "silent"})
    path.write_text(json.dumps(resigned(document, run.collector)))
    assert read_transcript(path).registrations == ()
    code, result, _ = verify(run.directory, capsys)
    assert code == 3 and "membership" in failed(result), failed(result)
    assert "not in the roster" in failed(result)["membership"][0]


def test_a_verdict_arriving_once_the_round_is_done_leaves_its_transcript_as_it_was(tmp_path: Path) -> None:
    """Found by the attacker of the signed transcript: the collector recorded (and acknowledged) a new verdict in phase
    done, so two honest exports of a done round, one before and one after a late verdict, were two different final
    statements it signed: a false conviction. A new verdict once done is now IGNORE `late`, unacknowledged (SPEC §7.3,
    §8.5); one already recorded is still acknowledged again."""
    from coutil.protocol import topics
    from coutil.protocol.messages import Verdict
    from coutil.protocol.states import CollectorState

    run = run_round(tmp_path, vanish={0: 4.0})  # registered, then silent: no verdict of hers
    collector = run.collector
    assert collector.state == CollectorState.DONE
    late = run.subjects[0]
    before = read_transcript(run.directory / "transcript.json")
    verdicts = len(collector.outcome().verdicts)
    assert before.release is not None and len(before.verdicts) == verdicts
    verdict = Verdict(collector.round_id, late.public_key, True, "ok", codec.decode(before.release).digest, bytes(32))
    out = collector.receive(topics.subject_up(collector.round_id, late.public_key),
                            codec.encode(verdict, late._identity), 10_000.0)
    assert out == [] and collector.rejections[-1].reason == "late" and collector.rejections[-1].ignored
    assert len(collector.outcome().verdicts) == verdicts
    # A verdict it holds is acknowledged again (a subject re-sending after a lost ack).
    known = before.verdicts[0]
    sender = codec.decode(known).message.sender
    rejected = len(collector.rejections)
    again = collector.receive(topics.subject_up(collector.round_id, sender), known, 10_001.0)
    assert len(again) == 1 and len(collector.rejections) == rejected
