"""`coutil verify` (the auditor, SPEC §2 and §12) on honest rounds and on collector deviations.

Each deviation is a small `CollectorNode` subclass in an otherwise honest in-memory round, as in
tests/protocol/test_v2_defences.py; the round driver's `TranscriptRecorder` writes what the deviant
collector really published and accepted, and the test then asks `coutil verify` about the run
directory. Deviations the transcript cannot show are tested too, and said so.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from coutil.cli import main
from coutil.net.memory import BusFaults, MemoryBus, Partition
from coutil.protocol import codec, crypto, merkle, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.collector_groups import GroupMessage
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import Assign, Release, Roster
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.round.report import RoundReport, write_outputs
from coutil.round.simulation import synthetic_dataset
from coutil.round.transcript import (
    TranscriptRecorder,
    read_transcript,
    signed_transcript,
    transcript_from_document,
    transcript_statement,
    write_transcript,
)
from coutil.round.verify import CHECKS

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)


@dataclasses.dataclass
class Run:
    directory: Path
    collector: CollectorNode
    subjects: list[SubjectNode]


def run_round(tmp_path: Path, collector_class: type[CollectorNode] = CollectorNode, *, n: int = 21, seed: int = 3,
              registrations: bool = True, sybils: int = 0, vanish: dict[int, float] | None = None,
              config: RoundConfig = CONFIG, cut_off: tuple[tuple[int, float, float], ...] = ()) -> Run:
    """One in-memory round with ``collector_class``; its run directory (release.csv, manifest.json,
    transcript.json, ...) written by the round layer's own `write_outputs`. ``sybils``: that many more
    subjects (fabricate-members: identities the collector controls) register, then fall silent;
    ``vanish``: subject index -> the time she vanishes (honest dropouts); ``config``: the round's;
    ``cut_off``: (subject index, from, until): her link partitioned for that while, then back."""
    vanish = vanish or {}
    data = synthetic_dataset(n + sybils, config, seed)
    qi = data.select(list(config.qi)).values
    conf = data.select(list(config.confidential)).values
    root = SeededRandom(seed)
    rng = root.fork("collector")
    collector = collector_class(config, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                                round_id=root.fork("round").bytes(16))
    recorder = TranscriptRecorder(collector)
    caches = SharedCaches()
    subjects = [SubjectNode(collector_key=collector.public_key, qi=qi[i], confidential=conf[i],
                            rng=root.fork(f"subject-{i}"), caches=caches, retry_interval=1.0)
                for i in range(n + sybils)]
    partitions = tuple(Partition(frozenset({subjects[i].sid}), start, end) for i, start, end in cut_off)
    bus = MemoryBus(seed=seed, faults=BusFaults(partitions=partitions))
    bus.add_node("collector", recorder)
    for subject in subjects:
        bus.add_node(subject.sid, subject)
    for sybil in subjects[n:]:
        bus.vanish(sybil.sid, config.register_window / 2)  # registered; never heard of again
    for index, when in vanish.items():
        bus.vanish(subjects[index].sid, when)
    bus.run_until(until=3000.0, predicate=lambda: collector.finished and all(
        s.finished for i, s in enumerate(subjects[:n]) if i not in vanish))
    report = RoundReport(outcome=collector.outcome(), subjects=n + sybils, stop_reason="finished", virtual_time=bus.now,
                         wall_times={}, traffic={}, rejections={}, events=0, dropped={}, vanished=[],
                         subject_states={})
    directory = tmp_path / "run"
    transcript = recorder.transcript(include_registrations=registrations)
    assert transcript is not None
    write_outputs(report, [], directory, transcript, evidence=[s.verdict_evidence() for s in subjects])
    return Run(directory, collector, subjects)


def resigned(document: dict[str, Any], collector: CollectorNode) -> dict[str, Any]:
    """A transcript document the collector altered, signed by it again, as a collector forging its own transcript
    would (SPEC §8.5: its signature makes the copy its statement, it does not make the content true)."""
    statement = transcript_statement(transcript_from_document({**document, "collector_signature": None}))
    return {**document, "collector_signature": collector.sign_transcript(statement).hex()}


def verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    """`coutil verify PATH --json`: (exit code, its JSON object, its stderr)."""
    code = main(["verify", str(path), "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def failed(result: dict[str, Any]) -> dict[str, list[str]]:
    return {c["check"]: c["problems"] for c in result["checks"] if c["status"] == "fail"}


# ------------------------------------------------------------------------------------------------ honest
def test_an_honest_round_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path)
    assert run.collector.outcome().completed
    code, result, _ = verify(run.directory, capsys)
    assert code == 0 and result["ok"] is True and result["first_problem"] is None
    statuses = {c["check"]: c["status"] for c in result["checks"]}
    assert list(statuses) == [name for name, _ in CHECKS]
    assert set(statuses.values()) == {"pass"}, statuses  # registrations in: the grouping is recomputed too
    assert all(c["catches"] for c in result["checks"])
    # The transcript alone verifies too (no release.csv to compare: that check is skipped, not failed).
    code, result, _ = verify(run.directory / "transcript.json", capsys)
    assert code == 0 and {c["check"]: c["status"] for c in result["checks"]}["release_files"] == "skip"
    # Human output: one line per check.
    assert main(["verify", str(run.directory)]) == 0
    err = capsys.readouterr().err
    assert all(f"pass {name}:" in err for name, _ in CHECKS)


def test_without_registrations_the_grouping_is_skipped_and_the_rest_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, registrations=False, seed=4)
    code, result, _ = verify(run.directory, capsys)
    statuses = {c["check"]: c["status"] for c in result["checks"]}
    assert code == 0 and statuses["grouping"] == "skip" and statuses["inclusion"] == "pass"
    assert "registrations" not in json.dumps(read_transcript(run.directory / "transcript.json").registrations)


def test_simulate_writes_a_transcript_that_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    assert main(["simulate", "--subjects", "15", "--set", "k=3", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    document = json.loads((out / "transcript.json").read_text())
    assert document["registrations_included"] is False and document["registrations"] == []
    assert document["shuffle_starts_included"] is True
    code, result, _ = verify(out, capsys)
    assert code == 0, result["first_problem"]


# ---------------------------------------------------------------------------------- collector deviations
class PublishBelowK(CollectorNode):
    """publish-below-k: drops one record of the smallest group and publishes it anyway (k - 1 records)."""

    def _publish_release(self, now: float) -> list[Outgoing]:
        self._take_openings(now)  # the records opened so far (the release takes them, here taken first)
        label = min(self._records, key=lambda g: len(self._records[g]))
        self._records[label] = self._records[label][:CONFIG.k - 1]
        real = self.config
        self.config = dataclasses.replace(real, k=1)  # past the honest collector's own "never below k"
        try:
            return super()._publish_release(now)
        finally:
            self.config = real


def test_publish_below_k_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, PublishBelowK)
    code, result, err = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and "publish-below-k" in " ".join(problems["release"])
    assert "release" in result["first_problem"] and "below k" in err
    assert "not_k_anonymous" in result["complaints_by_reason"]  # the subjects saw it too
    assert "membership" in problems  # a live member's record is missing


class SplitRelease(CollectorNode):
    """split-view-release: shows the members of group 0 a release with the groups in reverse order (a
    well-formed release of the same roster, another digest), and everyone else the real one (a second
    later, on the retained topic)."""

    def _publish_release(self, now: float) -> list[Outgoing]:
        [real] = super()._publish_release(now)
        release = codec.decode(real.payload).message
        assert isinstance(release, Release)
        width = 8 * len(release.columns)
        blocks, start = [], 0
        for size in release.group_sizes:
            blocks.append(release.rows[start * width:(start + size) * width])
            start += size
        rows = b"".join(reversed(blocks))
        other = dataclasses.replace(release, group_ids=release.group_ids[::-1], group_sizes=release.group_sizes[::-1],
                                    rows=rows, rows_root=merkle.rows_root(rows, len(release.columns)))
        victims = self._groups[0].members
        self._resend.arm("late-release", real, now)  # the real release leaves a retry interval later
        return [Outgoing(topics.inbox(self.round_id, key), self._sign(other)) for key in victims]


def test_split_view_release_is_caught_by_the_verdicts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, SplitRelease)
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and set(problems) == {"verdicts"}, problems
    victims = {topics.sid_of(key) for key in run.collector._groups[0].members}
    assert len(problems["verdicts"]) == len(victims)
    assert all("split-view-release" in p and p.split("'")[0] in victims for p in problems["verdicts"])


class SplitRoster(CollectorNode):
    """split-view-roster: shows group 0 another roster (the tree with a non-member's QIs altered, so its
    members' own proofs still verify) and keeps its run consistent with that view; everyone else gets
    the real roster a retry interval later."""

    fake: merkle.MerkleTree | None = None

    def _close_registration(self, now: float) -> list[Outgoing]:
        out = super()._close_registration(now)
        assert self._tree is not None
        victims = set(self._groups[0].members)
        outsider = next(key for key in self._order if key not in victims)
        # The outsider's entry altered (as if her QIs were others): another root, proofs to match.
        leaves = [merkle.roster_leaf(key, self._registrations[key].commitment if key != outsider
                                     else hashlib.sha256(self._registrations[key].commitment).digest())
                  for key in self._order]
        self.fake = merkle.MerkleTree(leaves)
        roster_topic = topics.roster(self.round_id)
        real_roster = next(o for o in out if o.topic == roster_topic)
        fake_roster = dataclasses.replace(codec.decode(real_roster.payload).message, merkle_root=self.fake.root)
        shown: list[Outgoing] = [Outgoing(topics.inbox(self.round_id, key), self._sign(fake_roster))
                                 for key in sorted(victims)]
        for o in out:
            if o.topic == roster_topic:
                continue
            message = codec.decode(o.payload).message
            if isinstance(message, Assign) and message.subject in victims:
                index = self._index_of(message.subject)
                fake_assign = dataclasses.replace(message, merkle_root=self.fake.root, proof=self.fake.proof(index),
                                                  fellows=self._fellows(message.subject, message.members, self.fake))
                fake_out = Outgoing(o.topic, self._sign(fake_assign))
                self._assign_msgs[message.subject] = fake_out
                self._resend.arm(("assign", message.subject), fake_out, now)
                shown.append(fake_out)
            else:
                shown.append(o)
        self._resend.arm("late-roster", real_roster, now)
        return shown

    def _on_group_message(self, message: GroupMessage, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if self.fake is not None and message.sender in self._groups[0].members:
            real, self._tree = self._tree, self.fake  # judge the victims' views against what they were shown
            try:
                return super()._on_group_message(message, decoded, now)
            finally:
                self._tree = real
        return super()._on_group_message(message, decoded, now)


def test_split_view_roster_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, SplitRoster)
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3
    assert any("split view of the roster" in p for p in problems["roster"])
    assert any("split-view-roster" in p for p in problems["verdicts"])
    assert result["complaints_by_reason"].get("roster_mismatch")  # the victims complained
    # A collector that doctors its transcript (the real roster's assigns re-signed for the victims) is
    # still caught: the victims' verdicts bind the root they were shown.
    transcript = read_transcript(run.directory / "transcript.json")
    collector = run.collector
    assert collector._tree is not None
    honest = []
    for payload in transcript.assignments:
        a = codec.decode(payload).message
        assert isinstance(a, Assign)
        honest.append(collector._sign(dataclasses.replace(a, merkle_root=collector._tree.root,
                                                          proof=collector._tree.proof(a.leaf_index),
                                                          fellows=collector._fellows(a.subject, a.members))))
    write_transcript(run.directory / "transcript.json", dataclasses.replace(transcript, assignments=tuple(honest)))
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and "roster" not in problems and "inclusion" not in problems
    assert any("split-view-roster" in p for p in problems["verdicts"])


class DropAtOnce(CollectorNode):
    """drop-subject: starts run 0 of the largest group without its last member, claiming her silent."""

    victim: bytes | None = None

    def _start_run(self, group: Any, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self.victim is None and group.run == -1 and len(group.members) > CONFIG.k:
            self.victim = group.members[-1]
            self._excluded[self.victim] = "silent"
            group.set_members(group.members[:-1], self._index_of)
            excluded = ((self.victim, "silent"),)
        return super()._start_run(group, excluded, now)


def test_drop_subject_without_a_step_deadline_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, DropAtOnce, n=22)
    collector = run.collector
    assert isinstance(collector, DropAtOnce) and collector.victim is not None
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and set(problems) == {"exclusion_evidence"}, problems
    [problem] = problems["exclusion_evidence"]
    assert topics.sid_of(collector.victim) in problem and "drop-subject" in problem


class DropPatiently(CollectorNode):
    """drop-subject, patiently: ignores everything one live member of the largest group sends, so that
    she is excluded `silent` at the step deadline like a member who really went silent."""

    victim: bytes | None = None

    def _on_group_message(self, message: GroupMessage, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if self.victim is None:
            largest = max(self._groups.values(), key=lambda g: (len(g.members), -g.label))
            if len(largest.members) > CONFIG.k:
                self.victim = largest.members[-1]
        if message.sender == self.victim:
            return []
        return super()._on_group_message(message, decoded, now)


def test_a_patient_drop_subject_is_not_visible_in_the_transcript(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What the transcript cannot show: a collector that withholds a member's messages and excludes her at
    the deadline leaves the transcript of a member who went silent. Only her own signed messages (which
    she keeps) can prove otherwise. The exclusion is listed, signed, after the deadline."""
    run = run_round(tmp_path, DropPatiently, n=22)
    collector = run.collector
    assert isinstance(collector, DropPatiently) and collector.victim is not None
    assert read_transcript(run.directory / "transcript.json").exclusions == {topics.sid_of(collector.victim): "silent"}
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, result["first_problem"]
    membership = next(c for c in result["checks"] if c["check"] == "membership")
    assert "silent 1" in membership["notes"][0]


class FabricatedRows(CollectorNode):
    """fabricate-members in the release only: one more record in the largest group than it has members."""

    def _publish_release(self, now: float) -> list[Outgoing]:
        self._take_openings(now)  # the records opened so far (the release takes them, here taken first)
        label = max(self._records, key=lambda g: len(self._records[g]))
        self._records[label] = [*self._records[label], (12345.0,)]
        return super()._publish_release(now)


def test_fabricated_release_rows_are_caught_but_sybils_with_registrations_are_not(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path / "rows", FabricatedRows)
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and any("fabricated" in p for p in problems["membership"])
    # Sybils: signed registrations, assigns, exclusions as silent. Nothing in the transcript tells them from
    # subjects who vanished (SPEC §3: it takes admission control); what a verifier does see is listed.
    run = run_round(tmp_path / "sybils", sybils=CONFIG.k)
    sybils = [s.public_key for s in run.subjects[-CONFIG.k:]]
    transcript = read_transcript(run.directory / "transcript.json")
    assert {codec.decode(r).message.sender for r in transcript.registrations} >= set(sybils)
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, result["first_problem"]
    assert all(transcript.exclusions.get(topics.sid_of(key)) == "silent" for key in sybils)


# ---------------------------------------------------------------------------------------- tampered files
def test_a_flipped_byte_in_the_transcript_is_a_signature_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, seed=8)
    path = run.directory / "transcript.json"
    document = json.loads(path.read_text())
    verdict = bytearray(bytes.fromhex(document["verdicts"][3]))
    verdict[-1] ^= 0x01  # the last byte of the signature
    document["verdicts"][3] = verdict.hex()
    path.write_text(json.dumps(document))
    code, result, err = verify(run.directory, capsys)
    assert code == 3 and result["first_problem"].startswith("signatures: verdict 3: bad_signature")
    assert "bad_signature" in err
    # A byte of the announce's payload: nothing else can be checked without it.
    document["announce"] = document["announce"][:40] + ("0" if document["announce"][40] != "0" else "1") + \
        document["announce"][41:]
    path.write_text(json.dumps(document))
    code, result, _ = verify(path, capsys)
    assert code == 3 and result["first_problem"].startswith("signatures: announce")


def test_a_release_csv_that_is_not_the_signed_release_is_caught(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, seed=8)
    csv_path = run.directory / "release.csv"
    lines = csv_path.read_text().splitlines()
    cells = lines[5].split(",")
    cells[-1] = str(float(cells[-1]) + 1.0)
    lines[5] = ",".join(cells)
    csv_path.write_text("\n".join(lines) + "\n")
    code, result, _ = verify(run.directory, capsys)
    assert code == 3 and failed(result) == {"release_files": ["release.csv: row 6 differs from the signed release"]}


def test_an_unclosed_quote_in_release_csv_is_named_with_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """release.csv is read by coutil's strict CSV reader: an unclosed quote fails the check naming its line (a
    lenient reader swallowed the rest of the file into one cell and reported a ragged row instead)."""
    run = run_round(tmp_path, seed=8)
    csv_path = run.directory / "release.csv"
    lines = csv_path.read_text().splitlines()
    lines[5] = '"' + lines[5]
    csv_path.write_text("\n".join(lines) + "\n")
    code, result, _ = verify(run.directory, capsys)
    assert code == 3
    assert failed(result) == {"release_files": [
        "release.csv, line 6: unclosed quote: the quoted cell that starts here is never closed"]}
    assert main(["verify", str(run.directory)]) == 3
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("coutil: error:") and "release.csv, line 6: unclosed quote" in last


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert main(["verify", str(tmp_path)]) == 2  # a directory without a transcript
    (tmp_path / "t.json").write_text('{"transcript_version": 99}')
    assert main(["verify", str(tmp_path / "t.json")]) == 2
    (tmp_path / "t.json").write_text("not json")
    assert main(["verify", str(tmp_path / "t.json")]) == 2
    assert "not JSON" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- collector export
def test_collector_export_transcript_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coutil.collector.operations import export_transcript, find_round
    from coutil.collector.storage import CollectorStore
    from tests.collector.test_crash_recovery import _world

    world = _world(tmp_path)
    world.bus.run_until(until=300.0, predicate=lambda: world.service.finished)
    assert world.service.node.outcome().completed
    stored = find_round(CollectorStore(world.db), None)
    path = tmp_path / "transcript.json"
    counts = export_transcript(stored, path, include_registrations=True, sign=world.service.node.sign_transcript)
    assert counts["registrations"] == counts["assignments"] == counts["verdicts"] == 12
    code, result, _ = verify(path, capsys)
    statuses = {c["check"]: c["status"] for c in result["checks"]}
    assert code == 0, result["first_problem"]
    assert statuses["grouping"] == "pass" and statuses["release_files"] == "skip"
    # The command line's export writes the same format.
    assert main(["collector", "export", "--db", str(world.db), "--transcript", str(tmp_path / "t2.json")]) == 0
    capsys.readouterr()
    code, result, _ = verify(tmp_path / "t2.json", capsys)
    assert code == 0 and {c["check"]: c["status"] for c in result["checks"]}["grouping"] == "skip"


def test_a_roster_without_its_release_is_not_a_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, seed=4)
    transcript = read_transcript(run.directory / "transcript.json")
    path = tmp_path / "aborted.json"
    aborted = dataclasses.replace(transcript, release=None, verdicts=(), phase="aborted")
    write_transcript(path, signed_transcript(aborted, run.collector.sign_transcript))
    code, result, _ = verify(path, capsys)
    statuses = {c["check"]: c["status"] for c in result["checks"]}
    assert code == 0 and statuses["release"] == "skip" and statuses["verdicts"] == "skip"
    assert isinstance(codec.decode(transcript.roster or b"").message, Roster)
