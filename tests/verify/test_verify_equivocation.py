"""A subject's proof that the collector equivocated (SPEC §3 "split roster", `coutil.round.evidence`): the
announce she took part on and two messages its collector signed for that round stating different roster
roots. It convicts the collector without the transcript, so a withheld round is public too; a proof that
proves nothing is noted, never a failure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.protocol import codec, crypto, topics
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt, check_equivocation
from coutil.protocol.messages import Announce, Assign, Roster
from coutil.protocol.node import SeededRandom
from coutil.protocol.states import SubjectState
from coutil.protocol.subject import SubjectNode
from coutil.round.transcript import read_transcript
from tests.round_params import round_params


def _simulate(tmp_path: Path, name: str, collector: str = "") -> Path:
    out = tmp_path / name
    config = tmp_path / f"{name}.toml"
    config.write_text("[round]\nk = 3\nrandom_records = 50\n[data]\nrows = 31\n" + collector)
    assert main(["simulate", "--config", str(config), "--seed", "3", "--out", str(out), "--json"]) in (0, 4, 5)
    return out


@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_the_victim_of_a_roster_of_her_own_convicts_the_collector_without_its_transcript(
        withhold: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``split-roster-early``: her record is attributed (the Sybil limit in time), but the real roster and release
    reach her later; she holds two roster roots the collector signed, and her evidence alone fails `coutil verify`
    (exit 3, check ``equivocation``), whatever the collector publishes."""
    out = _simulate(tmp_path, "early", '[adversary.collector]\nstrategy = "split-roster-early"\n'
                    f"others_after = 2.0\nwithhold = {'true' if withhold else 'false'}\n")
    evidence = json.loads((out / "evidence.json").read_text())
    proofs = [e for e in evidence if "equivocation" in e]
    assert len(proofs) == 1
    brought = tmp_path / "her-evidence.json"
    brought.write_text(json.dumps(proofs))
    transcript = read_transcript(out / "transcript.json")
    key = transcript.collector_key.hex()
    capsys.readouterr()
    # A proof convicts the key that signed it: without a transcript the auditor names the collector's key.
    assert main(["verify", "--evidence", str(brought)]) == 2
    assert "--collector-key" in capsys.readouterr().err
    assert main(["verify", "--evidence", str(brought), "--collector-key", key, "--json"]) == 3
    result = json.loads(capsys.readouterr().out)
    checks = {c["check"]: c for c in result["checks"]}
    assert checks["equivocation"]["status"] == "fail"
    assert f"collector key {key} equivocated" in checks["equivocation"]["problems"][0]
    assert all(c["status"] == "skip" for name, c in checks.items() if name != "equivocation")
    assert result["round"] == transcript.round_id.hex() and result["collector_key"] == key
    # Against another key it proves nothing (noted); a transcript of another key than the one given: exit 2.
    assert main(["verify", "--evidence", str(brought), "--collector-key", "ab" * 32, "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert any("another key" in note for note in checks["equivocation"]["notes"])
    assert main(["verify", str(out), "--collector-key", "ab" * 32]) == 2
    capsys.readouterr()
    # With the run directory (its evidence.json) the check fails too, beside what the transcript shows.
    assert main(["verify", str(out), "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "fail"


def test_an_honest_round_leaves_no_proof(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every subject brings her receipt; in an honest round they all state the transcript's root (one kept)."""
    out = _simulate(tmp_path, "honest")
    assert [sorted(e) for e in json.loads((out / "evidence.json").read_text())] == [["receipt"]]
    capsys.readouterr()
    assert main(["verify", str(out), "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "pass"
    # Hers and the transcript's; a receipt brought beside them that is no receipt (an assign for a roster) is
    # noted and not counted among those taken.
    assert "(2 receipt(s) taken, one root per round)" in " ".join(checks["equivocation"]["notes"])
    t = json.loads((out / "transcript.json").read_text())
    brought = tmp_path / "brought.json"
    brought.write_text(json.dumps([RosterReceipt(bytes.fromhex(t["announce"]),
                                                 bytes.fromhex(t["assignments"][0])).as_dict()]))
    assert main(["verify", str(out), "--evidence", str(brought), "--json"]) == 0
    notes = " ".join(next(c for c in json.loads(capsys.readouterr().out)["checks"]
                          if c["check"] == "equivocation")["notes"])
    assert "(2 receipt(s) taken, one root per round)" in notes and "evidence not taken" in notes


def test_a_proof_that_proves_nothing_is_not_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Built from an honest round's signed messages: the same root twice, a message stating no root, a roster
    signed by someone else, an announce of another collector: each is noted, none fails the round; a file entry
    that is not a proof is a one-line error (exit 2)."""
    out = _simulate(tmp_path, "honest")
    t = json.loads((out / "transcript.json").read_text())
    announce, roster, assign = (bytes.fromhex(t["announce"]), bytes.fromhex(t["roster"]),
                                bytes.fromhex(t["assignments"][0]))
    verdict = bytes.fromhex(t["verdicts"][0])
    message = codec.decode(roster).message
    assert isinstance(message, Roster)
    other = crypto.SigningKey(bytes(32))
    forged = codec.encode(Roster(message.round_id, other.public, message.n, bytes(32), message.n_groups), other)
    cases = {
        "both messages state the same roster root": (announce, roster, assign),
        "states no roster root": (announce, roster, verdict),
        "of another round or collector": (announce, roster, forged),
        "not an announce": (roster, roster, assign),
    }
    for problem, (a, b, c) in cases.items():
        checked = check_equivocation(EquivocationEvidence(a, b, c))
        assert problem in checked.problem, (problem, checked.problem)
    # A valid proof (the collector re-signs another root with a key of ours here: made with our own identity) is
    # taken only for its own round and key.
    announce_message = codec.decode(announce).message
    own_announce = codec.encode(dataclasses.replace(announce_message, sender=other.public), other)
    own_roster = codec.encode(dataclasses.replace(message, sender=other.public), other)
    valid = EquivocationEvidence(own_announce, own_roster, forged)
    assert not check_equivocation(valid, message.round_id, other.public).problem
    assert "another round" in check_equivocation(valid, bytes(16), other.public).problem
    assert "another key" in check_equivocation(valid, message.round_id, message.sender).problem
    brought = tmp_path / "brought.json"
    brought.write_text(json.dumps([EquivocationEvidence(*case).as_dict() for case in cases.values()]))
    capsys.readouterr()
    assert main(["verify", str(out), "--evidence", str(brought), "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "pass"
    assert sum("evidence not taken" in note for note in checks["equivocation"]["notes"]) == len(cases)
    for text in ('[{"equivocation": ["00"]}]', '[{"equivocation": {"a": "00", "b": "00", "c": "00"}}]',
                 '[{"equivocation": [1, 2, 3]}]'):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        assert main(["verify", "--evidence", str(bad), "--collector-key", "ab" * 32]) == 2
        assert "entry 1" in capsys.readouterr().err
    assert main(["verify"]) == 2


def test_a_roster_of_another_round_seen_before_she_joins_does_not_spoil_her_proof() -> None:
    """Before she joins a round any round's roster passes the round check (found by a reviewer): kept, it took
    the place of her round's first root, and her proof of a real equivocation then named two rounds (proving
    nothing). Only her round's roots are kept: a foreign roster first, then two rosters of her round, is a
    valid proof."""
    identity = crypto.SigningKey(bytes(range(32)))
    params = round_params()
    round_id, foreign_round = b"r" * 16, b"f" * 16
    node = SubjectNode(collector_key=identity.public, qi=(1.0, 2.0), confidential=(3.0,), rng=SeededRandom(4))

    def roster(rid: bytes, root: bytes) -> bytes:
        return codec.encode(Roster(rid, identity.public, 10, root, 4), identity)

    node.receive(topics.roster(foreign_round), roster(foreign_round, b"x" * 32), 0.0)
    node.receive(topics.ANNOUNCE, codec.encode(Announce(round_id, identity.public, params), identity), 1.0)
    assert node.state == SubjectState.REGISTERING
    assert node.equivocation_evidence() is None
    node.receive(topics.roster(round_id), roster(round_id, b"y" * 32), 2.0)
    assert node.equivocation_evidence() is None
    node.receive(topics.roster(round_id), roster(round_id, b"z" * 32), 3.0)
    proof = node.equivocation_evidence()
    assert proof is not None
    checked = check_equivocation(EquivocationEvidence(*proof), round_id, identity.public)
    assert not checked.problem, checked.problem


@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_receipts_convict_a_collector_whose_victim_never_saw_the_second_root(
        withhold: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``split-roster-early`` with ``release_first``: the victim is done before the real roster is published, so
    nobody holds a proof alone; her receipt and another subject's state two roots, and the auditor combines them
    (``--evidence`` files of two subjects, no transcript)."""
    out = _simulate(tmp_path, "first", '[adversary.collector]\nstrategy = "split-roster-early"\n'
                    f"release_first = true\nwithhold = {'true' if withhold else 'false'}\n")
    evidence = json.loads((out / "evidence.json").read_text())
    assert not [e for e in evidence if "equivocation" in e]
    receipts = [e for e in evidence if "receipt" in e]
    assert len(receipts) == 2
    key = read_transcript(out / "transcript.json").collector_key.hex()
    files = []
    for number, receipt in enumerate(receipts):
        files += ["--evidence", str(tmp_path / f"subject-{number}.json")]
        (tmp_path / f"subject-{number}.json").write_text(json.dumps([receipt]))
    capsys.readouterr()
    assert main(["verify", *files[:2], "--collector-key", key]) == 0  # one receipt proves nothing
    assert main(["verify", *files, "--collector-key", key, "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "fail"
    # One receipt against the transcript's roster is enough too: hers fails the check, the other one's passes.
    statuses = []
    for evidence_file in files[1::2]:
        main(["verify", str(out / "transcript.json"), "--evidence", evidence_file, "--json"])
        checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
        statuses.append(checks["equivocation"]["status"])
    assert sorted(statuses) == ["fail", "pass"]


def test_her_kept_root_prefers_the_roster_to_an_assign_of_the_same_root_and_keeps_the_proof() -> None:
    """An assign often arrives before the roster: the roster of the same root then replaces it as her first root
    (a shared bulletin, not her own kB), and her receipt is the roster; an assign of another root after it is a
    proof made of the roster and that assign."""
    identity = crypto.SigningKey(bytes(range(32)))
    params = round_params()
    round_id = b"r" * 16
    node = SubjectNode(collector_key=identity.public, qi=(1.0, 2.0), confidential=(3.0,), rng=SeededRandom(4))
    node.receive(topics.ANNOUNCE, codec.encode(Announce(round_id, identity.public, params), identity), 1.0)

    def assign(root: bytes) -> bytes:
        return codec.encode(Assign(round_id, identity.public, node.public_key, 0, (), root, 0, (node.public_key,),
                                   (1.0, 2.0), ()), identity)

    roster = codec.encode(Roster(round_id, identity.public, 10, b"y" * 32, 4), identity)
    inbox = topics.inbox(round_id, node.public_key)
    node.receive(inbox, assign(b"y" * 32), 2.0)
    assert node.roster_receipt() is None and node.equivocation_evidence() is None
    node.receive(topics.roster(round_id), roster, 3.0)
    receipt = node.roster_receipt()
    assert receipt is not None and receipt[1] == roster
    node.receive(inbox, assign(b"z" * 32), 4.0)
    proof = node.equivocation_evidence()
    assert proof is not None and proof[1] == roster and proof[2] == assign(b"z" * 32)
    assert not check_equivocation(EquivocationEvidence(*proof), round_id, identity.public).problem
