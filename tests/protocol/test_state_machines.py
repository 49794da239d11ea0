"""Every (state, message type) pair of both state machines: a legal transition or a recorded rejection.

A small deterministic round (one false complainer, so that blame messages exist too) is recorded on
the in-memory bus. It is then replayed, bit for bit, up to the moment a node enters each of its
states, and that node is handed every kind of message the round produced (on its own topic and on a
wrong one), mutated copies of them, and random bytes. Properties:

- ``receive`` never raises, whatever it is given;
- a message type the state's transition table does not list is recorded as IGNORE ``unexpected``;
- a listed type is either accepted (no new rejection) or recorded as a rejection with a reason; an
  accepted message moves the node only along an edge of its ``STATE_EDGES`` (or keeps its state);
- a mutated message is a recorded rejection unless it decodes to the very same message;
- random bytes are always a recorded REJECT.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coutil.errors import RemoteProtocolError
from coutil.net.memory import MemoryBus, Publication
from coutil.protocol import codec, collector, crypto, subject, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import MESSAGE_TYPES, Fetch, Message, RunKeys, Vote
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.round.simulation import synthetic_dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)
N = 12
SEED = 11


class FalseComplainer(SubjectNode):
    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Vote) and message.run == 0 and message.go:
            message = dataclasses.replace(message, go=False)
            assert self._run is not None
            self._run.votes[self.public_key] = message  # she acts on the vote she published (and blames)
        return super()._emit(topic, message)


@dataclasses.dataclass
class Round:
    bus: MemoryBus
    collector: CollectorNode
    subjects: list[SubjectNode]
    incompatible: SubjectNode


def _build(complainer: int | None) -> Round:
    data = synthetic_dataset(N, CONFIG, SEED)
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    root = SeededRandom(SEED)
    rng = root.fork("collector")
    node = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                         round_id=root.fork("round").bytes(16))
    caches = SharedCaches()
    subjects = [
        (FalseComplainer if i == complainer else SubjectNode)(
            collector_key=node.public_key, qi=qi[i], confidential=conf[i], rng=root.fork(f"s{i}"), caches=caches,
            retry_interval=1.0)
        for i in range(N)
    ]
    # A subject whose record does not have the announced attributes (three QIs for a round of two).
    odd = SubjectNode(collector_key=node.public_key, qi=(1.0, 2.0, 3.0), confidential=(4.0,),
                      rng=root.fork("odd"), caches=caches)
    bus = MemoryBus(seed=SEED, record_publications=True)
    bus.add_node("collector", node)
    for s in [*subjects, odd]:
        bus.add_node(s.sid, s)
    return Round(bus, node, subjects, odd)


@functools.cache
def _plan() -> tuple[int, int]:
    """(the probed subject, the false complainer): two members of one group, found by a dry run."""
    dry = _build(None)
    dry.bus.run_until(until=500.0, predicate=lambda: dry.collector.finished)
    group_of = dry.collector._group_of
    target = 1
    mates = [i for i, s in enumerate(dry.subjects) if i != target
             and group_of[s.public_key] == group_of[dry.subjects[target].public_key]]
    return target, mates[0]


@functools.cache
def _samples() -> tuple[Publication, ...]:
    """Every distinct publication of a complete round with one false complainer, plus a fetch."""
    target, complainer = _plan()
    full = _build(complainer)
    full.bus.run_until(until=500.0, predicate=lambda: full.collector.finished)
    assert full.collector.finished and full.collector.outcome().completed
    seen: dict[bytes, Publication] = {}
    for publication in full.bus.publications or ():
        # Empty payloads (the announce withdrawn, a member's retained run_keys cleared) by topic kind.
        key = publication.payload or publication.topic.rpartition("/")[2].encode()
        seen.setdefault(key, publication)
    someone = full.subjects[target]
    assert someone._round_id is not None
    fetch = Fetch(someone._round_id, someone.public_key, "release")
    payload = codec.encode(fetch, someone._identity)
    seen[payload] = Publication(0.0, someone.sid, topics.subject_up(someone._round_id, someone.public_key),
                                payload, False)
    # The collector's withdrawal of its retained announce and a member's clearing of her retained
    # run_keys (empty payloads) are among the samples too.
    assert seen[b"announce"].payload == b"" and seen[b"announce"].topic == topics.ANNOUNCE
    assert seen[b"group"].payload == b"" and seen[b"group"].topic.endswith("/group")
    tags = {_tag(p.payload) for p in seen.values() if p.payload}
    assert tags == set(MESSAGE_TYPES), set(MESSAGE_TYPES) - tags
    return tuple(seen.values())


def _tag(payload: bytes) -> str:
    return codec.decode(payload).message.TAG


def _reach(role: str, state: str) -> tuple[Round, Any]:
    """Replay the recorded round until the probed node first enters ``state``."""
    target, complainer = _plan()
    replay = _build(complainer)
    candidates: list[Any] = {
        "collector": [replay.collector],
        # The probed subject first; any honest one for a state she passes through within one event.
        "subject": [replay.subjects[target], *(s for i, s in enumerate(replay.subjects) if i != complainer)],
        "complainer": [replay.subjects[complainer]],
        "incompatible": [replay.incompatible],
    }[role]
    if state not in ("created", "await_announce"):
        replay.bus.run_until(until=500.0, predicate=lambda: any(c.state == state for c in candidates))
    node = next((c for c in candidates if c.state == state), candidates[0])
    assert node.state == state, (role, state, node.state)
    return replay, node


SUBJECT_STATES = [("subject", s) for s in ("await_announce", "registering", "registered", "sharing",
                                          "await_release", "verdict_sent", "done")]
SUBJECT_STATES += [("complainer", "excluded"), ("incompatible", "incompatible")]
COLLECTOR_STATES = [("collector", s) for s in ("created", "registration", "sharing", "auditing", "done")]


def _probe(node: Any, table: Mapping[str, Mapping[type[Message], object]], edges: Mapping[str, tuple[str, ...]],
           topic: str, payload: bytes, now: float) -> None:
    before_state = node.state
    before = len(node.rejections)
    if not payload:
        # A withdrawn retained announce: one recorded rejection, ignored, and nothing changes; a member's
        # cleared run_keys on her group topic: not a message, nothing recorded, nothing changes. On any
        # other topic an empty payload is malformed.
        out = node.receive(topic, payload, now)
        cleared = topics.is_subject_group(topic)
        assert out == [] and len(node.rejections) == before + (0 if cleared else 1) and node.state == before_state
        return
    tag = _tag(payload)
    node.receive(topic, payload, now)  # never raises: that is the first property
    new = node.rejections[before:]
    assert len(new) <= 1, new
    if tag not in {cls.TAG for cls in table.get(before_state, {})}:
        assert [r.reason for r in new] in (["unexpected"], ["wrong_round"], ["early"]), (before_state, tag, new)
        assert all(r.ignored for r in new)
        assert node.state == before_state
    elif not new:
        assert node.state == before_state or node.state in edges[before_state], (before_state, tag, node.state)


@pytest.mark.parametrize(("role", "state"), SUBJECT_STATES + COLLECTOR_STATES)
def test_every_message_type_in_every_state(role: str, state: str) -> None:
    replay, node = _reach(role, state)
    module = collector if role == "collector" else subject
    now = replay.bus.now
    wrong_topic = "coutil/v2/not/a/topic"
    for publication in _samples():
        _probe(node, module.TRANSITIONS, module.STATE_EDGES, publication.topic, publication.payload, now)
        _probe(node, module.TRANSITIONS, module.STATE_EDGES, wrong_topic, publication.payload, now)


@pytest.mark.parametrize(("role", "state"), [("subject", "sharing"), ("subject", "verdict_sent"),
                                             ("collector", "registration"), ("collector", "sharing")])
def test_mutated_messages_are_rejections_or_the_same_message(role: str, state: str) -> None:
    replay, node = _reach(role, state)
    samples = [p for p in _samples() if p.payload]  # nothing to mutate in the empty withdrawal

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.integers(0, len(samples) - 1), st.data())
    def check(index: int, data: st.DataObject) -> None:
        publication = samples[index]
        mutated = bytearray(publication.payload)
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] ^= 1 << data.draw(st.integers(0, 7))
        before = len(node.rejections)
        node.receive(publication.topic, bytes(mutated), replay.bus.now)
        if len(node.rejections) == before:
            assert codec.decode(bytes(mutated)).message == codec.decode(publication.payload).message

    check()


@pytest.mark.parametrize(("role", "state"), [("subject", "sharing"), ("collector", "sharing")])
def test_random_bytes_are_recorded_rejections(role: str, state: str) -> None:
    replay, node = _reach(role, state)
    topic: Callable[[], str] = lambda: (topics.ANNOUNCE if role == "subject"  # noqa: E731
                                        else topics.all_subject_up(replay.collector.round_id).replace("+", "x"))

    @settings(max_examples=200, deadline=None)
    @given(st.binary(max_size=400))
    def check(data: bytes) -> None:
        before = len(node.rejections)
        node.receive(topic(), data, replay.bus.now)
        assert len(node.rejections) == before + 1
        rejection = node.rejections[-1]
        if not data and role == "subject":  # an empty retained announce is the collector's withdrawal
            assert rejection.ignored and rejection.reason == "withdrawn"
        else:
            assert not rejection.ignored and rejection.reason in codec.REASONS

    check()


def test_the_probe_can_fail() -> None:
    """A node that lets an exception escape, or accepts an unlisted type silently, fails the probe."""

    class Crashing:
        def __init__(self) -> None:
            self.state = "sharing"
            self.rejections: list[object] = []

        def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
            raise RemoteProtocolError("boom")

    class Silent(Crashing):
        def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
            return []

    payload = _samples()[0].payload
    with pytest.raises(RemoteProtocolError):
        _probe(Crashing(), {"sharing": {}}, {"sharing": ()}, "t", payload, 0.0)
    with pytest.raises(AssertionError):
        _probe(Silent(), {"sharing": {}}, {"sharing": ()}, "t", payload, 0.0)


def test_a_members_second_run_keys_is_a_duplicate_when_equal_and_equivocation_when_not() -> None:
    """The first copy of a member's step message is kept (`subject_core._keep_first`): the same bytes
    again are IGNORE ``duplicate``, another message for the same step REJECT ``equivocation``."""
    replay, node = _reach("subject", "sharing")
    replay.bus.run_until(until=500.0, predicate=lambda: node._run is not None
                         and len(node._run.keys) == len(node._run.members))
    run, group = node._run, node.group
    assert run is not None and group is not None and node._round_id is not None
    mate = next(s for s in replay.subjects if s.public_key in run.members and s.public_key != node.public_key)
    outer, inner = run.keys[mate.public_key]
    kept = RunKeys(node._round_id, mate.public_key, group, run.number, outer, inner, node._view_root(),
                   run.members_digest)
    topic = topics.subject_group(node._round_id, mate.public_key)
    before = len(node.rejections)
    node.receive(topic, codec.encode(kept, mate._identity), 600.0)
    other = dataclasses.replace(kept, outer_kx=crypto.KxKey.generate(SeededRandom(5)).public)
    node.receive(topic, codec.encode(other, mate._identity), 600.0)
    assert [(r.reason, r.ignored) for r in node.rejections[before:]] == [("duplicate", True), ("equivocation", False)]
    assert run.keys[mate.public_key] == (outer, inner)  # the first copy stays


def _sharing_member() -> tuple[Round, SubjectNode, SubjectNode]:
    """A subject holding every run key of her first run, and a fellow member of that run."""
    replay, node = _reach("subject", "sharing")
    replay.bus.run_until(until=500.0, predicate=lambda: node._run is not None
                         and len(node._run.keys) == len(node._run.members))
    run = node._run
    assert run is not None
    mate = next(s for s in replay.subjects if s.public_key in run.members and s.public_key != node.public_key)
    return replay, node, mate


def test_a_run_key_of_small_order_is_a_rejection_never_a_crash() -> None:
    """A key nobody can agree on a secret with (SPEC §8: libsodium's small-order points) is REJECT
    ``bad_key`` where it arrives, before anything is sealed to it; with the top bit set, too."""
    _, node, mate = _sharing_member()
    run, group = node._run, node.group
    assert run is not None and group is not None and node._round_id is not None
    for point in sorted(crypto._SMALL_ORDER):
        for top in (0, 0x80):
            bad = point[:31] + bytes([point[31] | top])
            assert crypto.is_small_order(bad)
            with pytest.raises(crypto.CryptoError):
                run.outer.exchange(bad)
    assert not crypto.is_small_order(run.outer.public)
    keys = RunKeys(node._round_id, mate.public_key, group, run.number, bytes([1]) + bytes(31), run.inner.public,
                   node._view_root(), run.members_digest)
    before = len(node.rejections)
    node.receive(topics.subject_group(node._round_id, mate.public_key), codec.encode(keys, mate._identity), 600.0)
    assert [r.reason for r in node.rejections[before:]] == ["bad_key"]


def test_on_a_topic_towards_her_a_member_takes_only_what_is_meant_for_her_alone() -> None:
    """A fellow member's run_keys or vote on her topic towards this member (or relayed on this member's
    inbox) would be a view of the run nobody else shares (a key split): REJECT ``topic_mismatch``."""
    _, node, mate = _sharing_member()
    run, group = node._run, node.group
    assert run is not None and group is not None and node._round_id is not None
    other = crypto.KxKey.generate(SeededRandom(9)).public
    keys = RunKeys(node._round_id, mate.public_key, group, run.number, run.keys[mate.public_key][0], other,
                   node._view_root(), run.members_digest)
    vote = Vote(node._round_id, mate.public_key, group, run.number, False, bytes(32), node._view_root(),
                run.members_digest, bytes(32))
    before = len(node.rejections)
    for message in (keys, vote):
        payload = codec.encode(message, mate._identity)
        node.receive(topics.subject_to(node._round_id, mate.public_key, node.public_key), payload, 600.0)
        node.receive(topics.inbox(node._round_id, node.public_key), payload, 600.0)
    assert [r.reason for r in node.rejections[before:]] == ["topic_mismatch"] * 4
    assert run.keys[mate.public_key][1] != other and mate.public_key not in run.votes


def test_collector_values_out_of_range_of_the_digests_and_a_small_order_round_key_are_no_crash() -> None:
    """A run number beyond 32 bits (the digests encode 64-bit integers, SPEC §8.4) is an ordinary
    (refused) run; an announce with a round key of small order, or with k below her floor, leaves the subject
    out (incompatible)."""
    from coutil.protocol.events import SubjectIncompatible
    from coutil.protocol.messages import Announce, ShuffleStart
    from coutil.protocol.states import SubjectState

    replay, node, _ = _sharing_member()
    assert node._round_id is not None and node.group is not None and node._run is not None
    identity = replay.collector._identity
    huge = ShuffleStart(node._round_id, identity.public, node.group, 2**40, node._run.members, (), 700.0)
    node.receive(topics.group_control(node._round_id, node.group), codec.encode(huge, identity), 600.0)
    assert node._run.number == 2**40  # a later run of her group: she takes part (nothing revealed yet)
    message = codec.decode(next(p.payload for p in _samples() if p.payload and _tag(p.payload) == "announce")).message
    assert isinstance(message, Announce)
    cases = ((message.params.collector_kx, SubjectState.REGISTERING), (bytes(32), SubjectState.INCOMPATIBLE))
    for collector_kx, state in cases:
        fresh = SubjectNode(collector_key=identity.public, qi=node._qi, confidential=node._confidential,
                            rng=SeededRandom(4))
        announce = dataclasses.replace(message, params=dataclasses.replace(message.params, collector_kx=collector_kx))
        fresh.receive(topics.ANNOUNCE, codec.encode(announce, identity), 0.0)
        assert fresh.state == state, (fresh.state, fresh.rejections)
    # k = 1 (every record released as it is): below her floor she does not take part, unless her own
    # floor is 1 (a simulation whose experimenter chose k = 1).
    one = dataclasses.replace(message, params=dataclasses.replace(message.params, k=1))
    for floor, state in ((None, SubjectState.INCOMPATIBLE), (1, SubjectState.REGISTERING)):
        extra = {} if floor is None else {"min_k": floor}
        fresh = SubjectNode(collector_key=identity.public, qi=node._qi, confidential=node._confidential,
                            rng=SeededRandom(4), **extra)
        out = fresh.receive(topics.ANNOUNCE, codec.encode(one, identity), 0.0)
        assert fresh.state == state and (out == []) == (state == SubjectState.INCOMPATIBLE)
        assert [e.reason for e in fresh.drain_events() if isinstance(e, SubjectIncompatible)] == \
            (["k_below_floor"] if floor is None else [])
    # An announce without the commitment to publish the run evidence (SPEC §4 announce, §8.5), or committing to an
    # older transcript: she does not take part, so that no honest subject's round can be downgraded.
    manifest = dict(message.params.manifest)
    assert manifest["transcript"] == "4"
    # "3": the run evidence, unsigned (two copies of its transcript would prove nothing, SPEC §8.5).
    for entry, state in ((None, SubjectState.INCOMPATIBLE), ("2", SubjectState.INCOMPATIBLE),
                         ("3", SubjectState.INCOMPATIBLE), ("\u2074", SubjectState.INCOMPATIBLE),
                         ("4", SubjectState.REGISTERING), ("5", SubjectState.REGISTERING)):
        entries = tuple((key, value) for key, value in message.params.manifest if key != "transcript")
        entries += () if entry is None else (("transcript", entry),)
        fresh = SubjectNode(collector_key=identity.public, qi=node._qi, confidential=node._confidential,
                            rng=SeededRandom(4))
        downgraded = dataclasses.replace(message, params=dataclasses.replace(message.params, manifest=entries))
        fresh.receive(topics.ANNOUNCE, codec.encode(downgraded, identity), 0.0)
        assert fresh.state == state, (entry, fresh.state)
        assert [e.reason for e in fresh.drain_events() if isinstance(e, SubjectIncompatible)] == \
            (["no_transcript_commitment"] if state == SubjectState.INCOMPATIBLE else [])


def _after_a_round(what: str) -> tuple[CollectorNode, SubjectNode, bytes, str, float, list[SubjectNode]]:
    """A finished honest round: its collector, one subject, her signed fetch of ``what``, her up topic, a time
    after the round, and all its subjects."""
    target, _ = _plan()
    played = _build(None)
    played.bus.run_until(until=500.0, predicate=lambda: played.collector.finished)
    collector, someone = played.collector, played.subjects[target]
    assert someone._round_id is not None
    payload = codec.encode(Fetch(someone._round_id, someone.public_key, what), someone._identity)
    return (collector, someone, payload, topics.subject_up(someone._round_id, someone.public_key),
            played.bus.now + 1.0, list(played.subjects))


def test_a_fetch_is_answered_once_per_half_retry_interval_not_once_per_copy() -> None:
    """A subject re-sending one signed fetch("release") in a loop had the collector publish the whole
    release to her inbox as often (84x her bytes at n = 200, found by an attacker): now the copies within
    half a retry interval of the same answer are IGNORE ``duplicate``; an honest subject asks again after a
    whole one and is answered (and a new answer, such as a merge's assign, would go at once)."""
    collector, _, payload, topic, now, _ = _after_a_round("release")
    answers = [collector.receive(topic, payload, now + i * 0.001) for i in range(100)]
    assert sum(len(a) for a in answers) == 1
    assert [r.reason for r in collector.rejections[-99:]] == ["duplicate"] * 99
    assert len(collector.receive(topic, payload, now + CONFIG.retry_interval)) == 1


def test_a_subject_fetching_the_roster_in_a_loop_has_it_broadcast_a_few_times_only() -> None:
    """A roster fetch is answered by publishing the roster again on its retained topic, to every subscriber
    (SPEC §4 group: her submission waits for it there). Found by an attacker: one subject fetching in a loop
    had it reach everyone every half retry interval (200-240 extra deliveries in 3.4 s at n = 40). Now one
    subject's fetches broadcast it at most `ROSTER_BROADCASTS_PER_ASKER` times per step timeout, and anyone's at
    most once per half retry interval; otherwise she gets it on her inbox (a hint)."""
    from coutil.protocol.collector import ROSTER_BROADCASTS_PER_ASKER

    collector, someone, payload, topic, now, subjects = _after_a_round("roster")
    assert someone._round_id is not None
    # Within one step timeout, a fetch every half retry interval (each answered: her copies are new fetches).
    count = int(CONFIG.step_timeout / (CONFIG.retry_interval / 2)) - 1
    answers = [out for i in range(count)
               for out in collector.receive(topic, payload, now + i * CONFIG.retry_interval / 2)]
    broadcasts = [o for o in answers if o.topic == topics.roster(someone._round_id)]
    assert len(broadcasts) == ROSTER_BROADCASTS_PER_ASKER and all(o.retain for o in broadcasts)
    inbox = [o for o in answers if o not in broadcasts]
    assert all(o.topic == topics.inbox(someone._round_id, someone.public_key) for o in inbox)
    assert len(inbox) >= count // 2  # the other fetches: her inbox only (a copy within half an interval: none)
    # The next step: her budget is back (deliveries lost for long), still capped.
    assert [o.topic for o in collector.receive(topic, payload, now + CONFIG.step_timeout + 1.0)] == \
        [topics.roster(someone._round_id)]
    # Two askers within half a retry interval: one broadcast between them (the other gets her inbox).
    other = next(s for s in subjects if s is not someone)
    later = now + 1000.0
    other_fetch = codec.encode(Fetch(someone._round_id, other.public_key, "roster"), other._identity)
    first = collector.receive(topics.subject_up(someone._round_id, other.public_key), other_fetch, later)
    again = collector.receive(topic, payload, later + CONFIG.retry_interval / 4)
    assert [o.topic for o in first] == [topics.roster(someone._round_id)]
    assert [o.topic for o in again] == [topics.inbox(someone._round_id, someone.public_key)]
