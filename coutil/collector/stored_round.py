"""What the collector's database holds about one round, read back and checked value by value.

`read_round` turns the rows of one round into a `StoredRound`. Every value is checked for the type the collector
wrote: a hand-edited or foreign database of the same schema number holds anything, and what reads a `StoredRound`
(the resuming service, `collector export`) must never meet a surprise. A value of the wrong type is a
`DamagedValueError` naming its table and column, which `CollectorStore` turns into the one-line "damaged collector
database" error. The writing side, the schema and the error handling are `coutil.collector.storage`'s.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field


class DamagedValueError(Exception):
    """A stored value of the wrong type or shape (``where``: table.column), found while reading."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where} {problem}")


def blob(value: object, where: str) -> bytes:
    # sqlite3 returns a BLOB column as bytes; text or a number there is not what the collector wrote.
    if not isinstance(value, bytes):
        raise DamagedValueError(where, f"holds a {type(value).__name__}, not bytes")
    return value


def optional_blob(value: object, where: str) -> bytes | None:
    return None if value is None else blob(value, where)


def text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DamagedValueError(where, f"holds a {type(value).__name__}, not text")
    return value


def real(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DamagedValueError(where, f"holds a {type(value).__name__}, not a number")
    return float(value)


def integer(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DamagedValueError(where, f"holds a {type(value).__name__}, not an integer")
    return value


def params_object(value: object) -> dict[str, object]:
    try:
        params = json.loads(text(value, "rounds.params"))
    except (ValueError, RecursionError):  # JSONDecodeError, a number too long to convert, too deep
        raise DamagedValueError("rounds.params", "is not JSON") from None
    if not isinstance(params, dict):
        raise DamagedValueError("rounds.params", f"holds a JSON {type(params).__name__}, not an object")
    return params


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
    #: (group, run) -> the signed envelopes that prove the run's `blamed_*` exclusions, in the collector's order.
    run_evidence: dict[tuple[int, int], tuple[bytes, ...]] = field(default_factory=dict)
    rejections: dict[str, int] = field(default_factory=dict)

    def registration(self, subject_key: bytes) -> StoredRegistration | None:
        return next((r for r in self.registrations if r.subject_key == subject_key), None)


def read_round(db: sqlite3.Connection, round_id: bytes) -> StoredRound:
    """The round ``round_id`` as stored (KeyError if there is none); read inside one snapshot by the caller."""
    head = db.execute(
        "SELECT params, phase, collector_key, announce, created_at, updated_at FROM rounds WHERE round_id = ?",
        (round_id,),
    ).fetchone()
    if head is None:
        raise KeyError(f"no round {round_id.hex()}")
    args = (round_id,)
    phases = tuple(
        (text(row[0], "phases.phase"), real(row[1], "phases.at"))
        for row in db.execute("SELECT phase, at FROM phases WHERE round_id = ? ORDER BY rowid", args)
    )
    registrations = tuple(
        StoredRegistration(blob(r[0], "registrations.subject_key"), blob(r[1], "registrations.payload"),
                           blob(r[2], "registrations.digest"), real(r[3], "registrations.received_at"))
        for r in db.execute(
            "SELECT subject_key, payload, digest, received_at FROM registrations WHERE round_id = ? ORDER BY rowid",
            args,
        )
    )
    roster_row = db.execute(
        "SELECT subject_keys, merkle_root, payload FROM roster WHERE round_id = ?", args
    ).fetchone()
    roster: tuple[bytes, ...] = ()
    roster_root: bytes | None = None
    roster_payload: bytes | None = None
    if roster_row is not None:
        packed = blob(roster_row[0], "roster.subject_keys")
        if len(packed) % 32:
            raise DamagedValueError("roster.subject_keys", f"holds {len(packed)} bytes, not 32-byte keys")
        roster = tuple(packed[i : i + 32] for i in range(0, len(packed), 32))
        roster_root = blob(roster_row[1], "roster.merkle_root")
        roster_payload = blob(roster_row[2], "roster.payload")
    assignments: dict[bytes, int] = {}
    assignment_payloads: dict[bytes, bytes] = {}
    for key, group, payload in db.execute(
        "SELECT subject_key, group_index, payload FROM assignments WHERE round_id = ? ORDER BY rowid", args
    ):
        subject = blob(key, "assignments.subject_key")
        assignments[subject] = integer(group, "assignments.group_index")
        if payload is not None:
            assignment_payloads[subject] = blob(payload, "assignments.payload")
    exclusions = {
        blob(key, "exclusions.subject_key"): text(reason, "exclusions.reason")
        for key, reason in db.execute("SELECT subject_key, reason FROM exclusions WHERE round_id = ?", args)
    }
    release = db.execute("SELECT payload, csv FROM releases WHERE round_id = ?", args).fetchone()
    shuffle_starts = tuple(blob(r[0], "shuffle_starts.payload") for r in db.execute(
        "SELECT payload FROM shuffle_starts WHERE round_id = ? ORDER BY rowid", args))
    run_evidence: dict[tuple[int, int], list[bytes]] = {}
    for group, run, payload in db.execute(
        "SELECT group_index, run, payload FROM run_evidence WHERE round_id = ? ORDER BY group_index, run, position",
        args,
    ):
        where = (integer(group, "run_evidence.group_index"), integer(run, "run_evidence.run"))
        run_evidence.setdefault(where, []).append(blob(payload, "run_evidence.payload"))
    verdicts = tuple(
        StoredVerdict(blob(r[0], "verdicts.subject_key"), blob(r[1], "verdicts.payload"),
                      blob(r[2], "verdicts.digest"), bool(integer(r[3], "verdicts.accept")),
                      real(r[4], "verdicts.received_at"))
        for r in db.execute(
            "SELECT subject_key, payload, digest, accept, received_at FROM verdicts "
            "WHERE round_id = ? ORDER BY rowid",
            args,
        )
    )
    rejections = {
        text(reason, "rejections.reason"): integer(count, "rejections.count")
        for reason, count in db.execute(
            "SELECT reason, count FROM rejections WHERE round_id = ? ORDER BY reason", args
        )
    }
    return StoredRound(
        round_id=round_id,
        params=params_object(head[0]),
        phase=text(head[1], "rounds.phase"),
        collector_key=blob(head[2], "rounds.collector_key"),
        announce=optional_blob(head[3], "rounds.announce"),
        created_at=real(head[4], "rounds.created_at"),
        updated_at=real(head[5], "rounds.updated_at"),
        phase_history=phases,
        registrations=registrations,
        roster=roster,
        roster_root=roster_root,
        roster_payload=roster_payload,
        assignments=assignments,
        assignment_payloads=assignment_payloads,
        exclusions=exclusions,
        release_payload=blob(release[0], "releases.payload") if release is not None else None,
        release_csv=text(release[1], "releases.csv") if release is not None else None,
        verdicts=verdicts,
        rejections=rejections,
        shuffle_starts=shuffle_starts,
        run_evidence={where: tuple(envelopes) for where, envelopes in run_evidence.items()},
    )
