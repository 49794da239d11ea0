"""Subject nodes on a real broker: read the retained announce, then take part in the round.

A subject must know the collector's key before she registers (she verifies every collector message
with it). `fetch_announce` reads the retained announce once; with ``expected_key`` the collector is
pinned (the key a survey team publishes out of band), without it the key is trusted on first use
and reported so that the user can compare it.

`host_subjects` then hosts the subjects until the round is over *for them*: each has her verdict
acknowledged, was excluded, or the collector ended the round (it withdrew its announce, or
announced another round), rather than until ``--timeout``. A `RoundWatch` says how it ended, and
notices a collector that stopped answering (silent for `SILENT_STEPS` step timeouts after the
registration deadline while subjects still wait for it).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiomqtt

from coutil.errors import InputError, NetworkError, RemoteProtocolError
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, parse_broker_url
from coutil.protocol import codec, topics
from coutil.protocol.config import MAX_QI_MAGNITUDE
from coutil.protocol.events import Event
from coutil.protocol.messages import Announce
from coutil.protocol.node import Node, Outgoing, RandomSource, SystemRandom
from coutil.protocol.states import SubjectState
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.protocol.subject_core import MIN_K


@dataclass(frozen=True)
class AnnouncedRound:
    round_id: bytes
    collector_key: bytes
    qi_names: tuple[str, ...]
    confidential_names: tuple[str, ...]
    k: int
    register_deadline: float
    #: The round's per-step timeout (seconds): how long the collector may legitimately stay silent.
    step_timeout: float = 20.0


async def fetch_announce(broker: str | BrokerAddress, *, timeout: float = 30.0,
                         expected_key: bytes | None = None) -> AnnouncedRound:
    """The current round, from the retained announce (waits up to ``timeout`` for one)."""
    address = broker if isinstance(broker, BrokerAddress) else parse_broker_url(broker)
    try:
        async with aiomqtt.Client(address.host, address.port, username=address.username,
                                  password=address.password, tls_params=address.tls_parameters()) as client:
            await client.subscribe(topics.ANNOUNCE, qos=1)
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    payload = message.payload
                    if not isinstance(payload, bytes | bytearray):
                        continue
                    try:
                        decoded = codec.decode(bytes(payload), codec.Limits())
                    except RemoteProtocolError:
                        continue  # not a valid announce: keep waiting for one
                    announce = decoded.message
                    if not isinstance(announce, Announce):
                        continue
                    if expected_key is not None and announce.sender != expected_key:
                        continue  # an announce by someone else: not our collector
                    params = announce.params
                    return AnnouncedRound(announce.round_id, announce.sender, tuple(params.qi_names),
                                          tuple(params.confidential_names), int(params.k),
                                          float(params.register_deadline), float(params.step_timeout))
    except TimeoutError:
        raise NetworkError(f"no round announced on {address.display()} within {timeout:.0f} s") from None
    except aiomqtt.MqttError as exc:
        raise NetworkError(f"cannot reach the broker {address.display()}: {exc}") from None
    raise NetworkError(f"the broker {address.display()} closed the subscription")


def make_subjects(round_: AnnouncedRound, records: Sequence[tuple[Sequence[float], Sequence[float]]],
                  rng: RandomSource | None = None, min_k: int = MIN_K) -> list[SubjectNode]:
    """One node per (qi values, confidential values) record; keys from ``rng`` (the OS by default);
    ``min_k``: her own floor on k (SPEC §4 announce: a round announced below it, she does not join)."""
    rng = rng if rng is not None else SystemRandom()
    caches = SharedCaches()
    nodes = []
    for qi, confidential in records:
        if len(qi) != len(round_.qi_names) or len(confidential) != len(round_.confidential_names):
            raise InputError("a record does not have the announced attributes")
        if not all(math.isfinite(v) and abs(v) <= MAX_QI_MAGNITUDE for v in qi):
            raise InputError(f"a record has a QI value that is not finite or beyond {MAX_QI_MAGNITUDE:g}: the "
                             "collector refuses such a registration (SPEC §7.3)")
        nodes.append(SubjectNode(collector_key=round_.collector_key, qi=qi, confidential=confidential,
                                 rng=rng, caches=caches, min_k=min_k))
    return nodes


#: Once the collector has ended the round, subjects still waiting get this many seconds for the
#: messages already under way (a verdict acknowledgement) before they stop.
ROUND_OVER_GRACE = 3.0
#: The collector has stopped answering when, past the registration deadline, subjects still waiting
#: for it heard nothing from it for this many step timeouts (every phase after registration re-sends
#: or times out within one step; a release waits for the slowest group, a few steps).
SILENT_STEPS = 10


@dataclass
class RoundWatch:
    """How hosting the subjects of one announced round ended, as `host_subjects` observed it.

    ``ended_by`` is "finished" (every subject's round is over: verdict acknowledged, excluded,
    incompatible), "round_over" (the collector withdrew its announce or announced another round),
    "late" (its registration closed while every hosted subject still waited for the announce: none takes part),
    "collector_silent" (see `SILENT_STEPS`) or "timeout" (``--timeout`` passed first).
    """

    round: AnnouncedRound
    clock: Callable[[], float] = time.time
    ended_by: str = "timeout"
    #: When the collector ended the round (clock time), if it did.
    over_at: float | None = None
    last_heard: float = field(default=0.0)
    #: A hosted subject got past registration (roster or assignment): the deadline no longer matters.
    registration_closed: bool = False
    #: A hosted subject took the announce (she registers, or does not take part for a reason of hers).
    announce_taken: bool = False
    #: A hosted subject's registration was acknowledged (or she got past it, or does not take part).
    registered: bool = False
    #: When her round's roster first reached a hosted subject whose registration was not acknowledged.
    roster_before_ack: float | None = None
    #: Called while the subjects are hosted, after their nodes handled something (`subject join` keeps her evidence).
    on_progress: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        self.last_heard = self.clock()

    @property
    def silence_limit(self) -> float:
        return SILENT_STEPS * self.round.step_timeout

    def heard(self) -> None:
        self.last_heard = self.clock()

    def on_announce(self, payload: bytes) -> None:
        """An announce (or its withdrawal: an empty payload) seen while the round runs."""
        if self.over_at is not None:
            return
        if payload:
            try:
                announce = codec.decode(payload, codec.Limits()).message
            except RemoteProtocolError:
                return
            if not isinstance(announce, Announce) or announce.sender != self.round.collector_key:
                return
            if announce.round_id == self.round.round_id:
                self.heard()
                return
        self.over_at = self.clock()

    def late(self) -> bool:
        """The round's registration closed (by her clock, the one her node judges the announce by) while every hosted
        subject still waited for the announce: it is `late` to each of them (SPEC §4 announce), none takes part.
        Found by an attacker of a subject's host across restarts: one who joined again mid-round waited ten step
        timeouts and was told that the collector stopped answering (it says nothing to one who never registered).
        Likewise when the collector closed registration before its deadline (``--expected`` subjects registered):
        the roster came and, a step timeout later (an acknowledgement delayed, or lost and sent again), still none."""
        now = self.clock()
        if not self.announce_taken and now > self.round.register_deadline:
            return True
        return not self.registered and self.roster_before_ack is not None \
            and now - self.roster_before_ack > self.round.step_timeout

    def collector_silent(self) -> bool:
        now = self.clock()
        since = self.last_heard if self.registration_closed else max(self.last_heard, self.round.register_deadline)
        return now - since > self.silence_limit

    def describe(self) -> str:
        """One line for the user: why the subjects stopped before their round was over."""
        if self.ended_by == "collector_silent":
            return (f"the collector stopped answering: nothing from it for more than {self.silence_limit:.0f} s "
                    f"({SILENT_STEPS} step timeouts of {self.round.step_timeout:g} s) in round "
                    f"{self.round.round_id.hex()}")
        if self.ended_by == "late" and self.roster_before_ack is not None:
            return (f"round {self.round.round_id.hex()} closed its registration before you joined (its roster came "
                    "and your registration was never acknowledged, a step timeout since): you take no part; join the "
                    "collector's next round")
        if self.ended_by == "late":
            return (f"round {self.round.round_id.hex()} closed its registration before you joined (its deadline "
                    "passed, by this machine's clock): nothing of yours was sent; join the collector's next round")
        if self.ended_by == "round_over":
            return (f"the collector ended round {self.round.round_id.hex()} (aborted or finished) before it was "
                    "over here")
        if self.ended_by == "timeout":
            return f"round {self.round.round_id.hex()} was not over within --timeout"
        return f"round {self.round.round_id.hex()} is over"


def round_over_for(node: SubjectNode) -> bool:
    """The round is over for this subject: verdict acknowledged (done), excluded or incompatible.

    An excluded subject reaches ``done`` only if a release comes, which an aborted round never
    publishes: she does not wait for it.
    """
    return node.finished or node.state == SubjectState.EXCLUDED


_BEFORE_ROSTER = (SubjectState.AWAIT_ANNOUNCE, SubjectState.REGISTERING, SubjectState.REGISTERED)


class _WatchedSubject:
    """A subject as hosted: the node itself, plus what the `RoundWatch` needs to see (whether the
    collector still speaks; for one subject of the connection, the announce topic)."""

    def __init__(self, node: SubjectNode, watch: RoundWatch, listen_announce: bool) -> None:
        self.node = node
        self.client_id = node.client_id
        self._watch = watch
        self._listen = listen_announce
        self._subs_of: frozenset[str] | None = None
        self._subs: frozenset[str] = frozenset()

    @property
    def finished(self) -> bool:
        return self.node.finished

    def subscriptions(self) -> frozenset[str]:
        subs = self.node.subscriptions()
        if not self._listen:
            return subs
        if subs is not self._subs_of:
            self._subs_of = subs
            self._subs = subs | {topics.ANNOUNCE}
        return self._subs

    def start(self, now: float) -> list[Outgoing]:
        return self.node.start(now)

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        if topic == topics.ANNOUNCE:
            if self._listen:
                self._watch.on_announce(payload)
            if self.node.state != SubjectState.AWAIT_ANNOUNCE:
                return []  # not hers to handle any more (she subscribes to it only before registering)
        elif "/c/" in topic:
            self._watch.heard()
        out = self.node.receive(topic, payload, now)
        watch, state = self._watch, self.node.state
        if not watch.announce_taken and state != SubjectState.AWAIT_ANNOUNCE:
            watch.announce_taken = True
        if not watch.registered and state not in (SubjectState.AWAIT_ANNOUNCE, SubjectState.REGISTERING):
            watch.registered = True
        if state == SubjectState.REGISTERING and watch.roster_before_ack is None \
                and topic == topics.roster(watch.round.round_id):
            watch.roster_before_ack = watch.clock()
        if not self._watch.registration_closed and self.node.state not in _BEFORE_ROSTER:
            self._watch.registration_closed = True
        return out

    def on_timer(self, now: float) -> list[Outgoing]:
        return self.node.on_timer(now)

    def next_timer(self) -> float | None:
        return self.node.next_timer()

    def drain_events(self) -> Sequence[Event]:
        return self.node.drain_events()


async def host_subjects(nodes: Sequence[SubjectNode], broker: str | BrokerAddress, *, timeout: float,
                        options: DriverOptions | None = None, shared_connection: bool = False,
                        watch: RoundWatch | None = None) -> HostStats:
    """Host the subjects until the round is over for each of them (`round_over_for`), the collector
    ended it or stopped answering (with ``watch``), or ``timeout`` passes; ``watch.ended_by`` says which.

    One MQTT connection per subject (her sid as client id, so a broker ACL can confine her to her
    own topics), or with ``shared_connection`` all of them multiplexed over one connection (no
    per-subject ACL possible; a group message then crosses the socket once, not once per member).
    """
    hosted: list[Node] = list(nodes)
    if watch is not None:
        hosted = [_WatchedSubject(node, watch, listen_announce=i == 0) for i, node in enumerate(nodes)]
    entries: list[Node | list[Node]] = [hosted] if shared_connection else list(hosted)
    remaining = list(nodes)

    def all_over() -> bool:
        # Nodes whose round is over stay so: drop them, so that the check does not rescan 10^4 nodes.
        while remaining and round_over_for(remaining[-1]):
            remaining.pop()
        return not remaining and all(round_over_for(n) for n in nodes)

    def stop() -> bool:
        if watch is not None and watch.on_progress is not None:
            watch.on_progress()
        if all_over():
            if watch is not None:
                watch.ended_by = "finished"
            return True
        if watch is None:
            return False
        if watch.over_at is not None and watch.clock() - watch.over_at >= ROUND_OVER_GRACE:
            watch.ended_by = "round_over"
            return True
        if watch.late():
            watch.ended_by = "late"
            return True
        if watch.collector_silent():
            watch.ended_by = "collector_silent"
            return True
        return False

    return await host_nodes(entries, broker, stop_when=stop, timeout=timeout, options=options)
