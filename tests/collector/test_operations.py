"""`coutil collector rounds|status|export`: what an operator sees of a collector's database, with --json,
and never a confidential value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.adversary.subjects import Tamper
from coutil.cli import main
from coutil.protocol import codec
from coutil.sdc.dataset import format_number
from tests.collector.test_crash_recovery import N, World, _world


@pytest.fixture(scope="module")
def finished_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[float, ...]]]:
    """A database holding one completed round of N subjects (the in-memory bus, the real service code)."""
    tmp = tmp_path_factory.mktemp("ops")
    world = _world(tmp)
    world.bus.run_until(until=300.0, predicate=lambda: world.service.finished)
    assert world.service.node.outcome().completed
    world.service.store.close()
    confidential = [s.audit is not None for s in world.subjects]
    assert all(confidential)
    values = [tuple(float(v) for v in row) for row in world.service.node.outcome().rows[:, 2:].tolist()]
    return world.db, values


def test_rounds_lists_the_round_with_its_counts(finished_db: tuple[Path, list[tuple[float, ...]]],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = finished_db
    assert main(["collector", "rounds", "--db", str(db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rounds"]
    assert len(rows) == 1
    (row,) = rows
    assert row["phase"] == "done" and row["registered"] == N and row["released_rows"] == N
    assert row["accepted"] == row["verdicts"] == N and row["complaints"] == 0 and row["k"] == 3
    assert main(["collector", "rounds", "--db", str(db)]) == 0
    assert row["round"][:16] in capsys.readouterr().err


def test_status_gives_phases_and_reasons(finished_db: tuple[Path, list[tuple[float, ...]]],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = finished_db
    assert main(["collector", "status", "--db", str(db), "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [p["phase"] for p in status["phases"]][:3] == ["registration", "sharing", "auditing"]
    assert status["groups"] == N // 3 and status["complaints_by_reason"] == {}
    assert status["roster_root"] and len(status["collector_key"]) == 64
    assert main(["collector", "status", "--db", str(db), "--round", status["round"][:6]]) == 0
    assert "verdicts 12: 12 accept, 0 complain" in capsys.readouterr().err
    assert main(["collector", "status", "--db", str(db), "--round", "zz"]) == 2
    assert main(["collector", "status", "--db", str(db), "--round", "0123"]) == 2
    assert main(["collector", "status", "--db", str(db.with_name("missing.sqlite"))]) == 2


def test_export_writes_release_verdicts_manifest_and_a_transcript_without_confidential_values(
        finished_db: tuple[Path, list[tuple[float, ...]]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    db, released = finished_db
    files = {name: tmp_path / name for name in ("release.csv", "verdicts.json", "manifest.json", "transcript.json")}
    assert main(["collector", "export", "--db", str(db), "-o", str(files["release.csv"]), "--verdicts",
                 str(files["verdicts.json"]), "--manifest", str(files["manifest.json"]), "--transcript",
                 str(files["transcript.json"]), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["rows"] == N and info["transcript"]["verdicts"] == N and info["transcript"]["registrations"] == 0
    # Signed with the service's identity, its secret beside the database (SPEC §8.5): an auditor checks it.
    assert info["transcript"]["signed"] is True
    assert main(["verify", str(files["transcript.json"])]) == 0
    capsys.readouterr()
    verdicts = json.loads(files["verdicts.json"].read_text())
    assert verdicts["accepted"] == N and len(verdicts["subjects"]) == N
    assert json.loads(files["manifest.json"].read_text())["parameters"]["k"] == 3
    transcript = json.loads(files["transcript.json"].read_text())
    # Every payload is the exact signed bytes: it decodes and verifies.
    for payload in [transcript["announce"], transcript["roster"], transcript["release"], *transcript["verdicts"],
                    *transcript["assignments"]]:
        codec.decode(bytes.fromhex(payload), codec.Limits())
    # No confidential value outside the release itself (the transcript's release payload is binary).
    for name in ("verdicts.json", "manifest.json"):
        text = files[name].read_text()
        for row in released:
            for value in row:
                assert format_number(value) not in text, name
    assert main(["collector", "export", "--db", str(db)]) == 2  # nothing asked for
    assert "nothing to export" in capsys.readouterr().err


def test_transcript_with_registrations_only_on_request(finished_db: tuple[Path, list[tuple[float, ...]]],
                                                       tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db, _ = finished_db
    path = tmp_path / "t.json"
    assert main(["collector", "export", "--db", str(db), "--transcript", str(path), "--with-registrations"]) == 0
    document = json.loads(path.read_text())
    assert document["registrations_included"] is True and len(document["registrations"]) == N


def _finish_and_export(world: World, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """Run the round to its end, close the store as a stopped service does, export the transcript and read it."""
    world.bus.run_until(until=600.0, predicate=lambda: world.service.finished)
    assert world.service.node.outcome().completed
    world.service.store.close()
    path = tmp_path / "transcript.json"
    assert main(["collector", "export", "--db", str(world.db), "--transcript", str(path)]) == 0
    return path, json.loads(path.read_text())


def test_the_service_keeps_its_exclusion_statements_and_the_auditor_checks_them(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The service stores every signed shuffle_start it publishes, so the transcript it exports lets an
    auditor check each exclusion against its statement (found by an attacker: the store kept none, and
    `exclusion_evidence` never ran on a deployed round, so a live member claimed `silent` passed)."""
    world = _world(tmp_path)
    world.bus.run_until(until=300.0, predicate=lambda: world.service.node.state == "sharing")
    gone = world.subjects[0]
    world.bus.vanish(gone.sid, world.bus.now)  # silent from the start of the sharing
    path, document = _finish_and_export(world, tmp_path)
    assert document["shuffle_starts_included"] is True and len(document["shuffle_starts"]) >= N // 3 + 1
    assert document["exclusions"] == {gone.sid: "silent"}
    capsys.readouterr()
    assert main(["verify", str(path), "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["exclusion_evidence"]["status"] == "pass"


def test_the_service_keeps_the_evidence_of_its_blames_and_the_auditor_replays_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A member who tampers with her batch is excluded `blamed_tamper`; the service stores the signed messages
    of the run that proved it (its ``run_evidence`` table), the transcript it exports carries them (version 3),
    and the auditor's replay finds the same culprit (`blame_evidence`). Without them verify fails: the signed
    announce commits to them (SPEC §8.5; before that commitment the blame was only skipped, the collector's word)."""
    world = _world(tmp_path, strategies={0: Tamper})
    path, document = _finish_and_export(world, tmp_path)
    tamperer = world.subjects[0].sid
    assert document["exclusions"] == {tamperer: "blamed_tamper"}
    assert document["transcript_version"] == 4 and document["run_evidence_included"] is True
    assert len(document["run_evidence"]) == 1 and document["run_evidence"][0]["envelopes"]
    capsys.readouterr()
    assert main(["verify", str(path), "--json"]) == 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["blame_evidence"]["status"] == "pass", checks["blame_evidence"]
    assert "1 `blamed_*` exclusion(s), each proven" in checks["blame_evidence"]["notes"][0]
    document["run_evidence"], document["run_evidence_included"] = [], False
    path.write_text(json.dumps(document))
    assert main(["verify", str(path), "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["blame_evidence"]["status"] == "fail" and "withheld" in checks["blame_evidence"]["problems"][0]


def test_an_export_without_the_collectors_secret_is_unsigned_said_so_and_fails_the_audit(
        finished_db: tuple[Path, list[tuple[float, ...]]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The transcript is signed with the service's identity, from its secret beside the database. A copy of the
    database without it (a backup, another machine) still exports, unsigned, with a warning and ``"signed":
    false``: the round's announce commits to a signed transcript, so `coutil verify` fails it (SPEC §8.5)."""
    import shutil

    db, _ = finished_db
    copy = tmp_path / "copy.sqlite"
    shutil.copy(db, copy)
    path = tmp_path / "transcript.json"
    assert main(["collector", "export", "--db", str(copy), "--transcript", str(path), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["transcript"]["signed"] is False
    assert "unsigned" in captured.err
    assert main(["verify", str(path), "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["transcript_signature"]["status"] == "fail"
