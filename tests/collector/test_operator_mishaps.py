"""The collector service and its reading commands against an unlucky operator (found by an attacker/operator
session, each failing before its fix): a database directory this user may not search, a clock stepped back
between two rounds, a `collector export` or `status` reading while the service commits, a -shm left read-only, a
secret beside a database that lost its tables, a second service through a symbolic link, an export whose secret
cannot be read, and a database cut short."""

from __future__ import annotations

import errno
import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.collector.service import load_or_create_secret, open_round
from coutil.collector.storage import CollectorStore
from coutil.protocol.config import RoundConfig
from tests.collector.test_robustness_storage import FailingStatement

ROUND = bytes(range(16))
CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50, step_timeout=10.0,
                     retry_interval=1.0, register_window=30.0, audit_window=20.0, expected_subjects=12)


def _key(i: int) -> bytes:
    return hashlib.sha256(b"subject-%d" % i).digest()


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("{")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err
    return lines[0]


def _db(path: Path) -> Path:
    with CollectorStore(path) as store:
        store.create_round(ROUND, {"k": 3, "qi": ["a"], "confidential": ["b"]}, collector_key=b"\x07" * 32,
                           now=100.0, announce=b"announce")
        store.record_registrations(ROUND, [(_key(i), b"r", b"d") for i in range(4)], 101.0)
    return path


# ------------------------------------------------------------- a directory this user may not search

def _unsearchable(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """Every stat of a name in ``directory`` is refused, as for a user without its search (x) permission (root
    ignores the mode: simulated; the real thing, for a user who is not root, is the test after)."""
    real_stat = os.stat

    def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if isinstance(path, (str, os.PathLike)) and Path(os.fsdecode(path)).parent == directory:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fsdecode(path))
        return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stat)


_COMMANDS = [["serve", "--broker", "mqtt://127.0.0.1:1", "--k", "3"], ["status"], ["rounds"],
             ["export", "--transcript", "{out}"]]


@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: c[0])
def test_a_database_in_a_directory_this_user_may_not_search_is_exit_2_not_an_internal_error(
        tmp_path: Path, command: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before the fix: ``coutil: internal error: PermissionError: ... (please report it)``, exit 1, from `Path.exists`
    on the secret (serve) or the database (status, rounds, export), which raises for EACCES."""
    (tmp_path / "d").mkdir()
    db = _db(tmp_path / "d" / "c.sqlite")
    _unsearchable(monkeypatch, db.parent)
    argv = [arg.replace("{out}", str(tmp_path / "t.json")) for arg in command]
    code = main(["collector", argv[0], "--db", str(db), *argv[1:]])
    line = _one_line(capsys.readouterr().err)
    assert code == 2, line
    assert "Permission denied" in line and str(db.parent) in line, line


@pytest.mark.skipif(os.geteuid() == 0, reason="root searches any directory: simulated above")
@pytest.mark.parametrize("command", _COMMANDS, ids=lambda c: c[0])
def test_a_database_in_a_really_unsearchable_directory_is_exit_2(
        tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d").mkdir()
    db = _db(tmp_path / "d" / "c.sqlite")
    db.parent.chmod(0o000)
    try:
        argv = [arg.replace("{out}", str(tmp_path / "t.json")) for arg in command]
        code = main(["collector", argv[0], "--db", str(db), *argv[1:]])
    finally:
        db.parent.chmod(0o755)
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "Permission denied" in line, line


# ------------------------------------------------------------- the clock stepped back between rounds

def test_a_clock_stepped_back_still_aborts_the_unfinished_round_and_newest_means_last_started(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A machine that booted with its clock an hour ahead (a wrong RTC, a VM restored) and was corrected by NTP
    between two rounds. "The newest round" was the one created last *by the clock*: after the step back, a round
    started later sorted before the round started earlier, so a service crashed mid-round and restarted left that
    round unfinished for ever (never aborted: `open_round` looked only at the older, already aborted one) and
    `collector status` showed the old round as the newest. The newest is the one started last."""
    db = tmp_path / "c.sqlite"
    secret = load_or_create_secret(db)
    store = CollectorStore(db)
    first = open_round(store, secret, CONFIG, 5000.0).collector
    first.start(5000.0)
    store.set_phase(first.round_id, "sharing", 5010.0)  # the service is killed mid-sharing
    # Restarted after NTP stepped the clock back an hour.
    second = open_round(store, secret, CONFIG, 1400.0)
    assert second.how == f"new after aborting {first.round_id.hex()}"
    second.collector.start(1400.0)
    store.set_phase(second.collector.round_id, "sharing", 1410.0)  # killed mid-sharing again
    third = open_round(store, secret, CONFIG, 1500.0)
    assert third.how == f"new after aborting {second.collector.round_id.hex()}"
    third.collector.start(1500.0)
    assert store.load_round(second.collector.round_id).phase == "aborted"
    latest = store.latest_round()
    assert latest is not None and latest.round_id == third.collector.round_id
    assert [r.round_id for r in store.rounds()] == [first.round_id, second.collector.round_id,
                                                    third.collector.round_id]
    store.close()
    assert main(["collector", "status", "--db", str(db), "--json"]) == 0
    assert f'"round": "{third.collector.round_id.hex()}"' in capsys.readouterr().out


# ------------------------------------------------------------- a read beside the service's commits

class _CommitsDuring:
    """A read-only connection during whose read of the shuffle_starts the service commits an exclusion and the
    shuffle_start that states it (one transaction, as `PersistentCollector` does)."""

    def __init__(self, db: sqlite3.Connection, writer: CollectorStore) -> None:
        self._db = db
        self._writer = writer
        self.committed = False

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql.startswith("SELECT payload FROM shuffle_starts") and not self.committed:
            self.committed = True
            with self._writer.transaction():
                self._writer.record_exclusion(ROUND, _key(3), "silent")
                self._writer.record_shuffle_starts(ROUND, [(0, 1, b"statement excluding subject 3")])
        return self._db.execute(sql, *args)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self._db, name)


def test_a_round_read_beside_the_services_commits_is_one_snapshot(tmp_path: Path) -> None:
    """`load_round` (what `collector export --transcript` signs, and `status` shows) read its ten tables with ten
    statements in autocommit: a commit of the service between two of them gave a round that never existed, e.g.
    a shuffle_start excluding a member with no exclusion in the summary, which the export then signed as the
    collector's statement. One read transaction: the round as of one commit."""
    db = _db(tmp_path / "c.sqlite")
    with CollectorStore(db) as writer, CollectorStore(db, read_only=True) as reader:
        writer.record_shuffle_starts(ROUND, [(0, 0, b"first run")])
        proxy = _CommitsDuring(reader._db, writer)
        reader._db = proxy  # type: ignore[assignment]
        stored = reader.load_round(ROUND)
        assert proxy.committed
        assert (_key(3) in stored.exclusions) == (b"statement excluding subject 3" in stored.shuffle_starts), stored
        again = reader.load_round(ROUND)  # the next read sees the commit whole
        assert again.exclusions == {_key(3): "silent"} and len(again.shuffle_starts) == 2
        reader._db = proxy._db


# ------------------------------------------------------------- a -shm left read-only

def test_a_write_refused_by_a_read_only_shm_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by an operator: `collector serve` on a database file made read-only (chmod 444) fails, rightly; SQLite
    creates its -wal and -shm with the database's mode, so once the database is writable again every start still
    failed with the same "attempt to write a readonly database ... free space or fix the file system", naming
    only the database, which is now writable. The message names the files this user may not write."""
    from coutil.errors import StorageError

    db = _db(tmp_path / "c.sqlite")
    with CollectorStore(db) as store:
        shm = Path(f"{db}-shm")
        assert shm.exists()
        access = os.access
        monkeypatch.setattr("coutil.collector.storage.os.access",
                            lambda path, mode, **kw: not (Path(path) == shm and mode == os.W_OK) and access(path, mode))
        real = store._db
        store._db = FailingStatement(real, "BEGIN IMMEDIATE",  # type: ignore[assignment]
                                     "attempt to write a readonly database", sqlite3.SQLITE_READONLY)
        try:
            with pytest.raises(StorageError) as raised:
                store.record_registration(ROUND, _key(9), b"r", b"d", 1.0)
        finally:
            store._db = real
    message = str(raised.value)
    assert f"not writable by this user: {shm} " in message and str(db) + "," not in message, message


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes a read-only file: simulated above")
def test_a_really_read_only_shm_is_named(tmp_path: Path) -> None:
    from coutil.errors import StorageError

    db = _db(tmp_path / "c.sqlite")
    # A service killed (-9) with the database open: its -wal and -shm stay beside it.
    child = os.fork()
    if child == 0:
        sqlite3.connect(db).execute("SELECT count(*) FROM rounds").fetchone()
        os._exit(0)
    os.waitpid(child, 0)
    shm = Path(f"{db}-shm")
    shm.chmod(0o444)
    try:
        with CollectorStore(db) as store, pytest.raises(StorageError) as raised:
            store.record_registration(ROUND, _key(9), b"r", b"d", 1.0)
    finally:
        shm.chmod(0o644)
    assert f"not writable by this user: {shm} " in str(raised.value), raised.value


# ------------------------------------------------------------- a secret beside a database that lost its rounds

@pytest.mark.parametrize("loss", ["truncated", "deleted"])
def test_a_secret_beside_a_database_that_lost_its_tables_is_refused_not_served_as_new(
        loss: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker playing the unlucky operator: a database truncated to 0 bytes (or deleted) with its
    ``.secret`` still beside it was served silently as a new database under the old identity, every stored round
    gone. The schema is written before the secret, so that pair is no crash: `serve` refuses it, exit 2, one line,
    before it connects (the broker here does not exist) and without writing a round. A first start that crashed
    after creating the secret (tables, no round) still serves."""
    from coutil.collector.service import check_identity, create_secret

    db = tmp_path / "c.sqlite"
    with CollectorStore(db) as store:  # a first start: the schema, then the secret, then a crash before any round
        create_secret(db)
    with CollectorStore(db) as store:
        assert not store.created
        check_identity(store, db, load_or_create_secret(db))  # a crash after the secret: no refusal
        open_round(store, load_or_create_secret(db), CONFIG, 1000.0).collector.start(1000.0)
        assert len(store.rounds()) == 1
    for suffix in ("", "-wal", "-shm"):
        if loss == "deleted" or suffix:
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        else:
            db.write_bytes(b"")
    capsys.readouterr()
    code = main(["collector", "serve", "--db", str(db), "--k", "3", "--broker", "mqtt://127.0.0.1:1"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert err.count("\n") == 0 and "restore the database from its backup" in err, err
    with CollectorStore(db) as store:
        assert store.rounds() == []


def test_a_second_service_through_a_symbolic_link_to_the_database_is_refused(tmp_path: Path) -> None:
    """Found by an attacker playing the unlucky operator: the lock was named from the path as typed, so a service
    on ``link.sqlite -> c.sqlite`` took another lock than the one on ``c.sqlite`` and both served one database.
    The lock is named from the real path now."""
    from coutil.collector.service import serving_lock
    from coutil.errors import InputError

    db = tmp_path / "c.sqlite"
    with CollectorStore(db):
        pass
    link = tmp_path / "link.sqlite"
    link.symlink_to(db)
    with serving_lock(db), pytest.raises(InputError, match="already served"), serving_lock(link):
        pass


def test_an_export_whose_secret_cannot_be_read_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker playing the unlucky operator: with a secret it cannot read, `collector export` wrote the
    verdicts and manifest, then exited 2 on the secret, with no transcript: outputs are whole or not at all, so the
    secret is read before anything is written."""
    db = _db(tmp_path / "c.sqlite")
    (tmp_path / "c.sqlite.secret").write_bytes(b"short")  # not a secret: refused, exit 2
    outputs = {name: tmp_path / f"{name}.json" for name in ("verdicts", "manifest", "transcript")}
    code = main(["collector", "export", "--db", str(db)] + [a for name, path in outputs.items()
                                                          for a in (f"--{name}", str(path))])
    assert code == 2
    assert "secret" in _one_line(capsys.readouterr().err)
    assert [path.name for path in outputs.values() if path.exists()] == []


@pytest.mark.parametrize("command", [["status"], ["serve", "--broker", "mqtt://127.0.0.1:1", "--k", "3"]])
def test_a_database_cut_short_is_called_damaged_with_what_to_do(
        tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker playing the unlucky operator: a database truncated to half was "not a coutil collector
    database", where the other damage says "damaged ... restore it from a backup"."""
    db = _db(tmp_path / "c.sqlite")
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 2])
    code = main(["collector", command[0], "--db", str(db), *command[1:]])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "damaged collector database" in line and "restore it from a backup" in line, line
