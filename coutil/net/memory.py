"""An in-memory publish/subscribe bus that drives sans-IO nodes in virtual time.

The bus plays the MQTT broker and the network at once, for tests and simulations: nodes publish
`Outgoing` messages, the bus routes each one to every node whose *current* subscriptions match
its topic (the publisher included, as MQTT does), keeps the last retained message per topic and
delivers it on subscribe, and fires every node's timer. Nothing sleeps: a heap of timed events
is popped in order, so a round of 10^5 subjects that spans minutes of protocol time runs as fast
as the nodes compute.

The network model is seeded and deterministic: the same seed and the same nodes give the same
delivery log. Each node has its own link latency to the broker (drawn once from the seed), so a
pair's delay is ``uplink(sender) + downlink(receiver) + jitter``; jitter reorders messages. Loss
and duplication are drawn per delivery. Partitions cut a set of nodes off during ``[start, end)``
and a vanish plan makes a node stop sending and receiving for good at a given time (a crash or a
subject who walks away mid-shuffle). A partitioned node that has ``on_transport``
(`coutil.protocol.node.TransportAware`) is told when its partition begins and ends, as the MQTT
driver tells a node that its connection dropped and came back.

A deviating broker (`coutil.adversary.broker`, the bus's ``broker``) is consulted for every
publication and delivery: it may drop, delay, copy or replace a message and publish bytes of its own;
for every delivery it made, the bus tells it what the receiver rejected (`BrokerStrategy.observe`).

Routing scales to 10^5 nodes: subscriptions live in a `coutil.net.routing.SubscriptionIndex`
(exact topics in a dict; only the few wildcard filters, the collector's, matched one by one).
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from coutil.adversary.broker import BrokerStrategy
from coutil.net.routing import SubscriptionIndex, is_wildcard
from coutil.protocol import topics
from coutil.protocol.node import Event, Node, Outgoing, Publication, transport_hook

#: Default safety cap on processed events in one `run_until` call.
DEFAULT_MAX_EVENTS = 50_000_000

# Heap entry kinds (ints: cheaper to compare than strings when times tie).
_START, _DELIVER, _TIMER, _TRANSPORT, _INJECT = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Partition:
    """The nodes in ``nodes`` can neither send nor receive during ``[start, end)``."""

    nodes: frozenset[str]
    start: float
    end: float

    def cuts(self, node_id: str, at: float) -> bool:
        return self.start <= at < self.end and node_id in self.nodes


@dataclass(frozen=True)
class NetworkModel:
    """Latency, jitter, loss and duplication of the simulated network (seconds, probabilities)."""

    #: Mean one-way delay between two nodes through the broker.
    latency: float = 0.05
    #: Extra uniform delay in ``[0, jitter)`` per delivery; reorders messages closer than this.
    jitter: float = 0.02
    #: Probability that one delivery is lost.
    loss: float = 0.0
    #: Probability that one delivery arrives twice (the copy with its own delay).
    duplicate: float = 0.0

    def __post_init__(self) -> None:
        for name in ("latency", "jitter"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a non-negative number of seconds")
        for name in ("loss", "duplicate"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name} must be a probability in [0, 1)")


@dataclass(frozen=True)
class BusFaults:
    """Fault injection: partitions and nodes that vanish (node id -> time it stops)."""

    partitions: tuple[Partition, ...] = ()
    vanish: Mapping[str, float] = field(default_factory=dict)


@dataclass
class Traffic:
    """Per-node counters, split into bulletin (announce/roster/release) and protocol messages."""

    sent_messages: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_bytes: int = 0
    bulletin_sent_messages: int = 0
    bulletin_sent_bytes: int = 0
    bulletin_received_messages: int = 0
    bulletin_received_bytes: int = 0


@dataclass(frozen=True)
class Delivery:
    """One message handed to a node (``receiver``) at virtual time ``at``."""

    at: float
    sender: str
    receiver: str
    topic: str
    size: int


class MemoryBus:
    """Drives `Node` objects in virtual time over a seeded, fault-injectable in-memory network."""

    def __init__(
        self,
        *,
        seed: int,
        network: NetworkModel | None = None,
        faults: BusFaults | None = None,
        record_publications: bool = False,
        record_deliveries: bool = False,
        record_events: bool = True,
        broker: BrokerStrategy | None = None,
    ) -> None:
        self.network = network if network is not None else NetworkModel()
        self.faults = faults if faults is not None else BusFaults()
        self._rng = np.random.default_rng(seed)
        self._uniform = np.empty(0)
        self._uniform_at = 0
        self.now = 0.0
        self._heap: list[tuple[float, int, int, int, object]] = []
        self._seq = 0
        self._ids: list[str] = []
        self._index: dict[str, int] = {}
        self._nodes: list[Node] = []
        self._link: list[float] = []
        self._subs: list[frozenset[str]] = []
        self._timer_at: list[float | None] = []
        self._vanish_at: list[float] = []
        #: Partitions cutting each node now (its transport is down while any does).
        self._cuts: list[int] = []
        self._routes: SubscriptionIndex[int] = SubscriptionIndex()
        self._retained: dict[str, tuple[int, bytes]] = {}
        self.traffic: dict[str, Traffic] = {}
        self.publications: list[Publication] | None = [] if record_publications else None
        self.deliveries: list[Delivery] | None = [] if record_deliveries else None
        self.events: list[tuple[str, Event]] | None = [] if record_events else None
        self.event_sink: Callable[[str, Event], None] | None = None
        self.dropped: dict[str, int] = {"loss": 0, "partition": 0, "vanished": 0}
        self.processed = 0
        #: A deviating broker (None: the bus routes honestly).
        self.broker = broker

    # ------------------------------------------------------------------ setup
    def add_node(self, node_id: str, node: Node, *, start_at: float = 0.0) -> None:
        """Register a node; its ``start`` is called at virtual time ``start_at``."""
        if node_id in self._index:
            raise ValueError(f"duplicate node id {node_id!r}")
        index = len(self._ids)
        self._ids.append(node_id)
        self._index[node_id] = index
        self._nodes.append(node)
        # Half the mean delay on each side of the broker, spread +-50% so links differ.
        self._link.append(self.network.latency * (0.25 + 0.5 * self._draw()))
        self._subs.append(frozenset())
        self._timer_at.append(None)
        self._vanish_at.append(float(self.faults.vanish.get(node_id, math.inf)))
        self.traffic[node_id] = Traffic()
        self._cuts.append(0)
        self._push(start_at, _START, index, None)
        for part in self.faults.partitions:
            if node_id in part.nodes and part.end > part.start:
                self._push(part.start, _TRANSPORT, index, False)
                self._push(part.end, _TRANSPORT, index, True)

    def vanish(self, node_id: str, at: float) -> None:
        """Make a node stop sending, receiving and firing timers from ``at`` on (if not earlier)."""
        index = self._index[node_id]
        self._vanish_at[index] = min(self._vanish_at[index], at)

    def node(self, node_id: str) -> Node:
        return self._nodes[self._index[node_id]]

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(self._ids)

    def vanished(self, node_id: str, at: float | None = None) -> bool:
        """Whether the node has vanished by ``at`` (default: now)."""
        return (self.now if at is None else at) >= self._vanish_at[self._index[node_id]]

    # ------------------------------------------------------------------ randomness
    def _draw(self) -> float:
        # Uniforms drawn in blocks: one numpy call per 4096 draws instead of one per delivery.
        if self._uniform_at >= len(self._uniform):
            self._uniform = self._rng.random(4096)
            self._uniform_at = 0
        value = float(self._uniform[self._uniform_at])
        self._uniform_at += 1
        return value

    # ------------------------------------------------------------------ heap
    def _push(self, at: float, kind: int, index: int, data: object) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, index, data))

    def _cut(self, index: int, at: float) -> str | None:
        if at >= self._vanish_at[index]:
            return "vanished"
        node_id = self._ids[index]
        for part in self.faults.partitions:
            if part.cuts(node_id, at):
                return "partition"
        return None

    # ------------------------------------------------------------------ routing
    def _schedule_delivery(self, sender: int, receiver: int, topic: str, payload: bytes, made: bool = False) -> None:
        net = self.network
        if net.loss and self._draw() < net.loss:
            self.dropped["loss"] += 1
            return
        copies = 2 if net.duplicate and self._draw() < net.duplicate else 1
        up = self._link[sender] if sender >= 0 else 0.0
        plan = None
        if self.broker is not None and not made:
            sender_id = self._ids[sender] if sender >= 0 else "broker"
            plan = self.broker.on_deliver(self.now, sender_id, self._ids[receiver], topic, payload)
        if plan is None:
            for _ in range(copies):
                delay = up + self._link[receiver] + net.jitter * self._draw()
                self._push(self.now + delay, _DELIVER, receiver, (sender, topic, payload, made))
            return
        for copy in plan:
            for _ in range(copies):
                delay = up + self._link[receiver] + net.jitter * self._draw() + copy.delay
                data = (sender, topic, payload if copy.payload is None else copy.payload, copy.made)
                self._push(self.now + delay, _DELIVER, receiver, data)

    def _publish(self, sender: int, out: Outgoing) -> None:
        reason = self._cut(sender, self.now)
        if reason is not None:
            self.dropped[reason] += 1
            return
        size = len(out.payload)
        traffic = self.traffic[self._ids[sender]]
        traffic.sent_messages += 1
        traffic.sent_bytes += size
        if topics.is_bulletin(out.topic):
            traffic.bulletin_sent_messages += 1
            traffic.bulletin_sent_bytes += size
        if self.publications is not None:
            record = Publication(self.now, self._ids[sender], out.topic, out.payload, out.retain)
            self.publications.append(record)
        if self.broker is not None:
            route, injections = self.broker.on_publish(self.now, self._ids[sender], out.topic, out.payload, out.retain)
            for injection in injections:
                self._push(self.now + injection.delay, _INJECT, sender, (injection.topic, injection.payload))
            if not route:
                return
        if out.retain:
            if out.payload:
                self._retained[out.topic] = (sender, out.payload)
            else:  # MQTT: an empty retained payload clears the topic
                self._retained.pop(out.topic, None)
        for receiver in sorted(self._routes.match(out.topic)):
            self._schedule_delivery(sender, receiver, out.topic, out.payload)

    def _update_subscriptions(self, index: int) -> None:
        node = self._nodes[index]
        new = node.subscriptions()
        old = self._subs[index]
        if new == old:
            return
        added = sorted(new - old)
        self._routes.update(index, added, old - new)
        self._subs[index] = new
        # Retained messages go to a new subscriber (once each, even if two new filters match).
        for topic in self._retained_matching(added):
            sender, payload = self._retained[topic]
            self._schedule_delivery(sender, index, topic, payload)

    def _retained_matching(self, filters: Iterable[str]) -> list[str]:
        found: set[str] = set()
        for topic_filter in filters:
            if is_wildcard(topic_filter):
                found.update(t for t in self._retained if topics.matches(topic_filter, t))
            elif topic_filter in self._retained:
                found.add(topic_filter)
        return sorted(found)

    def _after_call(self, index: int, outgoing: list[Outgoing]) -> None:
        node = self._nodes[index]
        node_id = self._ids[index]
        for event in node.drain_events():
            if self.events is not None:
                self.events.append((node_id, event))
            if self.event_sink is not None:
                self.event_sink(node_id, event)
        # Subscriptions first: a node that subscribes and publishes in one step hears the answer.
        self._update_subscriptions(index)
        for out in outgoing:
            self._publish(index, out)
        due = node.next_timer()
        if due is not None and due != self._timer_at[index]:
            self._timer_at[index] = due
            self._push(max(due, self.now), _TIMER, index, due)
        elif due is None:
            self._timer_at[index] = None

    # ------------------------------------------------------------------ running
    def step(self) -> bool:
        """Process the next event; False when nothing is left to do."""
        while self._heap:
            if self._step_top():
                return True
        return False

    def _step_top(self) -> bool:
        """Pop the earliest heap entry and act on it; False when it was stale (dropped, superseded)."""
        at, _, kind, index, data = heapq.heappop(self._heap)
        self.now = max(self.now, at)
        node = self._nodes[index]
        if kind == _START:
            self._update_subscriptions(index)
            self._after_call(index, node.start(self.now))
        elif kind == _INJECT:
            # The broker publishes bytes of its own: to whoever subscribes now, flagged as made.
            assert isinstance(data, tuple)
            topic, payload = data
            for receiver in sorted(self._routes.match(topic)):
                self._schedule_delivery(-1, receiver, topic, payload, made=True)
            return False
        elif kind == _DELIVER:
            assert isinstance(data, tuple)
            sender, topic, payload, made = data
            reason = self._cut(index, self.now)
            if reason is not None:
                self.dropped[reason] += 1
                return False
            traffic = self.traffic[self._ids[index]]
            traffic.received_messages += 1
            traffic.received_bytes += len(payload)
            if topics.is_bulletin(topic):
                traffic.bulletin_received_messages += 1
                traffic.bulletin_received_bytes += len(payload)
            if self.deliveries is not None:
                sender_id = self._ids[sender] if sender >= 0 else "broker"
                receiver_id = self._ids[index]
                self.deliveries.append(Delivery(self.now, sender_id, receiver_id, topic, len(payload)))
            if made and self.broker is not None:
                # What the receiver made of the broker's own delivery: the rejections it recorded.
                rejections = getattr(node, "rejections", None)
                tally = getattr(rejections, "tally", None)  # a `RejectionLog` counts beyond what it keeps
                before = Counter(tally) if tally is not None else None
                kept_before = len(rejections) if rejections is not None else 0
                outgoing = node.receive(topic, payload, self.now)
                if tally is not None and before is not None:
                    new = [pair for pair, count in (tally - before).items() for _ in range(count)]
                else:  # a plain list (a node wrapping another, e.g. the collector service's)
                    new = [(str(r.reason), bool(r.ignored)) for r in (rejections or [])[kept_before:]]
                self.broker.observe(self._ids[index], topic, payload, new)
                self._after_call(index, outgoing)
            else:
                self._after_call(index, node.receive(topic, payload, self.now))
        elif kind == _TRANSPORT:
            if self.now >= self._vanish_at[index]:
                return False
            was_down = self._cuts[index] > 0
            self._cuts[index] += -1 if data else 1
            hook = transport_hook(node)
            if hook is None or was_down == (self._cuts[index] > 0):
                return False
            self._after_call(index, hook(self._cuts[index] == 0, self.now))
        else:
            # A timer entry is stale when the node has re-armed it since; vanished nodes are dead.
            if data != self._timer_at[index] or self.now >= self._vanish_at[index]:
                return False
            self._timer_at[index] = None
            self._after_call(index, node.on_timer(self.now))
        self.processed += 1
        return True

    def run_until(
        self,
        until: float | None = None,
        predicate: Callable[[], bool] | None = None,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
    ) -> str:
        """Run until virtual time ``until``, ``predicate()`` is true, or the queue empties.

        Returns why it stopped: ``"predicate"``, ``"time"``, ``"idle"`` or ``"max_events"`` (the
        safety cap, which catches a node that re-arms a timer in the past forever).
        """
        for _ in range(max_events):
            if predicate is not None and predicate():
                return "predicate"
            if not self._heap:
                return "idle"
            if until is not None and self._heap[0][0] > until:
                self.now = max(self.now, until)
                return "time"
            self.step()
        return "max_events"

    @property
    def pending(self) -> int:
        """Queued events (deliveries in flight, timers, starts)."""
        return len(self._heap)
