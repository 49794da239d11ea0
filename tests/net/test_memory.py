"""The in-memory bus, with toy nodes: routing, retained messages, wildcards, the network model
(loss, duplication, reordering), determinism, partitions, vanishing nodes and timers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import pytest
from scipy import stats

from coutil.net.memory import BusFaults, MemoryBus, NetworkModel, Partition
from coutil.protocol.node import Event, Outgoing
from coutil.protocol.topics import is_bulletin


@dataclass(frozen=True)
class Started(Event):
    KIND: ClassVar[str] = "started"


@dataclass
class ToyNode:
    """Subscribes to fixed filters, publishes a scripted list at start, records what it receives."""

    subs: frozenset[str] = frozenset()
    script: list[Outgoing] = field(default_factory=list)
    received: list[tuple[float, str, bytes]] = field(default_factory=list)
    timers: list[float] = field(default_factory=list)
    timer_plan: list[float] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)

    def subscriptions(self) -> frozenset[str]:
        return self.subs

    def start(self, now: float) -> list[Outgoing]:
        self.events.append(Started(now))
        return list(self.script)

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self.received.append((now, topic, payload))
        return []

    def on_timer(self, now: float) -> list[Outgoing]:
        self.timers.append(now)
        self.timer_plan.pop(0)
        return []

    def next_timer(self) -> float | None:
        return self.timer_plan[0] if self.timer_plan else None

    def drain_events(self) -> list[Event]:
        events, self.events = self.events, []
        return events

    @property
    def finished(self) -> bool:
        return False


def test_delivery_to_subscribers_only_and_to_subscribed_publisher() -> None:
    bus = MemoryBus(seed=1)
    payload = b"hello"
    sender = ToyNode(subs=frozenset({"a/b"}), script=[Outgoing("a/b", payload)])
    listener = ToyNode(subs=frozenset({"a/b"}))
    other = ToyNode(subs=frozenset({"a/c"}))
    # Subscribers first: at equal start times nodes start in insertion order, as on a real broker a
    # message published before a subscription exists is not delivered to it.
    for name, node in (("l", listener), ("o", other), ("s", sender)):
        bus.add_node(name, node)
    assert bus.run_until() == "idle"
    assert [p for _, _, p in listener.received] == [payload]
    assert listener.received[0][2] is payload  # the same bytes object, no copy
    assert [p for _, _, p in sender.received] == [payload]  # MQTT: the publisher is subscribed too
    assert other.received == []
    assert bus.traffic["s"].sent_messages == 1 and bus.traffic["s"].sent_bytes == 5
    assert bus.traffic["l"].received_messages == 1
    assert [e.kind for _, e in (bus.events or [])] == ["started"] * 3


def test_retained_message_reaches_late_subscriber_and_empty_clears() -> None:
    bus = MemoryBus(seed=2)
    bus.add_node("pub", ToyNode(script=[Outgoing("coutil/v2/announce", b"v1", retain=True),
                                        Outgoing("coutil/v2/announce", b"v2", retain=True),
                                        Outgoing("x/y", b"not retained")]))
    late = ToyNode(subs=frozenset({"coutil/v2/announce", "x/y"}))
    bus.add_node("late", late, start_at=5.0)
    bus.run_until()
    assert [p for _, _, p in late.received] == [b"v2"]
    assert late.received[0][0] >= 5.0
    assert is_bulletin("coutil/v2/announce") and not is_bulletin("coutil/v2/r/s/x/up")
    assert bus.traffic["late"].bulletin_received_messages == 1

    bus2 = MemoryBus(seed=2)
    bus2.add_node("pub", ToyNode(script=[Outgoing("t", b"v1", retain=True), Outgoing("t", b"", retain=True)]))
    late2 = ToyNode(subs=frozenset({"t"}))
    bus2.add_node("late", late2, start_at=5.0)
    bus2.run_until()
    assert late2.received == []


def test_wildcard_filters() -> None:
    bus = MemoryBus(seed=3)
    plus = ToyNode(subs=frozenset({"r/s/+/up"}))
    hash_ = ToyNode(subs=frozenset({"r/#"}))
    bus.add_node("plus", plus)
    bus.add_node("hash", hash_)
    bus.add_node("pub", ToyNode(script=[Outgoing("r/s/ab/up", b"1"), Outgoing("r/s/ab/group", b"2"),
                                        Outgoing("q/s/ab/up", b"3")]))
    bus.run_until()
    assert sorted(p for _, _, p in plus.received) == [b"1"]
    assert sorted(p for _, _, p in hash_.received) == [b"1", b"2"]


def _blast(seed: int, network: NetworkModel, count: int = 4000) -> tuple[ToyNode, MemoryBus]:
    bus = MemoryBus(seed=seed, network=network, record_deliveries=True)
    script = [Outgoing("t", i.to_bytes(4, "big")) for i in range(count)]
    sink = ToyNode(subs=frozenset({"t"}))
    bus.add_node("sink", sink)
    bus.add_node("pub", ToyNode(script=script))
    bus.run_until()
    return sink, bus


def test_loss_and_duplication_rates_match_configuration() -> None:
    count = 4000
    sink, bus = _blast(7, NetworkModel(loss=0.1, duplicate=0.05), count)
    lost = bus.dropped["loss"]
    # Two-sided binomial tests at a strict level: the configured rates must be plausible.
    assert stats.binomtest(lost, count, 0.1).pvalue > 1e-4
    delivered = len(sink.received)
    duplicates = delivered - len({p for _, _, p in sink.received})
    assert stats.binomtest(duplicates, count - lost, 0.05).pvalue > 1e-4
    assert duplicates > 0 and lost > 0


def test_jitter_reorders_and_zero_jitter_keeps_order() -> None:
    sink, _ = _blast(8, NetworkModel(latency=0.05, jitter=0.02), 500)
    order = [int.from_bytes(p, "big") for _, _, p in sink.received]
    assert sorted(order) == list(range(500)) and order != list(range(500))
    sink, _ = _blast(8, NetworkModel(latency=0.05, jitter=0.0), 500)
    assert [int.from_bytes(p, "big") for _, _, p in sink.received] == list(range(500))
    delays = [t for t, _, _ in sink.received]
    assert 0.0 < min(delays) <= max(delays) < 0.1


def test_same_seed_same_delivery_log_other_seed_differs() -> None:
    net = NetworkModel(loss=0.05, duplicate=0.05, jitter=0.03)
    _, first = _blast(11, net, 300)
    _, second = _blast(11, net, 300)
    _, third = _blast(12, net, 300)
    assert first.deliveries == second.deliveries
    assert first.deliveries != third.deliveries


def test_partition_drops_traffic_only_during_its_interval() -> None:
    faults = BusFaults(partitions=(Partition(frozenset({"cut", "cutpub"}), 1.0, 2.0),))
    bus = MemoryBus(seed=4, faults=faults)
    cut = ToyNode(subs=frozenset({"t"}))
    bus.add_node("cut", cut)
    listener = ToyNode(subs=frozenset({"t"}))
    bus.add_node("listener", listener)
    for i, at in enumerate((0.0, 1.2, 2.5)):
        bus.add_node(f"pub{i}", ToyNode(script=[Outgoing("t", bytes([i]))]), start_at=at)
    # A publisher inside the partition cannot send either.
    bus.add_node("cutpub", ToyNode(script=[Outgoing("t", b"x")]), start_at=1.5)
    bus.run_until()
    assert sorted(p for _, _, p in cut.received) == [b"\x00", b"\x02"]
    assert sorted(p for _, _, p in listener.received) == [b"\x00", b"\x01", b"\x02"]
    assert bus.dropped["partition"] >= 1


def test_vanished_node_stops_sending_receiving_and_timers() -> None:
    bus = MemoryBus(seed=5, faults=BusFaults(vanish={"gone": 1.0}))
    gone = ToyNode(subs=frozenset({"t"}), timer_plan=[0.5, 1.5, 3.0])
    bus.add_node("gone", gone)
    listener = ToyNode(subs=frozenset({"t"}))
    bus.add_node("listener", listener)
    bus.add_node("early", ToyNode(script=[Outgoing("t", b"early")]))
    bus.add_node("late", ToyNode(script=[Outgoing("t", b"late")]), start_at=2.0)
    bus.run_until()
    assert [p for _, _, p in gone.received] == [b"early"]
    assert gone.timers == [0.5]
    assert bus.vanished("gone") and not bus.vanished("listener")
    assert bus.traffic["gone"].received_messages == 1 and bus.dropped["vanished"] >= 1
    assert sorted(p for _, _, p in listener.received) == [b"early", b"late"]


def test_timers_fire_in_order_and_run_until_time_and_predicate() -> None:
    bus = MemoryBus(seed=6)
    node = ToyNode(timer_plan=[1.0, 2.0, 10.0])
    bus.add_node("n", node)
    assert bus.run_until(until=5.0) == "time"
    assert node.timers == [1.0, 2.0] and bus.now == 5.0
    assert bus.run_until(predicate=lambda: len(node.timers) == 3) == "predicate"
    assert node.timers == [1.0, 2.0, 10.0]
    assert bus.run_until() == "idle"


def test_event_cap_stops_a_runaway_timer() -> None:
    class Runaway(ToyNode):
        def next_timer(self) -> float | None:
            return 0.0  # always due: a buggy node

        def on_timer(self, now: float) -> list[Outgoing]:
            return []

    bus = MemoryBus(seed=1)
    bus.add_node("r", Runaway())
    assert bus.run_until(max_events=1000) == "max_events"


def test_network_model_validates() -> None:
    with pytest.raises(ValueError):
        NetworkModel(loss=1.5)
    with pytest.raises(ValueError):
        NetworkModel(latency=-1.0)
    bus = MemoryBus(seed=1)
    bus.add_node("a", ToyNode())
    with pytest.raises(ValueError):
        bus.add_node("a", ToyNode())


def test_vanish_scheduled_while_running() -> None:
    bus = MemoryBus(seed=9)
    node = ToyNode(subs=frozenset({"t"}))
    bus.add_node("n", node)
    bus.add_node("p1", ToyNode(script=[Outgoing("t", b"1")]), start_at=1.0)
    bus.add_node("p2", ToyNode(script=[Outgoing("t", b"2")]), start_at=3.0)
    bus.run_until(until=2.0)
    bus.vanish("n", 2.5)
    bus.run_until()
    assert [p for _, _, p in node.received] == [b"1"]


def test_subscription_index_matches_exact_and_wildcard_filters() -> None:
    from coutil.net.routing import SubscriptionIndex

    index: SubscriptionIndex[str] = SubscriptionIndex()
    index.update("a", ["coutil/v2/r/s/+/up", "x/y"], [])
    index.add("x/y", "b")
    index.add("x/#", "c")
    assert index.match("x/y") == {"a", "b", "c"}
    assert index.match("coutil/v2/r/s/abc/up") == {"a"}
    assert index.match("coutil/v2/r/s/abc/group") == set()
    index.update("a", [], ["x/y"])
    index.discard("x/#", "c")
    index.discard("never/added", "c")  # harmless
    assert index.match("x/y") == {"b"}
    index.clear()
    assert index.match("x/y") == set()
