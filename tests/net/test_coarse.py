"""Covering subscriptions of multiplexed connections, and the embedded broker in its own process.

With ``DriverOptions.coarse_subscriptions`` a connection hosting many nodes subscribes at the broker
to one cover per round and kind of topic and routes locally: each node must still get exactly the
messages of its own subscriptions, and a node that subscribes after the connection already holds a
retained bulletin must still be handed it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import pytest

from coutil.errors import NetworkError
from coutil.net.broker import EmbeddedBroker, EmbeddedBrokerConfig
from coutil.net.broker_process import BrokerProcess
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions
from coutil.protocol import topics
from coutil.protocol.node import Event, Outgoing

ROUND = "ab" * 16


def test_covering_filters_group_topics_by_round_and_kind() -> None:
    assert topics.covering_filter(f"coutil/v2/{ROUND}/c/to/0011") == f"coutil/v2/{ROUND}/c/#"
    assert topics.covering_filter(f"coutil/v2/{ROUND}/c/roster") == f"coutil/v2/{ROUND}/c/#"
    assert topics.covering_filter(f"coutil/v2/{ROUND}/c/group/3") == f"coutil/v2/{ROUND}/c/#"
    assert topics.covering_filter(f"coutil/v2/{ROUND}/s/0011/group") == f"coutil/v2/{ROUND}/s/+/group"
    assert topics.covering_filter(f"coutil/v2/{ROUND}/s/0011/up") == f"coutil/v2/{ROUND}/s/+/up"
    assert topics.covering_filter(f"coutil/v2/{ROUND}/s/+/to/0011") == f"coutil/v2/{ROUND}/s/+/to/+"
    assert topics.covering_filter(topics.ANNOUNCE) == topics.ANNOUNCE
    assert topics.covering_filter("other/app/x/c/y") == "other/app/x/c/y"
    for topic_filter in (f"coutil/v2/{ROUND}/c/to/0011", f"coutil/v2/{ROUND}/s/0011/group"):
        assert topics.matches(topics.covering_filter(topic_filter), topic_filter)


class Listener:
    """Wants its own inbox and, once it has seen its first inbox message, the retained roster."""

    def __init__(self, name: str, late_roster: bool) -> None:
        self.client_id = name
        self.inbox = f"coutil/v2/{ROUND}/c/to/{name}"
        self.late_roster = late_roster
        self.received: list[tuple[str, bytes]] = []
        self.finished = False

    def subscriptions(self) -> frozenset[str]:
        wanted = {self.inbox}
        if not self.late_roster or self.received:
            wanted.add(f"coutil/v2/{ROUND}/c/roster")
        return frozenset(wanted)

    def start(self, now: float) -> list[Outgoing]:
        return []

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self.received.append((topic, payload))
        topics_seen = {t for t, _ in self.received}
        self.finished = {self.inbox, f"coutil/v2/{ROUND}/c/roster"} <= topics_seen
        return []

    def next_timer(self) -> float | None:
        return None

    def on_timer(self, now: float) -> list[Outgoing]:
        return []

    def drain_events(self) -> list[Event]:
        return []


class Sender:
    """Publishes the retained roster, then one message to each listener's inbox, re-sent every 0.2 s."""

    def __init__(self, names: Sequence[str]) -> None:
        self.client_id = "sender"
        self.names = names
        self.finished = False
        self._due = 0.0

    def subscriptions(self) -> frozenset[str]:
        return frozenset()

    def start(self, now: float) -> list[Outgoing]:
        self._due = now
        return [Outgoing(f"coutil/v2/{ROUND}/c/roster", b"roster", retain=True)]

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        return []

    def next_timer(self) -> float | None:
        return self._due

    def on_timer(self, now: float) -> list[Outgoing]:
        self._due = now + 0.2
        return [Outgoing(f"coutil/v2/{ROUND}/c/to/{name}", name.encode()) for name in self.names]

    def drain_events(self) -> list[Event]:
        return []


@pytest.mark.parametrize("coarse", [True, False])
def test_each_hosted_node_gets_its_own_messages_and_the_bulletins(coarse: bool) -> None:
    names = ["n0", "n1", "n2", "n3"]
    listeners = [Listener(name, late_roster=i % 2 == 1) for i, name in enumerate(names)]
    sender = Sender(names)

    async def main() -> None:
        async with EmbeddedBroker() as broker:
            await host_nodes([sender, list(listeners)], broker.url, timeout=20,
                             stop_when=lambda: all(node.finished for node in listeners),
                             options=DriverOptions(coarse_subscriptions=coarse))

    asyncio.run(main())
    for listener in listeners:
        assert listener.finished, (listener.client_id, listener.received)
        for topic, payload in listener.received:
            assert topic in (listener.inbox, f"coutil/v2/{ROUND}/c/roster")
            assert payload in (listener.client_id.encode(), b"roster")


def test_broker_process_serves_and_ends() -> None:
    names = ["a", "b"]
    listeners = [Listener(name, late_roster=False) for name in names]

    async def main() -> int:
        broker = BrokerProcess()
        async with broker:
            process = broker._process
            await host_nodes([Sender(names), list(listeners)], broker.url, timeout=20,
                             stop_when=lambda: all(node.finished for node in listeners),
                             options=DriverOptions(coarse_subscriptions=True))
        assert process is not None and not process.is_alive()
        return int(process.pid)

    pid = asyncio.run(main())
    assert all(listener.finished for listener in listeners)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_broker_process_on_a_taken_port_is_a_network_error() -> None:
    async def main() -> None:
        async with EmbeddedBroker() as first:
            with pytest.raises(NetworkError, match="cannot listen"):
                await BrokerProcess(EmbeddedBrokerConfig(port=first.port)).start()

    asyncio.run(main())
