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
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from coutil.errors import InputError
from coutil.fileio import write_text_atomic

#: Bumped when the schema changes; a database of another version is refused, never migrated blindly.
#: 2: the unused ``group_records`` table dropped (the release holds the opened records); later the
#: ``shuffle_starts`` table added (additive: a schema-2 database gains it empty on opening, and the
#: rounds stored before hold none, which the transcript export says).
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


@dataclass(frozen=True)
class StoredRegistration:
    """An accepted registration: the exact signed bytes and their digest."""

    subject_key: bytes
    payload: bytes
    digest: bytes
    received_at: float


@dataclass(frozen=True)
class StoredVerdict:
    subject_key: bytes
    payload: bytes
    digest: bytes
    accept: bool
    received_at: float


@dataclass(frozen=True)
class RoundSummary:
    round_id: bytes
    phase: str
    created_at: float
    updated_at: float
    registrations: int


@dataclass(frozen=True)
class StoredRound:
    """Everything the collector committed about one round (what a restarted collector reloads)."""

    round_id: bytes
    params: dict[str, object]
    phase: str
    collector_key: bytes
    announce: bytes | None
    created_at: float
    updated_at: float
    #: (phase, time) in the order the phases were entered.
    phase_history: tuple[tuple[str, float], ...]
    #: In the order they were committed.
    registrations: tuple[StoredRegistration, ...]
    roster: tuple[bytes, ...] = ()
    roster_root: bytes | None = None
    roster_payload: bytes | None = None
    assignments: dict[bytes, int] = field(default_factory=dict)
    assignment_payloads: dict[bytes, bytes] = field(default_factory=dict)
    exclusions: dict[bytes, str] = field(default_factory=dict)
    release_payload: bytes | None = None
    release_csv: str | None = None
    verdicts: tuple[StoredVerdict, ...] = ()
    #: Every signed shuffle_start the collector published (its exclusion statements), in that order.
    shuffle_starts: tuple[bytes, ...] = ()
    rejections: dict[str, int] = field(default_factory=dict)

    def registration(self, subject_key: bytes) -> StoredRegistration | None:
        return next((r for r in self.registrations if r.subject_key == subject_key), None)


class CollectorStore:
    """One SQLite database holding any number of rounds. Not thread-safe: one owner (the service)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            raise InputError(f"{self.path}: directory {self.path.parent} does not exist")
        try:
            # isolation_level=None: we open transactions explicitly (BEGIN IMMEDIATE), so a commit
            # happens exactly where the code says, never implicitly.
            self._db = sqlite3.connect(self.path, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            has_tables = self._db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: not a coutil collector database ({exc})") from None
        if has_tables and version != SCHEMA_VERSION:
            self._db.close()
            older = " (written by an older coutil: export its releases with that version, then start a new " \
                    "database)" if version < SCHEMA_VERSION else " (written by a newer coutil)"
            raise InputError(f"{self.path}: collector database schema {version}, this coutil reads schema "
                             f"{SCHEMA_VERSION}{older}; it is never migrated automatically")
        #: Nesting depth of `transaction` blocks (only the outermost one commits).
        self._depth = 0
        self._create_schema()

    def _create_schema(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    # ------------------------------------------------------------------ lifecycle
    def close(self) -> None:
        self._db.close()

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
        self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield self._db
        except BaseException:
            self._depth = 0
            self._db.execute("ROLLBACK")
            raise
        self._depth = 0
        self._db.execute("COMMIT")  # fsyncs the WAL (synchronous=FULL) before returning

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
        rows = self._db.execute(
            "SELECT r.round_id, r.phase, r.created_at, r.updated_at, "
            "(SELECT count(*) FROM registrations g WHERE g.round_id = r.round_id) "
            "FROM rounds r ORDER BY r.created_at, r.rowid"
        ).fetchall()
        return [RoundSummary(bytes(r[0]), r[1], r[2], r[3], r[4]) for r in rows]

    def latest_round(self) -> RoundSummary | None:
        rounds = self.rounds()
        return rounds[-1] if rounds else None

    def load_round(self, round_id: bytes) -> StoredRound:
        db = self._db
        head = db.execute(
            "SELECT params, phase, collector_key, announce, created_at, updated_at FROM rounds WHERE round_id = ?",
            (round_id,),
        ).fetchone()
        if head is None:
            raise KeyError(f"no round {round_id.hex()}")
        args = (round_id,)
        phases = tuple(
            (row[0], row[1])
            for row in db.execute("SELECT phase, at FROM phases WHERE round_id = ? ORDER BY rowid", args)
        )
        registrations = tuple(
            StoredRegistration(bytes(r[0]), bytes(r[1]), bytes(r[2]), r[3])
            for r in db.execute(
                "SELECT subject_key, payload, digest, received_at FROM registrations WHERE round_id = ? ORDER BY rowid",
                args,
            )
        )
        roster_row = db.execute(
            "SELECT subject_keys, merkle_root, payload FROM roster WHERE round_id = ?", args
        ).fetchone()
        roster: tuple[bytes, ...] = ()
        if roster_row is not None:
            packed = bytes(roster_row[0])
            roster = tuple(packed[i : i + 32] for i in range(0, len(packed), 32))
        assignments: dict[bytes, int] = {}
        assignment_payloads: dict[bytes, bytes] = {}
        for key, group, payload in db.execute(
            "SELECT subject_key, group_index, payload FROM assignments WHERE round_id = ? ORDER BY rowid", args
        ):
            assignments[bytes(key)] = int(group)
            if payload is not None:
                assignment_payloads[bytes(key)] = bytes(payload)
        exclusions = {
            bytes(key): reason
            for key, reason in db.execute("SELECT subject_key, reason FROM exclusions WHERE round_id = ?", args)
        }
        release = db.execute("SELECT payload, csv FROM releases WHERE round_id = ?", args).fetchone()
        shuffle_starts = tuple(bytes(r[0]) for r in db.execute(
            "SELECT payload FROM shuffle_starts WHERE round_id = ? ORDER BY rowid", args))
        verdicts = tuple(
            StoredVerdict(bytes(r[0]), bytes(r[1]), bytes(r[2]), bool(r[3]), r[4])
            for r in db.execute(
                "SELECT subject_key, payload, digest, accept, received_at FROM verdicts "
                "WHERE round_id = ? ORDER BY rowid",
                args,
            )
        )
        rejections = {
            reason: int(count)
            for reason, count in db.execute(
                "SELECT reason, count FROM rejections WHERE round_id = ? ORDER BY reason", args
            )
        }
        return StoredRound(
            round_id=round_id,
            params=json.loads(head[0]),
            phase=head[1],
            collector_key=bytes(head[2]),
            announce=bytes(head[3]) if head[3] is not None else None,
            created_at=head[4],
            updated_at=head[5],
            phase_history=phases,
            registrations=registrations,
            roster=roster,
            roster_root=bytes(roster_row[1]) if roster_row is not None else None,
            roster_payload=bytes(roster_row[2]) if roster_row is not None else None,
            assignments=assignments,
            assignment_payloads=assignment_payloads,
            exclusions=exclusions,
            release_payload=bytes(release[0]) if release is not None else None,
            release_csv=release[1] if release is not None else None,
            verdicts=verdicts,
            rejections=rejections,
            shuffle_starts=shuffle_starts,
        )

    def export_release(self, round_id: bytes, path: str | Path) -> Path:
        """Write the round's release CSV (exactly as stored) to ``path``; InputError if none."""
        row = self._db.execute("SELECT csv FROM releases WHERE round_id = ?", (round_id,)).fetchone()
        if row is None:
            raise InputError(f"{self.path}: round {round_id.hex()} has no release (yet)")
        target = Path(path)
        write_text_atomic(target, row[0])
        return target

    def integrity_ok(self) -> bool:
        """SQLite's own integrity check (used after crash tests and by the service at start)."""
        return bool(self._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok")
