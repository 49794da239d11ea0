"""Messages for many hosted nodes are handed out in chunks, between which the event loop runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions
from coutil.protocol.node import Outgoing
from tests.net.helpers import IdleNode, Mosquitto

MESSAGES = 12


class LoopTurns:
    """Node calls since the event loop last ran something else (reset by a task that yields)."""

    def __init__(self) -> None:
        self.in_a_row = 0
        self.most_in_a_row = 0

    def call(self) -> None:
        self.in_a_row += 1
        self.most_in_a_row = max(self.most_in_a_row, self.in_a_row)

    async def run(self) -> None:
        while True:
            self.in_a_row = 0
            await asyncio.sleep(0)


class Receiver(IdleNode):
    """Listens to the shared topic and to its own; records the sequence numbers in arrival order."""

    def __init__(self, name: int, turns: LoopTurns) -> None:
        self.name = name
        self.client_id = f"receiver-{name}"
        self.turns = turns
        self.seen: list[int] = []

    def subscriptions(self) -> frozenset[str]:
        return frozenset({"toy/all", f"toy/one/{self.name}"})

    def start(self, now: float) -> list[Outgoing]:
        # Leaves after the SUBACK of the subscriptions above (the flusher syncs them first); retained,
        # as the sender's connection may subscribe after it.
        return [Outgoing(f"toy/ready/{self.name}", b"ready", retain=True)]

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self.turns.call()
        self.seen.append(int(payload))
        return []


class Sender(IdleNode):
    """Once every receiver is ready: messages 0, 1, ... alternately to all receivers and to one."""

    client_id = "sender"

    def __init__(self, receivers: int) -> None:
        self.receivers = receivers
        self.ready: set[str] = set()

    def subscriptions(self) -> frozenset[str]:
        return frozenset({"toy/ready/+"})

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        if topic in self.ready:
            return []
        self.ready.add(topic)
        if len(self.ready) < self.receivers:
            return []
        return [Outgoing("toy/all" if i % 2 == 0 else f"toy/one/{i % self.receivers}", str(i).encode())
                for i in range(MESSAGES)]


@pytest.mark.broker
def test_a_message_for_many_nodes_is_handed_out_in_chunks_and_in_order(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    turns = LoopTurns()
    receivers = [Receiver(i, turns) for i in range(7)]
    expected = {r.name: [i for i in range(MESSAGES) if i % 2 == 0 or i % len(receivers) == r.name]
                for r in receivers}

    async def main() -> None:
        ticker = asyncio.create_task(turns.run())
        try:
            await host_nodes([Sender(len(receivers)), receivers], broker.url,
                             stop_when=lambda: all(r.seen == expected[r.name] for r in receivers),
                             timeout=30, options=DriverOptions(delivery_chunk=3))
        finally:
            ticker.cancel()

    try:
        asyncio.run(main())
    finally:
        broker.stop()
    # Every receiver got its messages once each, in the order sent (the odd ones, for one receiver,
    # queued behind the chunked even ones), and never more than a chunk of calls without a loop turn.
    assert {r.name: r.seen for r in receivers} == expected
    assert 0 < turns.most_in_a_row <= 3
