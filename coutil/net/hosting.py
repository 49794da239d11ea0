"""Hosting sans-IO protocol nodes over a real MQTT broker (the driver; aiomqtt >=2.5,<3).

`host_nodes` runs nodes until a condition holds. Each item it is given is either a node, which gets
**its own MQTT connection** with the node's ``client_id`` as MQTT client id (a subject's is her sid,
so a broker ACL such as ``pattern write coutil/v2/+/s/%c/#`` confines every subject to her own
topics, even when one process hosts thousands of them), or a list of nodes that **share one
connection** (multiplexed: the connection subscribes to the union of their topics, and every
message that arrives once is handed to each hosted node whose subscriptions match it, as a broker
would). Multiplexing is what lets one process host 10^4 simulated subjects: a group message crosses
the socket once per process instead of once per member. It defeats per-subject ACLs (the broker
sees one client), so deployments with an ACL use one connection per subject.

The driver owns the clock (wall time: round deadlines are absolute times on the collector's clock)
and the transport. After *every* node call it drains the node's events, queues its `Outgoing`
messages, and re-arms its timer (one heap for all nodes). Per connection a flusher first makes the
broker subscriptions match the nodes' ``subscriptions()`` (awaiting the SUBACK) and then publishes
the queued messages in order, a window at a time; so a node is subscribed before the messages that
will trigger replies leave. A connection lost mid-window re-publishes the window after reconnecting
(duplicates are harmless: delivery is confirmed end to end by the protocol).

Connections reconnect with jittered exponential backoff and resubscribe from scratch (clean
sessions: a restarted broker remembers nothing). A node with ``on_transport``
(`coutil.protocol.node.TransportAware`) is told when its connection is lost and when it is back
(after resubscribing, so what it re-sends then is answered where it listens): a broker outage then
suspends the collector's deadlines instead of costing the round its subjects. A broker that never answers within
``connect_timeout`` or refuses the credentials is a `NetworkError` (exit code 6), never a hang.

What a connection knows of its nodes (outboxes, broker-side subscriptions, the routing of received
messages) is plain state in `coutil.net.connection`; this module makes the node calls and the I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence

import aiomqtt
from aiomqtt.exceptions import MqttConnectError

from coutil.errors import NetworkError
from coutil.net.burst import BurstCheck, deliver_checked
from coutil.net.connection import Connection, HostedNode
from coutil.net.mqtt import (
    REFUSED_CODES,
    BrokerAddress,
    DriverOptions,
    EventSink,
    HostStats,
    client_id_of,
    disconnected_future,
    make_client,
    parse_broker_url,
    publish_window,
)
from coutil.protocol import topics
from coutil.protocol.node import Node, Outgoing, transport_hook

logger = logging.getLogger(__name__)

#: Minimum seconds between two evaluations of ``stop_when``.
STOP_CHECK_INTERVAL = 0.01
#: Seconds to wait for a SUBACK before subscribing again (doubling each time; see `_subscribe`).
SUBSCRIBE_FIRST_PATIENCE = 2.0
#: Topic filters per SUBSCRIBE / UNSUBSCRIBE packet.
FILTERS_PER_PACKET = 500
#: Seconds granted to a closing connection for the broker's side of the DISCONNECT.
DISCONNECT_TIMEOUT = 2.0
#: Seconds between two cancellations of a task that survived one (see `cancel_and_wait`).
RECANCEL_INTERVAL = 0.5
#: Seconds after which `cancel_and_wait` stops waiting for tasks that refuse to end.
CANCEL_GIVE_UP = 10.0


def _retrieve_exception(future: asyncio.Future[None]) -> None:
    if not future.cancelled():
        future.exception()


class SubscriptionRefusedError(Exception):
    """The broker's SUBACK refused some of the filters of a SUBSCRIBE."""

    def __init__(self, filters: Sequence[str]) -> None:
        super().__init__(f"the broker refused {len(filters)} subscription(s), the first {filters[0]!r}")
        self.filters = list(filters)


def _is_failure(code: object) -> bool:
    """A SUBACK return code (an int, or paho's ReasonCode) that refuses the filter (0x80 and up)."""
    value = getattr(code, "value", code)
    return isinstance(value, int) and value >= 0x80


async def _subscribe(client: aiomqtt.Client, filters: Sequence[str], timeout: float) -> None:
    """SUBSCRIBE, asking again with doubling patience until ``timeout`` when no SUBACK comes.

    amqtt 0.12 now and then never answers a SUBSCRIBE sent right after the CONNACK of one of two
    clients connecting at the same moment (seen about once in 30 rounds with two subject worker
    processes: that worker's subjects then waited the whole 30 s operation timeout, missed the
    registration window and were left out). A second SUBSCRIBE is answered; subscribing twice to
    the same filters is harmless (at worst a retained message comes again, and nodes de-duplicate).
    """
    deadline = time.monotonic() + timeout
    patience = SUBSCRIBE_FIRST_PATIENCE
    while True:
        wait = min(patience, max(0.001, deadline - time.monotonic()))
        try:
            granted = await client.subscribe([(topic, 1) for topic in filters], timeout=wait)
            break
        except aiomqtt.MqttCodeError:
            raise  # the broker answered (with a refusal) or the connection broke
        except aiomqtt.MqttError:  # aiomqtt's "Operation timed out"
            if time.monotonic() >= deadline:
                raise
            logger.info("no SUBACK within %.1f s; subscribing again to %d filters", wait, len(filters))
            patience *= 2
    # A SUBACK may refuse some filters (return code 0x80): NATS's MQTT gateway grants a client at most
    # 65,535 / max_ack_pending QoS 1 subscriptions (63 with its default of 1,024). Ignoring that would
    # leave the nodes waiting for messages that never come.
    refused = [topic for topic, code in zip(filters, granted or (), strict=False) if _is_failure(code)]
    if refused:
        raise SubscriptionRefusedError(refused)


async def cancel_and_wait(tasks: Sequence[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait until every one has ended, cancelling again any that survived.

    Python 3.11's `asyncio.wait_for` swallows a cancellation that arrives just as the awaited
    future completes (CPython gh-86296), and aiomqtt awaits every subscribe, unsubscribe and
    disconnect through it: a flusher cancelled at that instant went on waiting for work, and the
    process hosting it never ended (seen in the topology test, about one run in ten). So a task
    still running after a cancellation is cancelled again. Exceptions of the tasks are not raised.
    """
    pending = {task for task in tasks if not task.done()}
    give_up = time.monotonic() + CANCEL_GIVE_UP
    cancelled = False
    while pending:
        for task in pending:
            task.cancel()
        try:
            await asyncio.wait(pending, timeout=RECANCEL_INTERVAL)
        except asyncio.CancelledError:
            # Our caller is being cancelled too (perhaps again): finish this cleanup first, so that
            # no task is left behind, then pass the cancellation on.
            cancelled = True
        pending = {task for task in pending if not task.done()}
        if pending and time.monotonic() >= give_up:
            logger.warning("%d tasks did not end after cancellation: %s", len(pending),
                           ", ".join(sorted(task.get_name() for task in pending)))
            break
    for task in tasks:
        if task.done() and not task.cancelled():
            task.exception()  # retrieved: an exception of a cancelled helper is not worth a warning
    if cancelled:
        raise asyncio.CancelledError


def _deliver(node: Node, topic: str, payload: bytes, now: float) -> list[Outgoing]:
    return node.receive(topic, payload, now)


class _Host:
    """The shared machinery of one `host_nodes` call."""

    def __init__(
        self, connections: list[Connection], hosted: list[HostedNode], address: BrokerAddress,
        options: DriverOptions, on_event: EventSink | None,
    ) -> None:
        self.connections = connections
        self.hosted = hosted
        self.address = address
        self.options = options
        self.on_event = on_event
        self.connect_slots = asyncio.Semaphore(options.max_concurrent_connects)
        self.timers: list[tuple[float, int, int]] = []
        self.timer_sequence = 0
        self.timer_wake = asyncio.Event()
        #: When the timer task will wake up by itself (infinity: when woken).
        self.timer_sleep_until = float("inf")
        #: Set after every node call so the supervisor re-evaluates ``stop_when`` promptly.
        self.changed = asyncio.Event()

    # -- node calls (synchronous: atomic with respect to the event loop, so no locks) --------------

    def call(self, hosted: HostedNode, action: Callable[[float], list[Outgoing]]) -> None:
        outgoing = action(self.options.clock())
        node = hosted.node
        events = node.drain_events()
        if self.on_event is not None:
            for event in events:
                self.on_event(hosted.client_id, event)
        for out in outgoing:
            if len(out.payload) > self.options.max_message_bytes:
                hosted.traffic.drops += 1
                logger.warning("not publishing %d bytes on %s: over the size limit", len(out.payload), out.topic)
                continue
            if id(out) in hosted.queued:
                # A re-send of a message still waiting in the outbox (a slow broker): sending it twice
                # back to back is of no use to anyone.
                continue
            if len(hosted.outbox) >= self.options.max_outbox:
                hosted.queued.discard(id(hosted.outbox.popleft()))
                hosted.traffic.drops += 1
            hosted.outbox.append(out)
            hosted.queued.add(id(out))
        due = node.next_timer()
        if due != hosted.timer_due:
            hosted.timer_due = due
            if due is not None:
                self.timer_sequence += 1
                heapq.heappush(self.timers, (due, self.timer_sequence, hosted.index))
                if due < self.timer_sleep_until:  # only wake the timer task when it must fire sooner
                    self.timer_wake.set()
        connection = hosted.connection
        assert connection is not None
        connection.follow(hosted)
        if hosted.outbox and hosted.index not in connection.sending_set:
            connection.sending_set.add(hosted.index)
            connection.sending.append(hosted)
        connection.dirty.set()
        self.changed.set()

    def tell_transport(self, connection: Connection, up: bool) -> None:
        """Tell the started nodes of ``connection`` that it is down or back up (on a change only)."""
        for hosted in connection.nodes:
            hook = transport_hook(hosted.node)
            if hook is None or not hosted.started or hosted.transport_up == up or hosted.node.finished:
                continue
            hosted.transport_up = up
            self.call(hosted, functools.partial(hook, up))

    async def timer_loop(self) -> None:
        """Fire every started node's timer when due (one task for all nodes, a heap of due times)."""
        while True:
            now = self.options.clock()
            due_now: list[HostedNode] = []
            # At most a chunk of timers per turn of the event loop (see `deliver_backlog`).
            while self.timers and self.timers[0][0] <= now and len(due_now) < self.options.delivery_chunk:
                due, _, index = heapq.heappop(self.timers)
                hosted = self.hosted[index]
                if hosted.timer_due == due and hosted.started:  # else superseded by a newer due time
                    hosted.timer_due = None
                    due_now.append(hosted)
            for hosted in due_now:
                self.call(hosted, hosted.node.on_timer)
            if due_now:
                await asyncio.sleep(0)  # let I/O run between bursts of timers
                continue
            delay = self.timers[0][0] - now if self.timers else None
            self.timer_sleep_until = self.timers[0][0] if self.timers else float("inf")
            self.timer_wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.timer_wake.wait()
            self.timer_sleep_until = float("-inf")  # awake: calls need not wake us

    # -- connections -------------------------------------------------------------------------------

    def _backoff(self, connection: Connection, attempt: int) -> float:
        ceiling = min(self.options.backoff_max, self.options.backoff_initial * 2.0 ** min(attempt - 1, 30))
        # Full jitter in [ceiling/2, ceiling): 10^4 clients cut off together do not return together.
        return ceiling * (0.5 + 0.5 * connection.jitter.random())

    async def run_connection(self, connection: Connection) -> None:
        """Connect, serve, and reconnect forever (until cancelled)."""
        first_deadline = time.monotonic() + self.options.connect_timeout
        attempt = 0
        on_payload = functools.partial(self._on_payload, connection)
        while True:
            client = make_client(self.address, connection.client_id, self.options, on_payload)
            try:
                async with self.connect_slots:
                    await client.__aenter__()
            except aiomqtt.MqttError as exc:
                self._check_fatal(connection, exc, first_deadline)
                attempt += 1
                await asyncio.sleep(self._backoff(connection, attempt))
                continue
            attempt = 0
            # aiomqtt fails this future when the connection drops; nobody awaits it after the session
            # ended, and asyncio would print "Future exception was never retrieved" on the terminal.
            disconnected_future(client).add_done_callback(_retrieve_exception)
            if connection.ever_connected:
                connection.wire.reconnects += 1
                for hosted in connection.nodes:
                    hosted.traffic.reconnects += 1
            connection.ever_connected = True
            connection.set_connected(True)
            try:
                await self._session(connection, client)
            except aiomqtt.MqttError as exc:
                logger.info("%s: connection lost (%s); reconnecting", connection.client_id, exc)
            finally:
                connection.set_connected(False)
                self.tell_transport(connection, False)
                # aiomqtt waits for the broker to acknowledge the DISCONNECT without a time limit.
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(DISCONNECT_TIMEOUT):
                        await client.__aexit__(None, None, None)
            attempt += 1
            await asyncio.sleep(self._backoff(connection, attempt))

    def _check_fatal(self, connection: Connection, exc: aiomqtt.MqttError, first_deadline: float) -> None:
        if connection.ever_connected:
            return  # a broker that was there once is waited for until the caller's timeout
        where = self.address.display()
        code = getattr(exc, "rc", None)
        # paho reports CONNACK codes as ReasonCode objects (MQTT 5 numbering) or plain ints.
        value = getattr(code, "value", code)
        if isinstance(exc, MqttConnectError) and isinstance(value, int) and value in REFUSED_CODES:
            raise NetworkError(f"MQTT broker {where} refused client {connection.client_id!r}: {exc}") from exc
        if time.monotonic() >= first_deadline:
            raise NetworkError(
                f"cannot reach the MQTT broker at {where} within {self.options.connect_timeout:g} s: {exc}"
            ) from exc

    async def _session(self, connection: Connection, client: aiomqtt.Client) -> None:
        connection.reset()
        await self._sync_subscriptions(connection, client)
        self.tell_transport(connection, True)
        for hosted in connection.nodes:
            if not hosted.started:
                hosted.started = True
                self.call(hosted, hosted.node.start)
        connection.dirty.set()
        tasks = [
            asyncio.create_task(self._reader(connection, client)),
            asyncio.create_task(self._flusher(connection, client)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            await cancel_and_wait(tasks)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        raise aiomqtt.MqttError("message stream ended")

    async def _sync_subscriptions(self, connection: Connection, client: aiomqtt.Client) -> None:
        """Send the SUBSCRIBEs and UNSUBSCRIBEs the nodes' calls left (`Connection.follow`), and hand
        the nodes that joined a filter the connection already had the retained message they missed."""
        subscribe, connection.to_subscribe = list(connection.to_subscribe), {}
        unsubscribe, connection.to_unsubscribe = list(connection.to_unsubscribe), {}
        late, connection.late = connection.late, []
        timeout = self.options.operation_timeout
        try:
            for start in range(0, len(subscribe), FILTERS_PER_PACKET):
                await _subscribe(client, subscribe[start:start + FILTERS_PER_PACKET], timeout)
        except SubscriptionRefusedError as exc:
            await self._fall_back_to_covers(connection, client, exc)
            return
        for start in range(0, len(unsubscribe), FILTERS_PER_PACKET):
            await client.unsubscribe(unsubscribe[start:start + FILTERS_PER_PACKET], timeout=timeout)
        # A node that joined a topic the connection already had: hand it the retained message it missed.
        for done, (hosted, topic) in enumerate(late, 1):
            payload = connection.retained.get(topic)
            if payload is None:
                continue  # cleared meanwhile
            self.call(hosted, functools.partial(_deliver, hosted.node, topic, payload))
            if done % self.options.delivery_chunk == 0:
                await asyncio.sleep(0)  # thousands of nodes joining the roster at once (see deliver_backlog)

    async def _fall_back_to_covers(self, connection: Connection, client: aiomqtt.Client,
                                   exc: SubscriptionRefusedError) -> None:
        """A multiplexed connection whose filters the broker refuses (NATS's limit per client) moves to the covering
        filters (a few per round, whatever the number of nodes) on the same connection: it unsubscribes every filter
        it asked for (so that the broker's count allows the covers), routes its nodes again and subscribes to the
        covers. It used to reconnect for this, and a reconnection makes every subject re-send what she has pending
        at once: at 1,000 subjects on NATS with two workers, every registration was re-sent (437 to 11,525
        duplicates in a round). What arrives on a refused filter in between is recovered by the protocol's re-sends,
        as a message lost to a reconnection was. A connection that cannot subscribe to fewer filters is a
        `NetworkError`."""
        if not connection.multiplexed or connection.coarse:
            raise NetworkError(
                f"MQTT broker {self.address.display()} refused client {connection.client_id!r}: {exc} (a broker "
                "limit on subscriptions per client; NATS: raise 65535 / mqtt.max_ack_pending)"
            ) from exc
        logger.warning("%s: %s; resubscribing to covering filters", connection.client_id, exc)
        asked = [*connection.refcount, *connection.lingering, *connection.to_unsubscribe]
        timeout = self.options.operation_timeout
        for start in range(0, len(asked), FILTERS_PER_PACKET):
            await client.unsubscribe(asked[start:start + FILTERS_PER_PACKET], timeout=timeout)
        connection.coarse = True
        connection.reset()
        await self._sync_subscriptions(connection, client)

    async def _reader(self, connection: Connection, client: aiomqtt.Client) -> None:
        """Wait until the connection ends or a node failed; messages themselves are handed to the
        nodes by `_on_payload`, from the socket's read callback."""
        disconnected = disconnected_future(client)
        failed = asyncio.ensure_future(connection.failed.wait())
        try:
            await asyncio.wait((disconnected, failed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            failed.cancel()
        if connection.error is not None:
            raise connection.error
        cause = disconnected.exception() if disconnected.done() and not disconnected.cancelled() else None
        raise aiomqtt.MqttError("disconnected") from cause

    def _on_payload(self, connection: Connection, topic: str, payload: bytes) -> None:
        """One message received on ``connection``: hand it to every hosted node subscribed to it."""
        if connection.error is not None:
            return
        try:
            wire = connection.wire
            if not topic or not isinstance(payload, bytes | bytearray) or len(payload) > self.options.max_message_bytes:
                wire.drops += 1
                return
            data = bytes(payload)
            wire.received_messages += 1
            wire.received_bytes += len(data)
            if connection.multiplexed:
                connection.keep_retained(topic, data)
            if not data and topics.is_subject_group(topic):
                # A member's clear of her retained run_keys (SPEC §6): an MQTT matter, done above; every node
                # ignores it, so none is called for it (k - 1 calls per member at 10^5 subjects).
                return
            if connection.backlog and connection.check is None:
                # Older messages still waiting, which this one must not overtake: routed when its turn
                # comes (one of them may make a node subscribe to its topic), by `deliver_backlog`.
                if not self._backlog_room(connection, len(data)):
                    return
                connection.backlog.append((topic, data, None))
                connection.backlog_ready.set()
                return
            # Late deliveries after an unsubscribe are not handed to the node (as the in-memory bus does).
            targets = connection.targets(topic)
            if not targets:
                return
            if connection.backlog or len(targets) > self.options.delivery_chunk or connection.check is not None:
                # Too many node calls for one callback of the event loop: handed out by `deliver_backlog`.
                if not self._backlog_room(connection, len(data)):
                    return
                connection.backlog.append((topic, data, list(targets)))
                connection.backlog_ready.set()
                return
            for hosted in targets:
                self._deliver_to(hosted, topic, data)
        except BaseException as exc:  # a node's bug: end hosting with it, not the connection
            connection.error = exc
            connection.failed.set()

    def _backlog_room(self, connection: Connection, size: int) -> bool:
        """Whether a message of ``size`` bytes may wait in the backlog (`DriverOptions.max_backlog_bytes`); if
        not, it is dropped and counted: a flood must not grow the process without bound."""
        if connection.backlog_bytes + size > self.options.max_backlog_bytes:
            connection.wire.drops += 1
            return False
        connection.backlog_bytes += size
        return True

    def _deliver_to(self, hosted: HostedNode, topic: str, data: bytes) -> None:
        hosted.traffic.received_messages += 1
        hosted.traffic.received_bytes += len(data)
        self.call(hosted, functools.partial(_deliver, hosted.node, topic, data))

    async def deliver_backlog(self, connection: Connection) -> None:
        """Hand out the messages `_on_payload` deferred, in the order received, at most
        ``delivery_chunk`` node calls between two turns of the event loop.

        Handing the 3.3 MB release of a 10^5 round to the 50,000 subjects of one worker in a single
        callback kept that worker's event loop busy for tens of seconds: its keep-alive pings and the
        broker's acknowledgements waited, the broker closed the connection, and the reconnection made
        every subject re-send her verdict. Chunked, the verdicts also leave while the rest audit.
        """
        chunk = self.options.delivery_chunk
        while True:
            await connection.backlog_ready.wait()
            calls = 0
            while connection.backlog and connection.error is None:
                topic, data, targets = connection.backlog[0]
                if targets is None:
                    targets = list(connection.targets(topic))
                    connection.backlog[0] = (topic, data, targets)
                try:
                    while targets and calls < chunk:
                        self._deliver_to(targets.pop(), topic, data)
                        calls += 1
                except BaseException as exc:  # a node's bug, as in `_on_payload`
                    connection.error = exc
                    connection.failed.set()
                    return
                if not targets:
                    connection.backlog.popleft()
                    connection.backlog_bytes -= len(data)
                if calls >= chunk:
                    calls = 0
                    await asyncio.sleep(0)
            connection.backlog_ready.clear()

    async def deliver_checked_backlog(self, connection: Connection, check: BurstCheck) -> None:
        """`deliver_backlog` for a connection whose bursts are checked ahead (`coutil.net.burst`)."""
        try:
            await deliver_checked(connection.backlog, connection.backlog_ready, check, self._deliver_to,
                                  self.options.delivery_chunk, connection.release_backlog)
        except Exception as exc:  # a node's bug, as in `_on_payload`
            connection.error = exc
            connection.failed.set()

    async def _flusher(self, connection: Connection, client: aiomqtt.Client) -> None:
        timeout = self.options.operation_timeout
        window_size = self.options.publish_window
        while True:
            await connection.dirty.wait()
            connection.dirty.clear()
            while True:
                # Until no node changed its subscriptions while we awaited the broker: a node may
                # have subscribed to its inbox and queued the message whose answer comes there in
                # the same call, and that message must not leave before the SUBACK.
                while connection.to_subscribe or connection.to_unsubscribe or connection.late:
                    await self._sync_subscriptions(connection, client)
                if not connection.sending:
                    break
                window: list[tuple[HostedNode, Outgoing]] = []
                while connection.sending and len(window) < window_size:
                    hosted = connection.sending[0]
                    while hosted.outbox and len(window) < window_size:
                        out = hosted.outbox.popleft()
                        hosted.queued.discard(id(out))
                        window.append((hosted, out))
                    if not hosted.outbox:
                        connection.sending.popleft()
                        connection.sending_set.discard(hosted.index)
                connection.in_flight = len(window)
                try:
                    await publish_window(client, [out for _, out in window], timeout)
                except BaseException:
                    # Not acknowledged: back to the front of their outboxes, re-published after reconnecting.
                    for hosted, out in reversed(window):
                        hosted.outbox.appendleft(out)
                        hosted.queued.add(id(out))
                        if hosted.index not in connection.sending_set:
                            connection.sending_set.add(hosted.index)
                            connection.sending.appendleft(hosted)
                    raise
                finally:
                    connection.in_flight = 0
                for hosted, out in window:
                    hosted.traffic.sent_messages += 1
                    hosted.traffic.sent_bytes += len(out.payload)
                    connection.wire.sent_messages += 1
                    connection.wire.sent_bytes += len(out.payload)

    async def drain(self, seconds: float) -> None:
        """Give connected nodes up to ``seconds`` to publish what they still have queued, until the
        broker acknowledged it: a collector that exits with its last verdict_ack still in the client's
        buffers leaves that subject re-sending her verdict to nobody."""
        limit = time.monotonic() + seconds
        while time.monotonic() < limit:
            if not any((c.sending or c.in_flight) and c.wire.connected for c in self.connections):
                return
            await asyncio.sleep(0.01)


async def host_nodes(
    nodes: Sequence[Node | Sequence[Node]],
    broker_url: str | BrokerAddress,
    *,
    stop_when: Callable[[], bool],
    timeout: float,
    on_event: EventSink | None = None,
    options: DriverOptions | None = None,
    checks: Mapping[str, BurstCheck] | None = None,
) -> HostStats:
    """Run nodes over the broker until ``stop_when()`` holds or ``timeout`` seconds pass.

    Each item of ``nodes`` is a node (its own connection, client id = `client_id_of(node)`) or a
    sequence of nodes sharing one multiplexed connection (see the module docstring). Returns the
    traffic counters per node (what each node sent and was handed) and per connection (what crossed
    the wire); ``stopped_by`` tells whether the condition held or the time ran out. Raises
    `NetworkError` when the broker cannot be reached (or refuses a client) at the start, and
    `ValueError` for two nodes with the same client id. Exceptions raised by a node propagate.
    ``checks``: per client id of a node with its own connection, what checks bursts of the messages
    it receives ahead of it (`coutil.net.burst`).
    """
    options = options if options is not None else DriverOptions()
    address = broker_url if isinstance(broker_url, BrokerAddress) else parse_broker_url(broker_url)
    hosted: list[HostedNode] = []
    connections: list[Connection] = []
    seen: set[str] = set()

    def add(node: Node) -> HostedNode:
        client_id = client_id_of(node)
        if client_id in seen:
            raise ValueError(f"two nodes share the MQTT client id {client_id!r}")
        seen.add(client_id)
        item = HostedNode(len(hosted), node, client_id)
        hosted.append(item)
        return item

    for entry in nodes:
        if isinstance(entry, Sequence):
            group = [add(node) for node in entry]
            if group:
                connections.append(Connection(f"coutil-mux-{os.urandom(6).hex()}", group, multiplexed=True,
                                               coarse=options.coarse_subscriptions))
        else:
            single = add(entry)
            connections.append(Connection(single.client_id, [single], multiplexed=False))
            connections[-1].check = (checks or {}).get(single.client_id)
    host = _Host(connections, hosted, address, options, on_event)
    started = time.monotonic()
    deadline = started + timeout
    runners = [asyncio.create_task(host.run_connection(c), name=f"mqtt-{c.client_id}") for c in connections]
    timer_task = asyncio.create_task(host.timer_loop(), name="mqtt-timers")
    deliverers = [asyncio.create_task(host.deliver_backlog(c) if c.check is None
                                      else host.deliver_checked_backlog(c, c.check), name=f"mqtt-deliver-{c.client_id}")
                  for c in connections if c.multiplexed or c.check is not None]
    tasks = [*runners, timer_task, *deliverers]
    stopped_by = "timeout"
    try:
        while True:
            for task in tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            if stop_when():
                stopped_by = "condition"
                await host.drain(options.drain_timeout)
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            host.changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(0.1, remaining)):
                    await host.changed.wait()
            # Coalesce: stop_when() may scan 10^4 nodes, so evaluate it at most ~100 times a second.
            await asyncio.sleep(STOP_CHECK_INTERVAL)
    finally:
        await cancel_and_wait(tasks)
    return HostStats(
        per_node={h.client_id: h.traffic for h in hosted},
        elapsed=time.monotonic() - started,
        stopped_by=stopped_by,
        unsent=sum(len(h.outbox) for h in hosted),
        wire={c.client_id: c.wire for c in connections},
    )
