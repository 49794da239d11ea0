"""How hosting ends: every task ends, even one that swallows a cancellation, and what the nodes
queued as the stop condition held is acknowledged by the broker first.

Python 3.11's `asyncio.wait_for` (which aiomqtt awaits every subscribe and unsubscribe through) can
swallow a cancellation that arrives as the awaited future completes; a flusher cancelled at that
instant went back to waiting for work and its process never exited. These tests fail (time out)
with a plain ``cancel(); gather()``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiomqtt
import pytest

from coutil.net.broker import EmbeddedBroker
from coutil.net.hosting import cancel_and_wait, host_nodes
from coutil.net.mqtt import DriverOptions, HostStats
from coutil.protocol.node import Outgoing
from tests.net.helpers import IdleNode


async def _stubborn(swallowed: list[int]) -> None:
    """Swallows its first cancellation, as `wait_for` can, and goes on waiting for work."""
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        swallowed.append(1)
    await asyncio.Event().wait()


def test_a_task_that_swallows_a_cancellation_still_ends() -> None:
    swallowed: list[int] = []

    async def main() -> asyncio.Task[None]:
        task = asyncio.create_task(_stubborn(swallowed))
        plain = asyncio.create_task(asyncio.sleep(30))
        await asyncio.sleep(0.01)
        async with asyncio.timeout(5):
            await cancel_and_wait([task, plain])
        assert plain.cancelled()
        return task

    task = asyncio.run(main())
    assert swallowed == [1] and task.cancelled()


def test_cleanup_finishes_even_when_the_caller_is_cancelled_meanwhile() -> None:
    swallowed: list[int] = []

    async def main() -> None:
        inner = asyncio.create_task(_stubborn(swallowed))
        await asyncio.sleep(0.01)
        cleaning = asyncio.create_task(cancel_and_wait([inner]))
        await asyncio.sleep(0.01)
        cleaning.cancel()  # the caller is cancelled while its cleanup still waits
        async with asyncio.timeout(5):
            await asyncio.wait([cleaning])
        assert cleaning.cancelled()  # the cancellation is passed on...
        assert inner.done()  # ...after the task it was cleaning up ended

    asyncio.run(main())
    assert swallowed == [1]


def test_exceptions_of_cancelled_helpers_are_retrieved() -> None:
    """No "exception was never retrieved" warning for a helper that failed before the cleanup."""

    async def failing() -> None:
        raise ValueError("boom")

    async def main() -> asyncio.Task[None]:
        task = asyncio.create_task(failing())
        await asyncio.sleep(0.01)
        await cancel_and_wait([task])
        return task

    task = asyncio.run(main())
    assert isinstance(task.exception(), ValueError)
    assert task._log_traceback is False  # retrieved: asyncio will not log it


class _LastWords(IdleNode):
    """Publishes ``count`` messages when started and is finished at once: a collector whose last
    verdict_ack leaves as the round ends."""

    client_id = "last-words"

    def __init__(self, count: int) -> None:
        self.count = count
        self.started = False

    @property
    def finished(self) -> bool:
        return self.started

    def start(self, now: float) -> list[Outgoing]:
        self.started = True
        return [Outgoing(f"toy/last/{i}", b"bye") for i in range(self.count)]


def test_messages_queued_as_the_condition_holds_are_acknowledged_before_hosting_ends() -> None:
    """Everything a node queued when ``stop_when`` first holds reaches the broker (acknowledged), in
    more than one publish window; and a subscriber gets all of it."""
    count = 600  # more than two windows of 256
    node = _LastWords(count)
    received: list[str] = []

    async def main() -> HostStats:
        async with EmbeddedBroker() as broker, \
                aiomqtt.Client(broker.host, broker.port, identifier="listener") as listener:
            await listener.subscribe("toy/last/#", qos=1)

            async def listen() -> None:
                async for message in listener.messages:
                    received.append(message.topic.value)
                    if len(received) == count:
                        return

            listening = asyncio.create_task(listen())
            stats = await host_nodes([node], broker.url, stop_when=lambda: node.finished, timeout=20,
                                     options=DriverOptions(drain_timeout=10.0))
            async with asyncio.timeout(10):
                await listening
            return stats

    stats = asyncio.run(main())
    assert stats.stopped_by == "condition"
    assert stats.unsent == 0 and stats.per_node[node.client_id].sent_messages == count
    assert sorted(received) == sorted(f"toy/last/{i}" for i in range(count))


def test_answers_to_abandoned_subscriptions_are_not_logged_as_errors(caplog: pytest.LogCaptureFixture) -> None:
    """The broker answers an unsubscribe that hosting stopped waiting for: nothing to report."""
    from coutil.net.mqtt import BrokerAddress, make_client

    async def main() -> None:
        client: Any = make_client(BrokerAddress("127.0.0.1", 1), "abandoned", DriverOptions())
        waiting: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        client._pending_unsubscribes[7] = asyncio.Event()
        client._pending_subscribes[8] = waiting
        with caplog.at_level(logging.DEBUG):
            client._on_unsubscribe(None, None, 99, [], None)  # abandoned: no one waits
            client._on_subscribe(None, None, 98, [], None)
            client._on_unsubscribe(None, None, 7, [], None)  # still awaited: delivered
            client._on_subscribe(None, None, 8, ["granted"], None)
        assert client._pending_unsubscribes == {} and waiting.result() == ["granted"]

    asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


class _SilentOnceClient:
    """A client whose broker ignores the first SUBSCRIBE (as amqtt 0.12 sometimes does)."""

    def __init__(self, ignored: int) -> None:
        self.ignored = ignored
        self.calls: list[tuple[list[tuple[str, int]], float]] = []

    async def subscribe(self, topics: list[tuple[str, int]], timeout: float) -> None:
        self.calls.append((topics, timeout))
        if len(self.calls) <= self.ignored:
            await asyncio.sleep(timeout)
            raise aiomqtt.MqttError("Operation timed out")


def test_a_subscribe_without_suback_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from coutil.net import hosting

    monkeypatch.setattr(hosting, "SUBSCRIBE_FIRST_PATIENCE", 0.05)
    client = _SilentOnceClient(ignored=2)
    asyncio.run(hosting._subscribe(client, ["a/b", "c/#"], timeout=5.0))  # type: ignore[arg-type]
    assert len(client.calls) == 3
    assert all(topics == [("a/b", 1), ("c/#", 1)] for topics, _ in client.calls)
    assert [round(wait, 2) for _, wait in client.calls] == [0.05, 0.1, 0.2]  # doubling patience


def test_a_subscribe_never_answered_fails_at_the_operation_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    from coutil.net import hosting

    monkeypatch.setattr(hosting, "SUBSCRIBE_FIRST_PATIENCE", 0.05)
    client = _SilentOnceClient(ignored=10**6)
    with pytest.raises(aiomqtt.MqttError):
        asyncio.run(hosting._subscribe(client, ["a/b"], timeout=0.4))  # type: ignore[arg-type]
    assert 3 <= len(client.calls) <= 5


def test_a_dropped_connections_failure_is_retrieved_not_printed(caplog: pytest.LogCaptureFixture) -> None:
    """aiomqtt fails its "disconnected" future when a connection drops; once a session has ended nobody
    awaits it, and asyncio would print "Future exception was never retrieved" on the user's terminal.
    The driver hangs `_retrieve_exception` on it (`run_connection`)."""
    import gc

    from coutil.net import hosting

    async def drop(handled: bool) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if handled:
            future.add_done_callback(hosting._retrieve_exception)
        future.set_exception(aiomqtt.MqttCodeError(128, "Unexpected disconnection"))
        await asyncio.sleep(0)  # let the done callback run
        del future

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(drop(handled=False))
        gc.collect()
    assert any("never retrieved" in r.getMessage() for r in caplog.records)  # what the callback prevents
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio.run(drop(handled=True))
        gc.collect()
    assert not any("never retrieved" in r.getMessage() for r in caplog.records)
