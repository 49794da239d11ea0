"""The collector's database when the disk refuses a write or the file is damaged: one line and exit 2,
never a traceback (exit 1 is for bugs), and nothing acknowledged before is lost."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.collector.service import identity_from_secret, open_round
from coutil.collector.storage import CollectorStore
from coutil.errors import ExitCode, StorageError
from coutil.protocol.config import RoundConfig

ROUND = bytes(range(16))
REPO = Path(__file__).resolve().parents[2]


def _key(i: int) -> bytes:
    return hashlib.sha256(b"subject-%d" % i).digest()


def _stored_db(path: Path, registrations: int = 300) -> Path:
    """A database holding one round with ``registrations`` registrations (big enough to span pages)."""
    with CollectorStore(path) as store:
        store.create_round(ROUND, {"k": 3, "qi": ["a"], "confidential": ["b"]}, collector_key=b"\x07" * 32,
                           now=100.0, announce=b"announce")
        store.record_registrations(ROUND, [(_key(i), b"r" * 300, b"d" * 32) for i in range(registrations)], 101.0)
        store.record_exclusion(ROUND, _key(0), "no_reveal")
        store.record_release(ROUND, b"release", "a,b\n1,2\n", 120.0)
    assert not path.with_name(path.name + "-wal").exists()  # checkpointed: everything is in the file
    return path


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _edit(db: Path, sql: str) -> None:
    raw = sqlite3.connect(db)
    raw.execute("PRAGMA foreign_keys=OFF")
    raw.execute(sql)
    raw.commit()
    raw.close()


# ------------------------------------------------------------------------------------ A: a write refused

_WRITER = textwrap.dedent(
    """
    import hashlib, resource, sys
    from coutil.collector import CollectorStore
    from coutil.errors import CoutilError
    store = CollectorStore(sys.argv[1])
    store.create_round(bytes(range(16)), {"k": 3}, collector_key=b"\\x07" * 32, now=0.0)
    # The disk is "full" from here on: SQLite's writes past this size fail (EFBIG), as on a full disk.
    resource.setrlimit(resource.RLIMIT_FSIZE, (150_000, 150_000))
    try:
        for i in range(100_000):
            store.record_registration(bytes(range(16)), hashlib.sha256(b"s%d" % i).digest(), b"y" * 500, b"d",
                                      float(i))
            print("ack", i, flush=True)  # acknowledged only once committed, as the service does
    except CoutilError as exc:
        print(f"coutil: error: {exc}", file=sys.stderr)
        sys.exit(int(exc.exit_code))
    """
)


def test_a_write_the_disk_refuses_is_exit_2_saying_every_ack_before_it_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "c.sqlite"
    proc = subprocess.run([sys.executable, "-c", _WRITER, str(db)], check=False, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(REPO)})
    acked = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("ack ")]
    assert proc.returncode == ExitCode.USAGE == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert f"{db}: cannot write the collector database" in line
    assert "everything acknowledged before is in the database" in line
    assert acked  # the limit left room for some
    with CollectorStore(db) as store:
        stored = {r.subject_key for r in store.load_round(ROUND).registrations}
        assert store.integrity_ok()
    assert {hashlib.sha256(b"s%d" % i).digest() for i in acked} <= stored


def test_a_command_whose_first_write_is_refused_exits_2_in_one_line(tmp_path: Path) -> None:
    """`serve` opening a new database writes its schema: on a full disk that is the error, not a traceback (it fails
    before it connects to any broker: port 1, nothing listens). The reading commands write nothing (an empty file is
    no collector database to them)."""
    db = tmp_path / "empty.sqlite"
    db.write_bytes(b"")

    def no_room() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    for command, problem in ((["rounds"], "damaged collector database"),
                             (["serve", "--broker", "mqtt://127.0.0.1:1", "--k", "3"],
                              "cannot write the collector database")):
        proc = subprocess.run([sys.executable, "-m", "coutil", "collector", *command, "--db", str(db)],
                              check=False, capture_output=True, text=True, timeout=120, preexec_fn=no_room,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert proc.returncode == 2, proc.stderr
        assert problem in _one_line(proc.stderr), proc.stderr


def test_a_refused_write_rolls_back_and_leaves_the_store_usable(tmp_path: Path) -> None:
    """The transaction around a failed statement is rolled back whole; later writes work again."""
    with CollectorStore(_stored_db(tmp_path / "c.sqlite", registrations=3)) as store:
        store._db.execute("PRAGMA busy_timeout=0")
        other = sqlite3.connect(store.path, timeout=0, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock: SQLITE_BUSY
        try:
            with pytest.raises(StorageError, match="database is locked"):
                store.record_registration(ROUND, _key(99), b"r", b"d", 1.0)
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert store.record_registration(ROUND, _key(99), b"r", b"d", 1.0)
        assert len(store.load_round(ROUND).registrations) == 4


def test_status_beside_a_service_holding_the_write_lock_neither_waits_nor_fails(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Opening a complete database writes nothing: a reader never needs the lock the service holds while
    it commits (it took the lock to create the schema, and failed with "database is locked")."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    service = sqlite3.connect(db, isolation_level=None)
    service.execute("BEGIN IMMEDIATE")
    try:
        assert main(["collector", "status", "--db", str(db), "--json"]) == 0
    finally:
        service.execute("ROLLBACK")
        service.close()
    assert json.loads(capsys.readouterr().out)["registered"] == 3


# ----------------------------------------------------------------------------------- B: a damaged database

def _corrupt_table(db: Path, table: str) -> None:
    """Zero the b-tree page header of ``table``'s root page: SQLite then finds the file malformed."""
    raw = sqlite3.connect(db)
    root = raw.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    data = bytearray(db.read_bytes())
    offset = (root - 1) * page_size
    data[offset : offset + 12] = b"\x00" * 12
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("argv", [["status", "--json"], ["export", "--verdicts", "{tmp}/v.json"], ["rounds"]])
def test_damaged_pages_are_exit_2_naming_the_database(tmp_path: Path, argv: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_db(tmp_path / "c.sqlite")
    _corrupt_table(db, "registrations")
    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(["collector", args[0], "--db", str(db), *args[1:]]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(db) in line and "damaged collector database" in line


@pytest.mark.parametrize(("sql", "problem"), [
    ("UPDATE rounds SET params = 'not json'", "rounds.params is not JSON"),
    ("UPDATE rounds SET params = '[1,2]'", "rounds.params holds a JSON list, not an object"),
    ("UPDATE rounds SET params = '{\"k\": ' || printf('%.5000c', '9') || '}'", "rounds.params is not JSON"),
    ("UPDATE rounds SET created_at = 'abc'", "rounds.created_at holds a str, not a number"),
    ("UPDATE rounds SET collector_key = 'text'", "rounds.collector_key holds a str, not bytes"),
    ("UPDATE exclusions SET reason = x'00'", "exclusions.reason holds a bytes, not text"),
    ("UPDATE registrations SET payload = 5", "registrations.payload holds a int, not bytes"),
])
def test_stored_values_of_the_wrong_type_are_exit_2_naming_the_database(
        tmp_path: Path, sql: str, problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    _edit(db, sql)
    for command in (["status", "--json"], ["rounds", "--json"], ["export", "--manifest", str(tmp_path / "m.json")]):
        assert main(["collector", *command, "--db", str(db)]) == 2, command
        line = _one_line(capsys.readouterr().err)
        assert str(db) in line and problem in line, line


def _foreign_schema_2(path: Path) -> Path:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE rounds (round_id BLOB)")
    raw.execute("INSERT INTO rounds VALUES (x'00')")
    raw.execute("PRAGMA user_version=2")
    raw.commit()
    raw.close()
    return path


def test_a_foreign_table_of_the_same_schema_number_is_exit_2(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = _foreign_schema_2(tmp_path / "s.sqlite")
    assert main(["collector", "rounds", "--db", str(db)]) == 2
    assert "damaged collector database" in _one_line(capsys.readouterr().err)  # its other tables missing
    # serve refuses it before it connects to any broker (port 1: nothing listens).
    assert main(["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(db), "--k", "3"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(db) in line and "damaged collector database" in line


def test_a_secret_that_is_a_directory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    (tmp_path / "c.sqlite.secret").mkdir()
    assert main(["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(db), "--k", "3"]) == 2
    assert "c.sqlite.secret: is a directory" in _one_line(capsys.readouterr().err)


def test_a_resumable_round_whose_parameters_this_coutil_cannot_take_is_aborted_not_a_traceback(
        tmp_path: Path) -> None:
    """Stored parameters edited (or another version's): the round is aborted, every row kept, a new one opened."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    _edit(db, "UPDATE rounds SET phase = 'registration', params = '{\"k\": \"x\", \"register_window\": \"y\"}'")
    config = RoundConfig(qi=("a",), confidential=("b",), k=3, register_window=60.0)
    with CollectorStore(db) as store:
        opened = open_round(store, b"\x01" * 32, config, 101.0)
        assert opened.how.startswith(f"new after aborting {ROUND.hex()} (its stored parameters are not this")
        old = store.load_round(ROUND)
        assert old.phase == "aborted" and len(old.registrations) == 3 and old.release_csv == "a,b\n1,2\n"


def test_a_database_without_the_secret_of_its_rounds_is_refused_not_given_a_new_identity(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A database moved or restored without its secret got a new one, i.e. a new collector identity its
    subjects do not know (they pin the old key and would ignore the service), and its open round was aborted.
    Now exit 2 naming the key that signed its rounds, before anything is written; so is another collector's
    secret. The right secret serves it (here up to the broker, which does not exist: exit 6)."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    with CollectorStore(db) as store:
        before = store.rounds()
    serve = ["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(db), "--k", "3"]
    assert main(serve) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"collector key {'07' * 32}" in line and "c.sqlite.secret is missing" in line
    assert not (tmp_path / "c.sqlite.secret").exists()
    (tmp_path / "c.sqlite.secret").write_bytes(b"\x05" * 32)
    assert main(serve) == 2
    assert "not the secret of the collector key" in _one_line(capsys.readouterr().err)
    with CollectorStore(db) as store:
        assert store.rounds() == before
    own = tmp_path / "own.sqlite"
    with CollectorStore(own) as store:
        store.create_round(ROUND, {"k": 3}, collector_key=identity_from_secret(b"\x05" * 32).public, now=100.0,
                           announce=b"announce")
    (tmp_path / "own.sqlite.secret").write_bytes(b"\x05" * 32)
    assert main([*serve[:5], str(own), *serve[6:]]) == 6
    capsys.readouterr()


# ------------------------------------------------------------------------------- H: check before creating

def test_serve_on_a_directory_creates_no_secret_beside_it(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "dir.sqlite"
    db.mkdir()
    assert main(["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(db), "--k", "3"]) == 2
    assert "is a directory, not a collector database" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "dir.sqlite.secret").exists()


def test_serve_on_a_foreign_file_creates_no_secret_beside_it(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "notes.sqlite"
    db.write_text("not a database " * 100)
    assert main(["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(db), "--k", "3"]) == 2
    assert "not a coutil collector database" in _one_line(capsys.readouterr().err)
    assert not (tmp_path / "notes.sqlite.secret").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]


class FailingStatement:
    """A store's connection on which one SQL statement fails as SQLite reports it (``code``, e.g. SQLITE_FULL once
    the disk is full, SQLITE_READONLY for a file read-only to this user); everything else is the real connection's."""

    def __init__(self, db: sqlite3.Connection, statement: str, message: str, code: int) -> None:
        self._db = db
        self._failing = (statement, message, code)

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        statement, message, code = self._failing
        if sql == statement:
            exc = sqlite3.OperationalError(message)
            exc.sqlite_errorcode = code  # what sqlite3 sets on the errors SQLite returns
            raise exc
        return self._db.execute(sql, *args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def test_the_service_stops_on_a_full_disk_and_every_registration_it_acknowledged_is_stored(tmp_path: Path) -> None:
    from coutil.protocol import codec, topics
    from coutil.protocol.messages import RegisterAck
    from tests.collector.test_crash_recovery import BOUNDARIES, N, _world

    world = _world(tmp_path)
    store = world.service.store
    assert world.bus.run_until(until=60.0, predicate=lambda: BOUNDARIES["registration"](world)) == "predicate"
    store._db = FailingStatement(store._db, "COMMIT", "database or disk is full",  # type: ignore[assignment]
                                 sqlite3.SQLITE_FULL)
    with pytest.raises(StorageError, match="everything acknowledged before is in the database"):
        world.bus.run_until(until=300.0, predicate=lambda: world.service.finished)
    acked = set()
    for publication in world.bus.publications or ():
        if publication.sender == "collector" and topics.INBOX_MARK in publication.topic:
            message = codec.decode_own(publication.payload)
            if isinstance(message, RegisterAck):
                acked.add(message.subject)
    store._db = store._db._db  # type: ignore[attr-defined]
    store.close()
    with CollectorStore(world.db) as reopened:
        stored = {r.subject_key for r in reopened.load_round(world.service.round_id).registrations}
    assert acked and len(stored) < N and acked <= stored


# ------------------------------------------------------------------------------ C: reading, and nothing else

def _wal_files(db: Path) -> list[str]:
    return sorted(p.name for p in db.parent.iterdir() if p.name in (db.name + "-wal", db.name + "-shm"))


@pytest.mark.parametrize("argv", [["status", "--json"], ["rounds"]])
def test_a_read_only_command_leaves_no_wal_files_beside_the_database(
        tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A read-only connection to a WAL database makes its -wal and -shm and, read-only, cannot delete them when
    it closes: every `collector status` left two empty files beside a database no collector had open."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    assert main(["collector", *argv, "--db", str(db)]) == 0
    capsys.readouterr()
    assert _wal_files(db) == []


def test_a_read_beside_a_running_collector_leaves_its_wal_files_and_sees_its_commits(tmp_path: Path) -> None:
    """The WAL files of a collector that has the database open are its own: a reader uses them (it needs the -shm
    to see what is committed but not checkpointed) and leaves them."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    with CollectorStore(db) as service:
        service.record_registration(ROUND, _key(50), b"r", b"d", 130.0)
        assert _wal_files(db) == ["c.sqlite-shm", "c.sqlite-wal"]
        with CollectorStore(db, read_only=True) as reader:
            assert len(reader.load_round(ROUND).registrations) == 4
        assert _wal_files(db) == ["c.sqlite-shm", "c.sqlite-wal"]
        assert service.record_registration(ROUND, _key(51), b"r", b"d", 131.0)
    assert _wal_files(db) == []  # the service, the last to close, checkpoints and deletes them


class _RefusedConnection:
    """What SQLite answers a ``mode=ro`` reader of a WAL database without -shm in a directory it may not write."""

    def execute(self, *args: object) -> None:
        exc = sqlite3.OperationalError("attempt to write a readonly database")
        exc.sqlite_errorcode = sqlite3.SQLITE_READONLY_DIRECTORY  # type: ignore[attr-defined]
        exc.sqlite_errorname = "SQLITE_READONLY_DIRECTORY"  # type: ignore[attr-defined]
        raise exc

    def close(self) -> None:
        pass


def _directory_read_only(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The condition simulated (root ignores permissions): SQLite refuses the plain read-only open."""
    real = sqlite3.connect
    opened: list[str] = []

    def connect(database: str, *args: object, **kwargs: object) -> object:
        opened.append(str(database))
        if "mode=ro" in str(database) and "immutable=1" not in str(database):
            return _RefusedConnection()
        return real(database, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("coutil.collector.storage.sqlite3.connect", connect)
    access = os.access
    monkeypatch.setattr("coutil.collector.storage.os.access",
                        lambda path, mode, **kwargs: mode != os.W_OK and access(path, mode, **kwargs))
    return opened


def test_a_database_in_a_read_only_directory_is_read_by_the_read_only_commands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """They said "cannot write the collector database ... nothing was acknowledged" (found by a user): SQLite
    cannot make the -shm a WAL reader needs; with none there, no collector has the database open, and it is read
    immutable, as it is on disk."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    opened = _directory_read_only(monkeypatch)
    assert main(["collector", "status", "--db", str(db), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["registered"] == 3
    assert any("immutable=1" in uri for uri in opened) and _wal_files(db) == []


def test_a_wal_without_its_shm_in_a_read_only_directory_is_refused_saying_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Read immutable, the commits a crashed collector's -wal holds would be ignored: refused, saying what is wrong
    (not "cannot write")."""
    db = _stored_db(tmp_path / "c.sqlite", registrations=3)
    db.with_name(db.name + "-wal").write_bytes(b"")
    opened = _directory_read_only(monkeypatch)
    assert main(["collector", "status", "--db", str(db)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{db}: cannot read the collector database" in line and "-wal file but no -shm" in line, line
    assert "cannot write" not in line and not any("immutable=1" in uri for uri in opened)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes a read-only directory: simulated above")
def test_a_database_in_a_really_read_only_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    db = _stored_db(tmp_path / "d" / "c.sqlite", registrations=3)
    db.parent.chmod(0o555)
    try:
        with CollectorStore(db, read_only=True) as store:
            assert len(store.load_round(ROUND).registrations) == 3
        assert _wal_files(db) == []
    finally:
        db.parent.chmod(0o755)


def test_a_kill_while_the_first_secret_is_written_leaves_no_short_secret_behind(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker who can kill the collector: killed on its first start after creating ``DB.secret`` and
    before writing its 32 bytes (or a power loss before they reach the disk), the service left an empty secret,
    refused as corrupt at every start after (exit 2: a crash loop under `restart: on-failure`, until an operator
    deletes a file named a secret). The secret is now written beside it and linked into place whole."""
    db = tmp_path / "c.sqlite"
    script = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from coutil.collector import service
        from coutil.collector.storage import CollectorStore
        CollectorStore(Path({str(db)!r}))  # the schema is written first, as `collector serve` does
        os.fdopen = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)  # killed before the first byte
        service.create_secret(Path({str(db)!r}))
    """)
    killed = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr
    assert not db.with_name("c.sqlite.secret").exists()  # before: an empty file
    # Started again (no broker listens): past the secret and the database, to the network (exit 6), not exit 2.
    assert main(["collector", "serve", "--db", str(db), "--broker", "mqtt://127.0.0.1:1"]) == ExitCode.NETWORK
    assert "corrupt secret" not in capsys.readouterr().err
    assert len(db.with_name("c.sqlite.secret").read_bytes()) == 32
    assert db.with_name("c.sqlite.secret").stat().st_mode & 0o777 == 0o600
