"""Durable storage of a collector's rounds: SQLite in WAL mode, ``synchronous=FULL``.

The rule the collector service follows: **write first, acknowledge second**. A registration (or
verdict) is committed with `CollectorStore.record_registration` *before* its acknowledgement is
published, so after a ``kill -9`` and a restart everything the collector ever acknowledged is
still here, and `load_round` gives the service what it needs to resume or cleanly abort.

Why these settings: WAL lets readers (``coutil collector export``) run beside the writer and makes a
commit one sequential append; ``synchronous=FULL`` makes every commit fsync the WAL, so a commit
that returned survives a crash of the process *and* of the machine. An fsync costs milliseconds, so
many registrations received in one burst should be committed together with `record_registrations`
(group commit) and acknowledged after it returns.

What is stored is the exact bytes received or published (payloads are signed; re-encoding would
break the signatures), plus the few derived values the service needs to index them: the announce,
registrations, the roster and every subject's group (with her signed assign), written before they
are published; exclusions; the release; verdicts; rejection counts. Confidential values are stored
only inside the release (once every group's shuffle opened, so unlinkable from their subjects): the
opened records of a group are not stored separately (schema 1 had a ``group_records`` table that
nothing wrote; schema 2 dropped it), and nothing confidential per subject is stored anywhere.

Failures are the operator's to fix, never a traceback: a write the file system refuses (disk full,
I/O error, read-only, locked) is a `StorageError` saying that everything acknowledged before is in
the database (the failed transaction is rolled back, and its acknowledgements were never sent); a
database that cannot be read as one of ours (damaged pages, a foreign table of the same schema
number, a value of the wrong type) is an `InputError` naming the file. Both are exit code 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from coutil.collector.stored_round import (
    DamagedValueError,
    RoundSummary,
    StoredRegistration,
    StoredRound,
    StoredVerdict,
    blob,
    integer,
    read_round,
    real,
    text,
)
from coutil.errors import InputError, StorageError
from coutil.fileio import write_text_atomic

__all__ = ["CollectorStore", "RoundSummary", "StoredRegistration", "StoredRound", "StoredVerdict"]

#: Bumped when the schema changes; a database of another version is refused, never migrated blindly.
#: 2: the unused ``group_records`` table dropped (the release holds the opened records); later the
#: ``shuffle_starts`` table added (additive: a schema-2 database gains it empty on opening, and the
#: rounds stored before hold none, which the transcript export says), then the ``run_evidence`` table
#: (additive in the same way: the signed messages that prove a run's `blamed_*` exclusions).
SCHEMA_VERSION = 2

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rounds (
    round_id BLOB PRIMARY KEY,
    params TEXT NOT NULL,
    phase TEXT NOT NULL,
    collector_key BLOB NOT NULL,
    announce BLOB,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS phases (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    phase TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS registrations (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    subject_key BLOB NOT NULL,
    payload BLOB NOT NULL,
    digest BLOB NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (round_id, subject_key)
);
CREATE TABLE IF NOT EXISTS roster (
    round_id BLOB PRIMARY KEY REFERENCES rounds(round_id),
    subject_keys BLOB NOT NULL,
    merkle_root BLOB NOT NULL,
    payload BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS assignments (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    subject_key BLOB NOT NULL,
    group_index INTEGER NOT NULL,
    payload BLOB,
    PRIMARY KEY (round_id, subject_key)
);
CREATE TABLE IF NOT EXISTS shuffle_starts (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    group_index INTEGER NOT NULL,
    run INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (round_id, group_index, run)
);
CREATE TABLE IF NOT EXISTS run_evidence (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    group_index INTEGER NOT NULL,
    run INTEGER NOT NULL,
    position INTEGER NOT NULL,
    payload BLOB NOT NULL,
    PRIMARY KEY (round_id, group_index, run, position)
);
CREATE TABLE IF NOT EXISTS exclusions (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    subject_key BLOB NOT NULL,
    reason TEXT NOT NULL,
    PRIMARY KEY (round_id, subject_key)
);
CREATE TABLE IF NOT EXISTS releases (
    round_id BLOB PRIMARY KEY REFERENCES rounds(round_id),
    payload BLOB NOT NULL,
    csv TEXT NOT NULL,
    published_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS verdicts (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    subject_key BLOB NOT NULL,
    payload BLOB NOT NULL,
    digest BLOB NOT NULL,
    accept INTEGER NOT NULL,
    received_at REAL NOT NULL,
    PRIMARY KEY (round_id, subject_key)
);
CREATE TABLE IF NOT EXISTS rejections (
    round_id BLOB NOT NULL REFERENCES rounds(round_id),
    reason TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (round_id, reason)
);
"""

#: The tables of the schema (a database holding them all needs no write to be opened).
_TABLES = frozenset(line.split()[5] for line in _SCHEMA.splitlines() if line.startswith("CREATE TABLE"))

#: SQLite's primary result codes (the low byte of an extended code) of a database that is not the one we
#: wrote: damaged pages, not a database, or a statement this schema should run failing (a foreign table of
#: the same user_version lacks a column: "no such column" is SQLITE_ERROR).
_DAMAGED_CODES = frozenset({sqlite3.SQLITE_ERROR, sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB,
                            sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_SCHEMA, sqlite3.SQLITE_RANGE,
                            sqlite3.SQLITE_FORMAT})
#: ... and of a file system that refused an operation: the database itself may be fine.
_REFUSED_CODES = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY,
                            sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM, sqlite3.SQLITE_BUSY,
                            sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_NOLFS, sqlite3.SQLITE_PROTOCOL})


def _wal_hint(path: Path, exc: sqlite3.Error) -> str:
    """What to do about a read-only open SQLite refused for the WAL index it could not create."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code not in (sqlite3.SQLITE_READONLY_DIRECTORY, sqlite3.SQLITE_CANTOPEN) or os.access(path.parent, os.W_OK):
        return ""
    if Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists():
        return ("; it is in WAL mode with a -wal file but no -shm, which SQLite needs to create and its directory is "
                "read-only to you: a collector stopped without closing it; read a copy of the database with its "
                "-wal, or start the collector once on it")
    if code == sqlite3.SQLITE_CANTOPEN:
        return ""
    return "; its directory is read-only to you and SQLite needs to create a -shm file beside it (WAL mode)"


def _readonly_hint(path: Path) -> str:
    """Which of the database's files this user may not write, when SQLite refused a write as read-only: after the
    database itself was made writable again, a ``-wal`` or ``-shm`` SQLite created with its old mode (or another
    user's) still makes every write fail with the same words."""
    refused = [str(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
               if p.exists() and not os.access(p, os.W_OK)]
    if not refused:
        return ""
    return (f"; not writable by this user: {', '.join(refused)} (fix its owner or mode; never delete a -wal, it "
            "holds the latest commits)")


def _primary_code(exc: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``exc`` (None for the errors Python's module raises itself)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


class CollectorStore:
    """One SQLite database holding any number of rounds. Not thread-safe: one owner (the service)."""

    def __init__(self, path: str | Path, *, read_only: bool = False) -> None:
        """``read_only``: for the commands that only read (export, rounds, status): the database is opened so that
        SQLite refuses every write, and is never created nor given a schema (found by a user fuzzing the auditor:
        `collector export` on an empty file wrote a whole schema into it)."""
        self.path = Path(path)
        #: Read-only: the ``-wal``/``-shm`` files this connection made beside the database (see `close`).
        self._made_wal_files = False
        try:
            if self.path.parent and not self.path.parent.exists():
                raise InputError(f"{self.path}: directory {self.path.parent} does not exist")
            if self.path.is_dir():
                # SQLite would only say "unable to open database file".
                raise InputError(f"{self.path}: is a directory, not a collector database")
        except OSError as exc:  # `Path.exists` raises for a directory this user may not search (EACCES)
            raise InputError(f"{self.path}: cannot open the collector database ({exc.strerror or exc}: "
                             f"{self.path.parent} must be searchable by this user)") from None
        try:
            # isolation_level=None: we open transactions explicitly (BEGIN IMMEDIATE), so a commit
            # happens exactly where the code says, never implicitly.
            if read_only:
                self._db = self._connect_read_only()
            else:
                self._db = sqlite3.connect(self.path, isolation_level=None)
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            has_tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        except sqlite3.DatabaseError as exc:
            # A full disk or a file we may not open is not a foreign file: say what failed.
            code = _primary_code(exc)
            if code in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM):
                hint = _wal_hint(self.path, exc) if read_only else ""
                raise InputError(f"{self.path}: cannot open the collector database ({exc}){hint}") from None
            if read_only and code in _REFUSED_CODES:
                # Nothing is written here: a "cannot write ... nothing was acknowledged" would mislead.
                hint = _wal_hint(self.path, exc)
                raise InputError(f"{self.path}: cannot read the collector database ({exc}){hint}") from None
            if code in _REFUSED_CODES:
                hint = _readonly_hint(self.path) if code == sqlite3.SQLITE_READONLY else ""
                raise StorageError(str(self.path), f"{exc}{hint}") from None
            if code == sqlite3.SQLITE_CORRUPT:  # an SQLite file, cut short or overwritten in part
                raise self._damaged(str(exc)) from None
            raise InputError(f"{self.path}: not a coutil collector database ({exc})") from None
        if has_tables and version != SCHEMA_VERSION:
            self._db.close()
            older = " (written by an older coutil: export its releases with that version, then start a new " \
                    "database)" if version < SCHEMA_VERSION else " (written by a newer coutil)"
            raise InputError(f"{self.path}: collector database schema {version}, this coutil reads schema "
                             f"{SCHEMA_VERSION}{older}; it is never migrated automatically")
        #: Nesting depth of `transaction` blocks (only the outermost one commits).
        self._depth = 0
        #: Whether this open found no tables (a new, empty or truncated file) and gave it the schema.
        self.created = not has_tables and not read_only
        if read_only:
            tables = self._tables()
            if not tables >= _TABLES:
                self._db.close()
                raise self._damaged("no collector tables" if not tables else "tables missing")
            return
        try:
            self._create_schema()
        except sqlite3.Error as exc:
            self._db.close()
            raise self._error(exc) from None
        except BaseException:
            self._db.close()
            raise

    def _connect_read_only(self) -> sqlite3.Connection:
        """A connection SQLite refuses every write on (``mode=ro``), the database opened (its WAL index read).

        The database is in WAL mode, and a WAL reader needs the ``-shm`` (and ``-wal``) files beside it: SQLite
        creates them when they are missing, and being read-only it cannot delete them when it closes, as the
        last writer would (empty files left beside the database by every `collector status`); `close` has SQLite
        delete them, by its own rule (a last connection, which may write, closing). When they are missing and
        the directory is one SQLite cannot create them in (read-only to this user), it refuses
        (SQLITE_READONLY_DIRECTORY): the database is then opened ``immutable``, which needs neither, read as it
        is on disk (SQLite's documented way to read a WAL database in a read-only directory). Safe when no
        writer can change it while it is read: no ``-wal`` or ``-shm`` exists, so no connection has it open and
        nothing committed is outside the main file, and this user cannot start one there. Limit: a user who may
        write there and starts a collector on it during the read, and checkpoints into the file then, could show
        this read pages of two states (SQLite does not lock an immutable file): most likely reported as a damaged
        database (run the command again), else a read without the newest commits. With a ``-wal`` but
        no ``-shm`` (a collector that crashed), ``immutable`` would ignore what the WAL holds: refused, saying
        what is wrong."""
        resolved = self.path.resolve()  # SQLite names the WAL files after the file a symbolic link names
        uri = resolved.as_uri()
        wal_files = [Path(f"{resolved}{suffix}") for suffix in ("-wal", "-shm")]
        had_wal_files = any(f.exists() for f in wal_files)
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError as exc:
            db.close()
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_READONLY_DIRECTORY or had_wal_files:
                raise
            db = sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)
            return db
        self._made_wal_files = not had_wal_files and any(f.exists() for f in wal_files)
        return db

    def _tables(self) -> set[str]:
        return {name for name, in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _create_schema(self) -> None:
        if self._tables() >= _TABLES:
            # Nothing to create: no write lock taken, so that `collector status` beside a service in the
            # middle of a commit neither waits for it nor fails with "database is locked".
            return
        with self.transaction() as db:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    # ------------------------------------------------------------------ errors
    def _error(self, exc: sqlite3.Error, *, writing: bool = True) -> Exception:
        """The one-line error an operator sees for an SQLite failure (the exception itself when it is
        neither the file system's nor a damaged database's: a constraint failing is a bug in coutil)."""
        code = _primary_code(exc)
        if code in _REFUSED_CODES:
            if not writing:
                return InputError(f"{self.path}: cannot read the collector database ({exc})")
            hint = _readonly_hint(self.path) if code == sqlite3.SQLITE_READONLY else ""
            return StorageError(str(self.path), f"{exc}{hint}")
        if code in _DAMAGED_CODES:
            return self._damaged(str(exc))
        return exc

    def _damaged(self, problem: str) -> InputError:
        return InputError(f"{self.path}: damaged collector database, or not one this coutil wrote ({problem}); "
                          "restore it from a backup")

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """Around every read: SQLite's errors and stored values of the wrong type as one-line errors."""
        try:
            yield
        except sqlite3.Error as exc:
            raise self._error(exc, writing=False) from None
        except DamagedValueError as exc:
            raise self._damaged(str(exc)) from None

    def _rollback(self) -> None:
        # After SQLITE_FULL or an I/O error SQLite may have rolled back already; a ROLLBACK failing then
        # must not hide the error that matters.
        if self._db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._db.close()
        if self._made_wal_files:
            self._made_wal_files = False
            # The -wal and -shm this read-only connection made: a connection that may write, closing as the last
            # one, checkpoints (nothing) and deletes them, by SQLite's own locks; beside a collector that opened
            # the database meanwhile it is not the last, and leaves them to it. ``mode=rw`` never creates a
            # database; nothing else is done with it. Best effort: files left behind are harmless.
            with contextlib.suppress(sqlite3.Error, OSError):
                cleanup = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None)
                try:
                    cleanup.execute("SELECT count(*) FROM sqlite_master").fetchone()
                finally:
                    cleanup.close()

    def __enter__(self) -> CollectorStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One durable commit around the block (nested uses join the outer transaction)."""
        if self._depth:
            self._depth += 1
            try:
                yield self._db
            finally:
                self._depth -= 1
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._error(exc) from None
        self._depth = 1
        try:
            yield self._db
        except sqlite3.Error as exc:
            # The disk full, an I/O error, a damaged page: nothing of the block is kept, and the caller
            # (the service) acknowledges nothing of it, since the exception stops it before it publishes.
            self._depth = 0
            self._rollback()
            raise self._error(exc) from None
        except BaseException:
            self._depth = 0
            self._rollback()
            raise
        self._depth = 0
        try:
            self._db.execute("COMMIT")  # fsyncs the WAL (synchronous=FULL) before returning
        except sqlite3.Error as exc:
            self._rollback()
            raise self._error(exc) from None

    # ------------------------------------------------------------------ rounds
    def create_round(
        self,
        round_id: bytes,
        params: Mapping[str, object],
        *,
        collector_key: bytes,
        now: float,
        announce: bytes | None = None,
        phase: str = "registration",
    ) -> None:
        """Record a new round; ``params`` must be JSON-serialisable (e.g. ``dataclasses.asdict``)."""
        params_json = json.dumps(dict(params), sort_keys=True)
        with self.transaction() as db:
            try:
                db.execute(
                    "INSERT INTO rounds VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (round_id, params_json, phase, collector_key, announce, now, now),
                )
            except sqlite3.IntegrityError:
                raise ValueError(f"round {round_id.hex()} already exists") from None
            db.execute("INSERT INTO phases VALUES (?, ?, ?)", (round_id, phase, now))

    def set_announce(self, round_id: bytes, announce: bytes) -> None:
        with self.transaction() as db:
            self._touch(db, round_id, "UPDATE rounds SET announce = ? WHERE round_id = ?", (announce, round_id))

    def set_phase(self, round_id: bytes, phase: str, now: float) -> None:
        with self.transaction() as db:
            self._touch(
                db, round_id, "UPDATE rounds SET phase = ?, updated_at = ? WHERE round_id = ?", (phase, now, round_id)
            )
            db.execute("INSERT INTO phases VALUES (?, ?, ?)", (round_id, phase, now))

    @staticmethod
    def _touch(db: sqlite3.Connection, round_id: bytes, sql: str, args: tuple[object, ...]) -> None:
        if db.execute(sql, args).rowcount != 1:
            raise KeyError(f"no round {round_id.hex()}")

    # ------------------------------------------------------------------ registrations and verdicts
    def record_registration(
        self, round_id: bytes, subject_key: bytes, payload: bytes, digest: bytes, now: float
    ) -> bool:
        """Commit one accepted registration; call BEFORE sending its ack. False if already stored
        (a re-sent registration: the first one stands)."""
        return self.record_registrations(round_id, [(subject_key, payload, digest)], now) == 1

    def record_registrations(
        self, round_id: bytes, registrations: Iterable[tuple[bytes, bytes, bytes]], now: float
    ) -> int:
        """Group commit of (subject_key, payload, digest) triples: one fsync for the lot. Returns
        how many were new."""
        with self.transaction() as db:
            cursor = db.executemany(
                "INSERT OR IGNORE INTO registrations VALUES (?, ?, ?, ?, ?)",
                [(round_id, key, payload, digest, now) for key, payload, digest in registrations],
            )
            return int(cursor.rowcount)

    def record_verdict(
        self, round_id: bytes, subject_key: bytes, payload: bytes, digest: bytes, *, accept: bool, now: float
    ) -> bool:
        """Commit a subject's verdict (before its VerdictAck). False if one was already stored."""
        with self.transaction() as db:
            cursor = db.execute(
                "INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                (round_id, subject_key, payload, digest, int(accept), now),
            )
            return cursor.rowcount == 1

    # ------------------------------------------------------------------ grouping, shuffle, release
    def record_roster(self, round_id: bytes, subject_keys: Sequence[bytes], merkle_root: bytes, payload: bytes) -> None:
        if any(len(key) != 32 for key in subject_keys):
            raise ValueError("subject keys must be 32-byte Ed25519 public keys")
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO roster VALUES (?, ?, ?, ?)",
                (round_id, b"".join(subject_keys), merkle_root, payload),
            )

    def record_assignments(self, round_id: bytes, assignments: Iterable[tuple[bytes, int, bytes | None]]) -> None:
        """(subject_key, group index, Assign payload or None); a re-assignment replaces the old one."""
        with self.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO assignments VALUES (?, ?, ?, ?)",
                [(round_id, key, group, payload) for key, group, payload in assignments],
            )

    def record_shuffle_starts(self, round_id: bytes, starts: Iterable[tuple[int, int, bytes]]) -> None:
        """(group index, run, signed ShuffleStart payload); the first of a run is kept (re-sends are equal)."""
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO shuffle_starts VALUES (?, ?, ?, ?)",
                           [(round_id, group, run, payload) for group, run, payload in starts])

    def record_run_evidence(self, round_id: bytes, group: int, run: int, envelopes: Sequence[bytes]) -> None:
        """The signed envelopes that prove a run's `blamed_*` exclusions; a run's first record is kept."""
        with self.transaction() as db:
            db.executemany("INSERT OR IGNORE INTO run_evidence VALUES (?, ?, ?, ?, ?)",
                           [(round_id, group, run, i, payload) for i, payload in enumerate(envelopes)])

    def record_exclusion(self, round_id: bytes, subject_key: bytes, reason: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO exclusions VALUES (?, ?, ?)", (round_id, subject_key, reason))

    def record_release(self, round_id: bytes, payload: bytes, csv_text: str, now: float) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR REPLACE INTO releases VALUES (?, ?, ?, ?)", (round_id, payload, csv_text, now))

    def add_rejections(self, round_id: bytes, counts: Mapping[str, int]) -> None:
        """Add rejection counts per reason (accumulated across calls)."""
        with self.transaction() as db:
            db.executemany(
                "INSERT INTO rejections VALUES (?, ?, ?) "
                "ON CONFLICT(round_id, reason) DO UPDATE SET count = count + excluded.count",
                [(round_id, reason, int(count)) for reason, count in counts.items() if count],
            )

    # ------------------------------------------------------------------ reading back
    def rounds(self) -> list[RoundSummary]:
        with self._reading():
            rows = self._db.execute(
                "SELECT r.round_id, r.phase, r.created_at, r.updated_at, "
                "(SELECT count(*) FROM registrations g WHERE g.round_id = r.round_id) "
                # In the order they were started (the rowid), not by their clock: a clock stepped back between
                # two rounds would make "the newest round" an older one (and leave the newer unfinished for ever).
                "FROM rounds r ORDER BY r.rowid"
            ).fetchall()
            return [RoundSummary(blob(r[0], "rounds.round_id"), text(r[1], "rounds.phase"),
                                 real(r[2], "rounds.created_at"), real(r[3], "rounds.updated_at"),
                                 integer(r[4], "registrations")) for r in rows]

    def latest_collector_key(self) -> bytes | None:
        """The collector key that signed the newest round (None in a database without rounds)."""
        with self._reading():
            row = self._db.execute("SELECT collector_key FROM rounds ORDER BY rowid DESC LIMIT 1").fetchone()
            return None if row is None else blob(row[0], "rounds.collector_key")

    def latest_round(self) -> RoundSummary | None:
        rounds = self.rounds()
        return rounds[-1] if rounds else None

    def load_round(self, round_id: bytes) -> StoredRound:
        with self._reading(), self._snapshot():
            return read_round(self._db, round_id)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction around the block: its statements see the database as of one commit (WAL), never
        a commit of the service landing between two of them (a round half before and half after it: e.g. a
        shuffle_start excluding a member whose exclusion the summary lacks, which an export would then sign).
        Inside a transaction of this connection (the service's own) the block joins it."""
        if self._db.in_transaction:
            yield
            return
        self._db.execute("BEGIN")
        try:
            yield
        finally:
            if self._db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    self._db.execute("ROLLBACK")  # a read: nothing to keep

    def export_release(self, round_id: bytes, path: str | Path) -> Path:
        """Write the round's release CSV (exactly as stored) to ``path``; InputError if none."""
        with self._reading():
            row = self._db.execute("SELECT csv FROM releases WHERE round_id = ?", (round_id,)).fetchone()
            if row is None:
                raise InputError(f"{self.path}: round {round_id.hex()} has no release (yet)")
            csv_text = text(row[0], "releases.csv")
        target = Path(path)
        write_text_atomic(target, csv_text)
        return target

    def integrity_ok(self) -> bool:
        """SQLite's own integrity check (used after crash tests and by the service at start)."""
        try:
            return bool(self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
        except sqlite3.DatabaseError as exc:
            if _primary_code(exc) in _DAMAGED_CODES:
                return False  # a page too damaged for the check to go on: not ok
            raise self._error(exc, writing=False) from None
