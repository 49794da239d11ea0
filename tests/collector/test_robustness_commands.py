"""`coutil collector export|status|rounds|serve` against hostile inputs: an output onto the database's own
files, stored strings that look like rich markup, a directory given as a file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.collector.storage import CollectorStore
from coutil.errors import InputError
from coutil.protocol import codec, crypto
from coutil.protocol.messages import Verdict

ROUND = bytes(range(16))
#: Strings rich would read as markup: "[/]" closes a tag never opened (MarkupError, exit 1 before the fix),
#: the others would be styled or linked instead of shown.
HOSTILE = ("[/]", "[link=file:///etc/passwd]click[/link]", "[bold red]x")


def _key(i: int) -> bytes:
    return hashlib.sha256(b"subject-%d" % i).digest()


def _db(tmp_path: Path, *, phase: str = "done") -> Path:
    db = tmp_path / "c.sqlite"
    with CollectorStore(db) as store:
        store.create_round(ROUND, {"k": 3, "qi": ["a"], "confidential": ["b"]}, collector_key=b"\x07" * 32,
                           now=100.0, announce=b"announce")
        store.record_registrations(ROUND, [(_key(i), b"r", b"d") for i in range(4)], 101.0)
        store.record_release(ROUND, b"release", "a,b\n1,2\n", 120.0)
        store.set_phase(ROUND, phase, 130.0)
    (tmp_path / "c.sqlite.secret").write_bytes(b"\x05" * 32)
    return db


# ------------------------------------------------------------------ C: outputs onto the database's own files

@pytest.mark.parametrize("suffix", [".secret", ".lock", "-wal", "-shm"])
@pytest.mark.parametrize("option", ["--verdicts", "--manifest", "--transcript", "-o"])
def test_export_refuses_to_write_over_the_files_beside_the_database_even_with_force(
        tmp_path: Path, suffix: str, option: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = _db(tmp_path)
    target = tmp_path / f"c.sqlite{suffix}"
    if not target.exists():
        target.write_bytes(b"live")  # a running service's -wal/-shm files
    before = target.read_bytes()
    for force in ([], ["--force"]):
        assert main(["collector", "export", "--db", str(db), option, str(target), *force]) == 2
        err = capsys.readouterr().err.strip()
        named = "--output" if option == "-o" else option
        assert err.count("\n") == 0 and f"{named} {target} is the" in err and "--force" not in err, err
        assert target.read_bytes() == before


def test_export_refuses_the_secret_named_through_another_path(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    db = _db(tmp_path)
    link = tmp_path / "innocent.json"
    link.symlink_to(tmp_path / "c.sqlite.secret")
    assert main(["collector", "export", "--db", str(db), "--verdicts", str(link)]) == 2
    assert "collector's secret file" in capsys.readouterr().err
    assert (tmp_path / "c.sqlite.secret").read_bytes() == b"\x05" * 32


def test_export_still_writes_beside_the_database(tmp_path: Path) -> None:
    db = _db(tmp_path)
    assert main(["collector", "export", "--db", str(db), "--verdicts", str(tmp_path / "c.sqlite.verdicts.json"),
                 "-o", str(tmp_path / "release.csv")]) == 0
    assert (tmp_path / "release.csv").read_text() == "a,b\n1,2\n"


# ------------------------------------------------------------------------- D: stored strings are not markup

def _hostile_db(tmp_path: Path) -> Path:
    db = _db(tmp_path, phase=HOSTILE[0])
    with CollectorStore(db) as store:
        for i, reason in enumerate(HOSTILE):
            store.record_exclusion(ROUND, _key(i), reason)
        store.add_rejections(ROUND, {reason: 1 for reason in HOSTILE})
        # A complaint whose reason is markup, signed by a subject (a collector of an older coutil stored any
        # reason; this one's codec may refuse it, then it counts as "undecodable", also fine here).
        subject = crypto.SigningKey.from_seed(os.urandom(32))
        payload = codec.encode(Verdict(ROUND, subject.public, False, HOSTILE[0], b"\0" * 32, b"\0" * 32), subject)
        store.record_verdict(ROUND, subject.public, payload, codec.payload_digest_of(payload), accept=False, now=1.0)
    return db


def test_status_prints_stored_reasons_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _hostile_db(tmp_path)
    assert main(["collector", "status", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    for reason in HOSTILE:
        assert f"{reason} 1" in err  # exclusions and rejections, verbatim
    assert f"round {ROUND.hex()}: {HOSTILE[0]} " in err  # the phase


def test_rounds_prints_a_stored_phase_as_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _hostile_db(tmp_path)
    assert main(["collector", "rounds", "--db", str(db)]) == 0
    assert HOSTILE[0] in capsys.readouterr().err


def test_status_shows_a_control_character_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An escape sequence in a stored reason would drive the operator's terminal: shown as \\x1b."""
    db = _db(tmp_path)
    with CollectorStore(db) as store:
        store.add_rejections(ROUND, {"\x1b]0;owned\x07": 1})
    assert main(["collector", "status", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\\x1b]0;owned\\x07 1" in err


# --------------------------------------------------------------------------- H: a directory given as a file

@pytest.mark.parametrize("command", [["collector", "serve", "--db", "{tmp}/c.sqlite", "--k", "3"],
                                     ["subject", "join", "--data", "{tmp}/x.csv"]])
def test_a_ca_file_that_is_a_directory_is_called_one(tmp_path: Path, command: list[str],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([*argv, "--broker", "mqtts://127.0.0.1:1", "--ca-file", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--ca-file {tmp_path}: is a directory" in err and "does not exist" not in err


# ------------------------------------------------------------------ I: two services on one database

_HOLD = """
import sys, time
from pathlib import Path
from coutil.collector.service import serving_lock
with serving_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_service_on_a_database_already_served_is_refused_before_it_writes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker (not run then): two `coutil collector serve` on one database each resumed its open
    round from the same secret and could sign it two rosters (a collector equivocating, to its subjects). The
    second is refused with exit 2 and one line naming the first's pid, before it creates the secret or a round
    (and before it connects: the broker here does not exist); once the first ends, the database serves again."""
    import subprocess
    import sys

    db = tmp_path / "c.sqlite"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        code = main(["collector", "serve", "--db", str(db), "--k", "3", "--broker", "mqtt://127.0.0.1:1"])
        err = capsys.readouterr().err.strip()
        assert code == 2, err
        assert err.count("\n") == 0 and f"already served by another `coutil collector serve` (pid {holder.pid})" in err
        assert not (tmp_path / "c.sqlite.secret").exists()
        with CollectorStore(db) as store:
            assert store.rounds() == []
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the killed holder's lock: no stale lock file to remove by hand.
    from coutil.collector.service import serving_lock

    with serving_lock(db), pytest.raises(InputError, match=f"pid {os.getpid()}"), serving_lock(db):
        pass


# ------------------------------------------------------------------ the reading commands write nothing

def test_the_reading_commands_leave_the_database_as_it_was(tmp_path: Path) -> None:
    """`collector export`, `rounds` and `status` open the database read-only (found by a user fuzzing the auditor:
    `collector export` on an empty file wrote a whole schema into it, 90 kB): a collector database is not changed
    by a byte, and an empty or foreign file is refused (exit 2) and stays as it was."""
    db = _db(tmp_path)
    before = db.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    assert main(["collector", "export", "--db", str(db), "-o", str(out / "r.csv"), "--verdicts",
                 str(out / "v.json"), "--transcript", str(out / "t.json")]) == 0
    assert main(["collector", "rounds", "--db", str(db)]) == 0
    assert main(["collector", "status", "--db", str(db)]) == 0
    assert db.read_bytes() == before
    for content in (b"", b"SQLite format 3\x00" + bytes(84)):
        other = tmp_path / f"other-{len(content)}.sqlite"
        other.write_bytes(content)
        for command in (["export", "--verdicts", str(out / "w.json")], ["rounds"], ["status"]):
            assert main(["collector", command[0], "--db", str(other), *command[1:]]) == 2, (content, command)
        assert other.read_bytes() == content
        assert not (tmp_path / f"{other.name}-wal").exists()


# ------------------------------------------------- J: a subject's own inputs are checked before any network

@pytest.mark.parametrize(("command", "expected"), [
    (["subject", "join", "--data", "{tmp}/missing.csv"], "missing.csv: no such file"),
    (["subject", "join", "--data", "{tmp}/me.csv", "--row", "3"], "bad --row 3: "),
    (["subject", "join", "--data", "{tmp}/me.csv", "--min-k", "0"], "bad --min-k 0"),
    (["subject", "join", "--data", "{tmp}/ragged.csv"], "ragged row"),
    (["subject", "swarm", "--data", "{tmp}/missing.csv"], "missing.csv: no such file"),
])
def test_a_subjects_bad_input_is_an_input_error_before_she_waits_for_a_round(
        tmp_path: Path, command: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Checked only once a round was announced, a mistyped file or row waited up to --timeout (600 s) and then
    said "no round announced" (exit 6), or, with no broker, "cannot reach the broker" (exit 6): here no broker
    listens, and the input error comes first."""
    (tmp_path / "me.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "ragged.csv").write_text("a,b\n1,2\n3\n")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([*argv, "--broker", "mqtt://127.0.0.1:1", "--timeout", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err
