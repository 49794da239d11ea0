"""The collector service crashing at each phase boundary, in process: the round is resumed or aborted
cleanly and nothing committed is lost.

A crash is simulated as a ``kill -9`` would leave things: the `PersistentCollector` is abandoned
mid-round (it vanishes from the in-memory bus; its SQLite connection is never closed), and a new
service reopens the database file and calls `open_round`, as ``coutil collector serve`` does at
start. The real-process ``kill -9`` (mid-registration, over a real broker) is in test_service.py.

Boundaries: during registration (resumed: the round completes with every subject), right after the
roster and assignments are written (start of sharing), right after the release, and during auditing
(aborted: phase ``aborted``, a new round announced, every stored row intact, the release exportable).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from coutil.adversary.subjects import SubjectStrategy
from coutil.collector.service import PersistentCollector, identity_from_secret, load_or_create_secret, open_round
from coutil.collector.storage import CollectorStore, StoredRound
from coutil.errors import InputError
from coutil.net.memory import MemoryBus
from coutil.protocol import codec, merkle
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import Assign, Register, Release, Roster
from coutil.protocol.node import SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.round.simulation import synthetic_dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50, step_timeout=10.0,
                     retry_interval=1.0, register_window=30.0, audit_window=20.0, expected_subjects=12)
N = 12


@dataclasses.dataclass
class World:
    db: Path
    secret: bytes
    bus: MemoryBus
    service: PersistentCollector
    subjects: list[SubjectNode]


def _world(tmp_path: Path, seed: int = 7, strategies: Mapping[int, type[SubjectStrategy]] | None = None) -> World:
    """The service and N subjects on an in-memory bus (``strategies``: row -> a deviation of the library the
    subject of that row plays)."""
    db = tmp_path / "collector.sqlite"
    secret = load_or_create_secret(db)
    store = CollectorStore(db)
    service = open_round(store, secret, CONFIG, 0.0).collector
    data = synthetic_dataset(N, CONFIG, seed)
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    root = SeededRandom(seed)
    caches = SharedCaches()
    key = identity_from_secret(secret).public
    subjects: list[SubjectNode] = []
    for i in range(N):
        cls = (strategies or {}).get(i, SubjectNode)
        node = cls(collector_key=key, qi=qi[i], confidential=conf[i], rng=root.fork(f"s{i}"), caches=caches,
                   retry_interval=1.0)
        if isinstance(node, SubjectStrategy):
            node.configure({})
        subjects.append(node)
    bus = MemoryBus(seed=seed, record_publications=True)
    bus.add_node("collector", service)
    for i, s in enumerate(subjects):
        # Staggered: half of them arrive once registration is well under way.
        bus.add_node(s.sid, s, start_at=0.0 if i < N // 2 else 5.0)
    return World(db, secret, bus, service, subjects)


def _kinds(world: World) -> list[str]:
    return [e.kind for who, e in world.bus.events or () if who == "collector"]


def _crash(world: World) -> CollectorStore:
    """kill -9: the service stops where it is; a new process opens the same database file."""
    world.bus.vanish("collector", world.bus.now)
    return CollectorStore(world.db)


def _rows(stored: StoredRound) -> dict[str, object]:
    """Everything stored about a round but its phase."""
    fields = dataclasses.asdict(stored)
    return {k: v for k, v in fields.items() if k not in ("phase", "phase_history", "updated_at")}


BOUNDARIES: dict[str, Callable[[World], bool]] = {
    "registration": lambda w: _kinds(w).count("registration_accepted") >= N // 2,
    "sharing": lambda w: w.service.node.state == "sharing",
    "released": lambda w: w.service.node.state == "auditing",
    "auditing": lambda w: _kinds(w).count("verdict_accepted") >= N // 2,
}


def test_crash_during_registration_resumes_the_round(tmp_path: Path) -> None:
    world = _world(tmp_path)
    assert world.bus.run_until(until=100.0, predicate=lambda: BOUNDARIES["registration"](world)) == "predicate"
    assert world.service.node.state == "registration"
    store = _crash(world)
    before = store.load_round(world.service.round_id)
    assert len(before.registrations) >= N // 2 and before.roster == ()
    opened = open_round(store, world.secret, CONFIG, world.bus.now + 1.0)
    assert opened.how == "resumed" and opened.collector.round_id == world.service.round_id
    world.bus.add_node("collector-restarted", opened.collector, start_at=world.bus.now + 1.0)
    world.bus.run_until(until=300.0, predicate=lambda: opened.collector.finished)
    outcome = opened.collector.node.outcome()
    assert outcome.completed and outcome.registered == N and outcome.rows.shape[0] == N
    after = store.load_round(world.service.round_id)
    assert after.phase == "done" and len(after.registrations) == N
    # What was committed before the crash is still there, byte for byte.
    assert after.registrations[:len(before.registrations)] == before.registrations
    assert len(after.roster) == N and len(after.assignments) == N and len(after.verdicts) == N
    out = store.export_release(after.round_id, tmp_path / "release.csv")
    assert len(out.read_text().splitlines()) == N + 1


def test_a_round_this_coutil_would_announce_otherwise_is_aborted_not_resumed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run's membership digest starts from the announce's digest (SPEC §8.4): a round resumed under
    another announce than the one its subjects registered on (a coutil upgraded between the crash and the
    restart, whose manifest lists another field) would be a split view in every run. It is aborted."""
    world = _world(tmp_path)
    assert world.bus.run_until(until=100.0, predicate=lambda: BOUNDARIES["registration"](world)) == "predicate"
    store = _crash(world)
    manifest = RoundConfig.manifest
    monkeypatch.setattr(RoundConfig, "manifest", lambda self: (*manifest(self), ("added_later", "1")))
    opened = open_round(store, world.secret, CONFIG, world.bus.now + 1.0)
    assert opened.how.startswith("new after aborting") and "announce it otherwise" in opened.how
    assert opened.collector.round_id != world.service.round_id
    assert store.load_round(world.service.round_id).phase == "aborted"


@pytest.mark.parametrize("boundary", ["sharing", "released", "auditing"])
def test_crash_after_registration_aborts_cleanly_and_announces_a_new_round(tmp_path: Path, boundary: str) -> None:
    world = _world(tmp_path)
    assert world.bus.run_until(until=300.0, predicate=lambda: BOUNDARIES[boundary](world)) == "predicate"
    round_id = world.service.round_id
    store = _crash(world)
    before = store.load_round(round_id)
    assert before.phase == ("sharing" if boundary == "sharing" else "auditing")

    # Written before they were published: the roster (sorted keys, root, signed roster) and every
    # subject's group with her signed assign, each checkable against the roster.
    keys = sorted(s.public_key for s in world.subjects)
    assert before.roster == tuple(keys) and before.roster_payload is not None
    roster = codec.decode(before.roster_payload).message
    assert isinstance(roster, Roster) and roster.merkle_root == before.roster_root and roster.n == N
    assert set(before.assignments) == set(keys)
    for key, payload in before.assignment_payloads.items():
        assign = codec.decode(payload).message
        assert isinstance(assign, Assign) and assign.subject == key and assign.group == before.assignments[key]
        registration = next(codec.decode(r.payload).message for r in before.registrations if r.subject_key == key)
        assert isinstance(registration, Register)
        commitment = merkle.qi_commitment(registration.salt, registration.qi)
        assert merkle.verify_inclusion(merkle.roster_leaf(key, commitment), assign.leaf_index, N, assign.proof,
                                       before.roster_root)
    if boundary == "sharing":
        assert before.release_payload is None and before.verdicts == ()
    else:
        assert before.release_payload is not None and before.release_csv is not None
        release = codec.decode(before.release_payload).message
        assert isinstance(release, Release) and sum(release.group_sizes) == N
        assert len(before.release_csv.splitlines()) == N + 1
    if boundary == "auditing":
        assert len(before.verdicts) >= N // 2

    opened = open_round(store, world.secret, CONFIG, world.bus.now + 1.0)
    assert opened.how == f"new after aborting {round_id.hex()}"
    new = opened.collector
    assert new.round_id != round_id
    new.start(world.bus.now + 1.0)
    aborted = store.load_round(round_id)
    assert aborted.phase == "aborted" and aborted.phase_history[-1][0] == "aborted"
    assert _rows(aborted) == _rows(before)  # every stored row intact
    fresh = store.load_round(new.round_id)
    assert fresh.phase == "registration" and fresh.announce is not None
    latest = store.latest_round()
    assert latest is not None and latest.round_id == new.round_id
    target = tmp_path / "release.csv"
    if boundary == "sharing":
        with pytest.raises(InputError, match="no release"):
            store.export_release(round_id, target)
    else:
        store.export_release(round_id, target)
        assert target.read_text() == before.release_csv
    assert store.integrity_ok()


def test_the_service_reads_only_public_node_api() -> None:
    """No ``node._private`` access in the service (the rewrite's point; a grep that can fail)."""
    import re

    from coutil.collector import service

    source = Path(service.__file__).read_text(encoding="utf-8")
    assert not re.findall(r"node\._\w+", source)
    assert re.findall(r"node\._\w+", "x = self.node._registrations")  # the check can fail
