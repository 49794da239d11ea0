"""The collector's SQLite store: round trip, idempotence, errors, and kill -9 durability."""

from __future__ import annotations

import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from coutil.collector import CollectorStore
from coutil.errors import InputError

ROUND = bytes(range(16))
COLLECTOR_KEY = b"\x07" * 32


def _key(i: int) -> bytes:
    return hashlib.sha256(b"subject-%d" % i).digest()


def _new_store(path: Path) -> CollectorStore:
    store = CollectorStore(path)
    store.create_round(ROUND, {"k": 5, "qi": ["a", "b"]}, collector_key=COLLECTOR_KEY, now=100.0, announce=b"ann")
    return store


def test_round_trip_of_everything_a_round_stores(tmp_path: Path) -> None:
    db = tmp_path / "collector.sqlite"
    with _new_store(db) as store:
        keys = [_key(i) for i in range(7)]
        assert store.record_registration(ROUND, keys[0], b"reg0", b"d0", 101.0) is True
        assert store.record_registration(ROUND, keys[0], b"reg0-again", b"dX", 102.0) is False  # first stands
        assert store.record_registrations(ROUND, [(k, b"reg%d" % i, b"d%d" % i) for i, k in enumerate(keys)], 103) == 6
        store.set_phase(ROUND, "sharing", 110.0)
        store.record_roster(ROUND, sorted(keys), b"root" * 8, b"roster-payload")
        store.record_assignments(ROUND, [(k, i % 2, b"assign%d" % i) for i, k in enumerate(keys)])
        store.record_assignments(ROUND, [(keys[3], 5, None)])  # regrouped later: replaces
        store.record_exclusion(ROUND, keys[6], "no_reveal")
        store.add_rejections(ROUND, {"bad_signature": 2, "stale": 1})
        store.add_rejections(ROUND, {"bad_signature": 3, "unused": 0})
        store.record_release(ROUND, b"release-bytes", "a,b\n1,2\n", 130.0)
        assert store.record_verdict(ROUND, keys[1], b"v1", b"vd1", accept=True, now=140.0)
        assert not store.record_verdict(ROUND, keys[1], b"v1b", b"vd1b", accept=False, now=141.0)
        store.set_phase(ROUND, "done", 150.0)

    # A fresh connection (as a restarted collector would open) sees all of it.
    with CollectorStore(db) as store:
        assert store.integrity_ok()
        loaded = store.load_round(ROUND)
        assert loaded.params == {"k": 5, "qi": ["a", "b"]}
        assert (loaded.phase, loaded.collector_key, loaded.announce) == ("done", COLLECTOR_KEY, b"ann")
        assert loaded.phase_history == (("registration", 100.0), ("sharing", 110.0), ("done", 150.0))
        assert [r.subject_key for r in loaded.registrations] == keys
        first = loaded.registration(keys[0])
        assert first is not None and (first.payload, first.digest, first.received_at) == (b"reg0", b"d0", 101.0)
        assert loaded.roster == tuple(sorted(keys)) and loaded.roster_root == b"root" * 8
        assert loaded.assignments[keys[3]] == 5 and loaded.assignments[keys[4]] == 0
        assert keys[3] not in loaded.assignment_payloads and loaded.assignment_payloads[keys[2]] == b"assign2"
        assert loaded.exclusions == {keys[6]: "no_reveal"}
        assert loaded.rejections == {"bad_signature": 5, "stale": 1}
        assert (loaded.release_payload, loaded.release_csv) == (b"release-bytes", "a,b\n1,2\n")
        assert [(v.subject_key, v.payload, v.accept) for v in loaded.verdicts] == [(keys[1], b"v1", True)]
        summary = store.latest_round()
        assert summary is not None and (summary.round_id, summary.registrations) == (ROUND, 7)
        out = store.export_release(ROUND, tmp_path / "release.csv")
        assert out.read_bytes() == b"a,b\n1,2\n"
        journal = store._db.execute("PRAGMA journal_mode").fetchone()[0]
        synchronous = store._db.execute("PRAGMA synchronous").fetchone()[0]
    assert (journal, synchronous) == ("wal", 2)  # 2 = FULL


def test_failed_transaction_rolls_back_and_errors_are_clear(tmp_path: Path) -> None:
    with _new_store(tmp_path / "c.sqlite") as store:
        with pytest.raises(RuntimeError), store.transaction():
            store.record_registration(ROUND, _key(1), b"r", b"d", 1.0)
            raise RuntimeError("crash inside the batch")
        assert store.load_round(ROUND).registrations == ()
        with pytest.raises(ValueError, match="already exists"):
            store.create_round(ROUND, {}, collector_key=COLLECTOR_KEY, now=1.0)
        with pytest.raises(KeyError):
            store.load_round(b"\x00" * 16)
        with pytest.raises(KeyError):
            store.set_phase(b"\x00" * 16, "done", 1.0)
        with pytest.raises(sqlite3.IntegrityError):  # a registration for an unknown round
            store.record_registration(b"\x01" * 16, _key(1), b"r", b"d", 1.0)
        with pytest.raises(InputError, match="no release"):
            store.export_release(ROUND, tmp_path / "out.csv")
        with pytest.raises(ValueError, match="32-byte"):
            store.record_roster(ROUND, [b"short"], b"r", b"p")
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("this is not sqlite " * 100)
    with pytest.raises(InputError, match="not a coutil collector database"):
        CollectorStore(not_a_db)
    with pytest.raises(InputError, match="does not exist"):
        CollectorStore(tmp_path / "missing-dir" / "c.sqlite")
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as raw:
        raw.execute("CREATE TABLE t (x)")
        raw.execute("PRAGMA user_version = 99")
    with pytest.raises(InputError, match=r"schema 99.*newer"):
        CollectorStore(other)
    # A schema-1 database (with the group_records table this version dropped) is refused, not migrated.
    old = tmp_path / "schema1.sqlite"
    with sqlite3.connect(old) as raw:
        raw.execute("CREATE TABLE group_records (round_id BLOB)")
        raw.execute("PRAGMA user_version = 1")
    with pytest.raises(InputError, match=r"schema 1, this coutil reads schema 2 .*older coutil"):
        CollectorStore(old)
    with sqlite3.connect(old) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 1  # untouched


_WRITER = textwrap.dedent(
    """
    import hashlib, sys
    from coutil.collector import CollectorStore
    round_id = bytes(range(16))
    store = CollectorStore(sys.argv[1])
    store.create_round(round_id, {"k": 5}, collector_key=b"\\x07" * 32, now=0.0)
    print("round", flush=True)
    i = 0
    while True:
        if i % 10 == 9:  # every tenth step: a group commit of 20 registrations
            batch = [(hashlib.sha256(b"b%d-%d" % (i, j)).digest(), b"x" * 300, b"d") for j in range(20)]
            store.record_registrations(round_id, batch, float(i))
            print("batch", i, flush=True)  # only printed once committed: an 'ack'
        else:
            store.record_registration(round_id, hashlib.sha256(b"s%d" % i).digest(), b"y" * 300, b"d", float(i))
            print("single", i, flush=True)
        i += 1
    """
)


def test_kill_9_mid_stream_loses_nothing_committed(tmp_path: Path) -> None:
    db = tmp_path / "crash.sqlite"
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    acknowledged: list[tuple[str, int]] = []
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "round"
        while len(acknowledged) < 120:
            line = writer.stdout.readline()
            assert line, f"writer died early: {writer.stderr.read() if writer.stderr else ''}"
            kind, number = line.split()
            acknowledged.append((kind, int(number)))
        os.kill(writer.pid, signal.SIGKILL)  # mid-stream: it is busy committing the next ones
    finally:
        writer.kill()
        writer.wait(10)
    assert writer.returncode == -signal.SIGKILL

    with CollectorStore(db) as store:
        assert store.integrity_ok()
        stored = {r.subject_key for r in store.load_round(ROUND).registrations}
    for kind, number in acknowledged:
        if kind == "single":
            assert hashlib.sha256(b"s%d" % number).digest() in stored
        else:
            assert all(hashlib.sha256(b"b%d-%d" % (number, j)).digest() in stored for j in range(20))
    # Batches are atomic: each is entirely present or entirely absent, even the one being written.
    for number in range(9, max(n for _, n in acknowledged) + 12, 10):
        present = [hashlib.sha256(b"b%d-%d" % (number, j)).digest() in stored for j in range(20)]
        assert all(present) or not any(present)
    expected_minimum = sum(20 if kind == "batch" else 1 for kind, _ in acknowledged)
    assert len(stored) >= expected_minimum
