"""The MQTT driver: hosts many sans-IO protocol nodes over a real broker (aiomqtt >=2.5,<3).

Design (issue 5, item 1):

- **One MQTT client per node**, with the node's ``client_id`` as MQTT client id (a subject's is her
  sid), so a broker ACL (``pattern write coutil/v1/+/s/%c/#``) confines every subject to her own
  topics even when one process hosts thousands of them. Multiplexing many subjects over one
  connection would defeat that ACL. Connects are bounded by a semaphore (200 by default) so 10^4
  clients in one process connect without stampeding the broker.
- The driver owns the clock (wall time by default: round deadlines in the Announce are absolute
  times on the collector's clock, shared by every process) and the transport. After *every* node
  call it drains the node's events, queues the returned `Outgoing` messages in the node's outbox,
  and re-arms the node's timer. Per connection, a flusher task first makes the MQTT subscriptions
  match ``node.subscriptions()`` and then publishes the outbox in order (QoS/retain as given), so a
  node is always subscribed before the messages that will trigger replies leave.
- **Reconnect with exponential backoff** (jittered, capped) after any connection loss, then
  resubscribe from scratch (clean sessions: a restarted broker remembers nothing) and publish what
  is still queued. Nothing is persisted: delivery is confirmed end to end by the protocol (acks,
  re-sends, de-duplication), because brokers drop QoS 1 messages when their queues overflow.
- A broker that never answers within ``connect_timeout``, or refuses our credentials, is a
  `coutil.errors.NetworkError` (exit code 6) naming the broker, never a hang or a traceback.
- amqtt has no packet-size limit, so ``max_message_bytes`` is enforced here on both directions:
  larger payloads are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import logging
import os
import random
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import aiomqtt
from aiomqtt.exceptions import MqttConnectError

from coutil.errors import InputError, NetworkError
from coutil.net.broker import DEFAULT_MAX_MESSAGE_BYTES
from coutil.protocol import topics
from coutil.protocol.node import Event, Node, Outgoing

logger = logging.getLogger(__name__)

_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
#: CONNACK codes meaning "your credentials/identity are refused" (3.1.1: 2, 4, 5; MQTT 5: 0x85-0x87).
_REFUSED_CODES = frozenset({2, 4, 5, 133, 134, 135})

EventSink = Callable[[str, Event], None]
#: Minimum seconds between two evaluations of ``stop_when``.
STOP_CHECK_INTERVAL = 0.01


@dataclass(frozen=True)
class BrokerAddress:
    """Where and how to connect: parsed from ``mqtt://user:pass@host:port`` or ``mqtts://...``."""

    host: str
    port: int
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    #: CA bundle (PEM) to verify the broker's certificate; ``None``: the system's CAs.
    ca_file: str | None = None
    #: Skip certificate and host-name verification (self-signed test brokers only).
    insecure: bool = False

    def display(self) -> str:
        """The URL without the password, for messages and logs."""
        scheme = "mqtts" if self.tls else "mqtt"
        user = f"{self.username}@" if self.username else ""
        return f"{scheme}://{user}{self.host}:{self.port}"

    def tls_parameters(self) -> aiomqtt.TLSParameters | None:
        if not self.tls:
            return None
        if self.insecure:
            return aiomqtt.TLSParameters(ca_certs=self.ca_file, cert_reqs=ssl.CERT_NONE)
        return aiomqtt.TLSParameters(ca_certs=self.ca_file, cert_reqs=ssl.CERT_REQUIRED)


def parse_broker_url(url: str, *, ca_file: str | None = None, insecure: bool = False) -> BrokerAddress:
    """Parse a broker URL; a malformed one is an `InputError` naming it (password never echoed)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InputError(f"broker URL {_redact(url)!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InputError(f"broker URL {_redact(url)!r}: scheme must be mqtt:// or mqtts://")
    if not parts.hostname:
        raise InputError(f"broker URL {_redact(url)!r}: no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InputError(f"broker URL {_redact(url)!r}: unexpected path or query")
    if ca_file is not None and not os.path.isfile(ca_file):
        raise InputError(f"broker CA file {ca_file!r} does not exist")
    return BrokerAddress(
        host=parts.hostname,
        port=port if port is not None else _DEFAULT_PORTS[scheme],
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        tls=scheme == "mqtts",
        ca_file=ca_file,
        insecure=insecure,
    )


def _redact(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, location = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{location}" if ":" in credentials else url


@dataclass(frozen=True)
class DriverOptions:
    """Tuning knobs of the driver; the defaults suit 10^4 nodes on one machine."""

    #: Simultaneous connection attempts (a semaphore): avoids a connect stampede.
    max_concurrent_connects: int = 200
    #: A node that never connected within this many seconds makes `host_nodes` raise NetworkError.
    connect_timeout: float = 10.0
    #: Timeout of one connection attempt (TCP + CONNACK).
    connect_attempt_timeout: float = 5.0
    #: Timeout of one publish/subscribe awaiting the broker's acknowledgement.
    operation_timeout: float = 30.0
    backoff_initial: float = 0.1
    backoff_max: float = 2.0
    keepalive: int = 30
    #: Payloads larger than this are neither published nor handed to nodes (counted as drops).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: Messages queued per node while disconnected; the oldest is dropped beyond this.
    max_outbox: int = 10_000
    #: QoS 1 publishes of one node in flight at once (ordered issue, pipelined acks).
    publish_window: int = 64
    #: Seconds granted after ``stop_when()`` holds to publish what the nodes still queued.
    drain_timeout: float = 2.0
    #: The protocol clock handed to nodes as ``now``.
    clock: Callable[[], float] = time.time


@dataclass
class NodeTraffic:
    """Counters of one hosted node."""

    sent_messages: int = 0
    sent_bytes: int = 0
    received_messages: int = 0
    received_bytes: int = 0
    reconnects: int = 0
    #: Payloads dropped here: oversized (either direction) or evicted from a full outbox.
    drops: int = 0
    connected: bool = False


@dataclass
class HostStats:
    """What `host_nodes` observed; ``per_node`` is keyed by client id."""

    per_node: dict[str, NodeTraffic]
    elapsed: float
    #: ``"condition"`` when ``stop_when()`` held, ``"timeout"`` otherwise.
    stopped_by: str
    #: Messages still queued (unpublished) when hosting stopped.
    unsent: int = 0

    @property
    def reconnects(self) -> int:
        return sum(t.reconnects for t in self.per_node.values())

    @property
    def drops(self) -> int:
        return sum(t.drops for t in self.per_node.values())

    @property
    def sent_messages(self) -> int:
        return sum(t.sent_messages for t in self.per_node.values())

    @property
    def sent_bytes(self) -> int:
        return sum(t.sent_bytes for t in self.per_node.values())

    @property
    def received_messages(self) -> int:
        return sum(t.received_messages for t in self.per_node.values())

    @property
    def received_bytes(self) -> int:
        return sum(t.received_bytes for t in self.per_node.values())

    def as_dict(self) -> dict[str, object]:
        return {
            "nodes": len(self.per_node),
            "elapsed_s": round(self.elapsed, 3),
            "stopped_by": self.stopped_by,
            "sent_messages": self.sent_messages,
            "sent_bytes": self.sent_bytes,
            "received_messages": self.received_messages,
            "received_bytes": self.received_bytes,
            "reconnects": self.reconnects,
            "drops": self.drops,
            "unsent": self.unsent,
        }


def client_id_of(node: Node) -> str:
    """The node's MQTT client id: its ``client_id`` attribute (a subject's sid) when it has one."""
    client_id = getattr(node, "client_id", None)
    if isinstance(client_id, str) and client_id:
        return client_id
    # A random suffix: two processes hosting id-less nodes must not kick each other off the broker.
    return f"coutil-{os.urandom(6).hex()}"


def _deliver(node: Node, topic: str, payload: bytes, now: float) -> list[Outgoing]:
    return node.receive(topic, payload, now)


class _HostedNode:
    """One node with its outbox, subscriptions, timer and counters."""

    def __init__(self, index: int, node: Node, client_id: str) -> None:
        self.index = index
        self.node = node
        self.client_id = client_id
        self.outbox: deque[Outgoing] = deque()
        self.subscribed: frozenset[str] = frozenset()
        #: Bumped by every node call; the flusher re-syncs subscriptions when it moved.
        self.version = 0
        self.synced_version = -1
        self.dirty = asyncio.Event()
        self.started = False
        self.timer_due: float | None = None
        self.traffic = NodeTraffic()
        self.ever_connected = False
        # Per-node jitter source (seeded by the client id, not the global `random`).
        self.jitter = random.Random(client_id)

    def accepts(self, topic: str) -> bool:
        """Whether a received topic matches a current subscription (late deliveries after an
        unsubscribe are not handed to the node, as the in-memory bus does)."""
        if topic in self.subscribed:
            return True
        return any(topics.matches(f, topic) for f in self.subscribed if "+" in f or "#" in f)


class _Host:
    """The shared machinery of one `host_nodes` call."""

    def __init__(
        self, hosted: list[_HostedNode], address: BrokerAddress, options: DriverOptions, on_event: EventSink | None
    ) -> None:
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

    def call(self, hosted: _HostedNode, action: Callable[[float], list[Outgoing]]) -> None:
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
            if len(hosted.outbox) >= self.options.max_outbox:
                hosted.outbox.popleft()
                hosted.traffic.drops += 1
            hosted.outbox.append(out)
        due = node.next_timer()
        if due != hosted.timer_due:
            hosted.timer_due = due
            if due is not None:
                self.timer_sequence += 1
                heapq.heappush(self.timers, (due, self.timer_sequence, hosted.index))
                if due < self.timer_sleep_until:  # only wake the timer task when it must fire sooner
                    self.timer_wake.set()
        hosted.version += 1
        hosted.dirty.set()
        self.changed.set()

    async def timer_loop(self) -> None:
        """Fire every started node's timer when due (one task for all nodes, a heap of due times)."""
        while True:
            now = self.options.clock()
            due_now: list[_HostedNode] = []
            while self.timers and self.timers[0][0] <= now:
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
                await asyncio.wait_for(self.timer_wake.wait(), delay)
            self.timer_sleep_until = float("-inf")  # awake: calls need not wake us

    # -- connections -------------------------------------------------------------------------------

    def _client(self, hosted: _HostedNode) -> aiomqtt.Client:
        address = self.address
        client = aiomqtt.Client(
            address.host,
            address.port,
            username=address.username,
            password=address.password,
            identifier=hosted.client_id,
            protocol=aiomqtt.ProtocolVersion.V311,
            clean_session=True,
            keepalive=self.options.keepalive,
            timeout=self.options.connect_attempt_timeout,
            tls_params=address.tls_parameters(),
            tls_insecure=address.insecure if address.tls else None,
            # Small request/ack messages: without TCP_NODELAY, Nagle's algorithm meeting delayed ACKs
            # adds ~40 ms to every hop (measured: 88 ms per request/ack cycle on loopback).
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
        )
        # aiomqtt warns above 10 unacknowledged publishes; our window is deliberately larger.
        client.pending_calls_threshold = self.options.publish_window + 16
        return client

    def _backoff(self, hosted: _HostedNode, attempt: int) -> float:
        ceiling = min(self.options.backoff_max, self.options.backoff_initial * 2.0 ** min(attempt - 1, 30))
        # Full jitter in [ceiling/2, ceiling): 10^4 clients cut off together do not return together.
        return ceiling * (0.5 + 0.5 * hosted.jitter.random())

    async def run_node(self, hosted: _HostedNode) -> None:
        """Connect, serve, and reconnect forever (until cancelled)."""
        first_deadline = time.monotonic() + self.options.connect_timeout
        attempt = 0
        while True:
            client = self._client(hosted)
            try:
                async with self.connect_slots:
                    await client.__aenter__()
            except aiomqtt.MqttError as exc:
                self._check_fatal(hosted, exc, first_deadline)
                attempt += 1
                await asyncio.sleep(self._backoff(hosted, attempt))
                continue
            attempt = 0
            if hosted.ever_connected:
                hosted.traffic.reconnects += 1
            hosted.ever_connected = True
            hosted.traffic.connected = True
            try:
                await self._session(hosted, client)
            except aiomqtt.MqttError as exc:
                logger.info("%s: connection lost (%s); reconnecting", hosted.client_id, exc)
            finally:
                hosted.traffic.connected = False
                with contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
            attempt += 1
            await asyncio.sleep(self._backoff(hosted, attempt))

    def _check_fatal(self, hosted: _HostedNode, exc: aiomqtt.MqttError, first_deadline: float) -> None:
        if hosted.ever_connected:
            return  # a broker that was there once is waited for until the caller's timeout
        where = self.address.display()
        code = getattr(exc, "rc", None)
        # paho reports CONNACK codes as ReasonCode objects (MQTT 5 numbering) or plain ints.
        value = getattr(code, "value", code)
        if isinstance(exc, MqttConnectError) and isinstance(value, int) and value in _REFUSED_CODES:
            raise NetworkError(f"MQTT broker {where} refused client {hosted.client_id!r}: {exc}") from exc
        if time.monotonic() >= first_deadline:
            raise NetworkError(
                f"cannot reach the MQTT broker at {where} within {self.options.connect_timeout:g} s: {exc}"
            ) from exc

    async def _session(self, hosted: _HostedNode, client: aiomqtt.Client) -> None:
        # Clean session: the broker forgot our subscriptions (or restarted); subscribe afresh.
        hosted.subscribed = frozenset()
        hosted.synced_version = -1
        await self._sync_subscriptions(hosted, client)
        if not hosted.started:
            hosted.started = True
            self.call(hosted, hosted.node.start)
        hosted.dirty.set()
        tasks = [
            asyncio.create_task(self._reader(hosted, client)),
            asyncio.create_task(self._flusher(hosted, client)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        for task in done:
            error = task.exception()
            if error is not None:
                raise error
        raise aiomqtt.MqttError("message stream ended")

    async def _sync_subscriptions(self, hosted: _HostedNode, client: aiomqtt.Client) -> None:
        version = hosted.version
        wanted = hosted.node.subscriptions()
        new = sorted(wanted - hosted.subscribed)
        gone = sorted(hosted.subscribed - wanted)
        timeout = self.options.operation_timeout
        if new:
            await client.subscribe([(topic, 1) for topic in new], timeout=timeout)
        if gone:
            await client.unsubscribe(gone, timeout=timeout)
        hosted.subscribed = frozenset(wanted)
        hosted.synced_version = version

    async def _reader(self, hosted: _HostedNode, client: aiomqtt.Client) -> None:
        limit = self.options.max_message_bytes
        async for message in client.messages:
            payload = message.payload
            if not isinstance(payload, bytes | bytearray) or len(payload) > limit:
                hosted.traffic.drops += 1
                continue
            topic = message.topic.value
            if not hosted.accepts(topic):
                continue
            data = bytes(payload)
            hosted.traffic.received_messages += 1
            hosted.traffic.received_bytes += len(data)
            self.call(hosted, functools.partial(_deliver, hosted.node, topic, data))

    async def _flusher(self, hosted: _HostedNode, client: aiomqtt.Client) -> None:
        timeout = self.options.operation_timeout
        while True:
            await hosted.dirty.wait()
            hosted.dirty.clear()
            while True:
                if hosted.synced_version != hosted.version:
                    await self._sync_subscriptions(hosted, client)
                if not hosted.outbox:
                    break
                # Issue a window of publishes in order (coroutines start FIFO) and await their
                # acknowledgements together; remove them only once acknowledged, so a connection
                # lost mid-window re-sends them after reconnecting (duplicates are harmless).
                window = [hosted.outbox[i] for i in range(min(self.options.publish_window, len(hosted.outbox)))]
                await asyncio.gather(
                    *(
                        client.publish(out.topic, out.payload, qos=out.qos, retain=out.retain, timeout=timeout)
                        for out in window
                    )
                )
                for out in window:
                    # The node may have queued more meanwhile; the window is still at the front
                    # unless a full outbox evicted it (then the eviction already removed it).
                    if hosted.outbox and hosted.outbox[0] is out:
                        hosted.outbox.popleft()
                    hosted.traffic.sent_messages += 1
                    hosted.traffic.sent_bytes += len(out.payload)

    async def drain(self, seconds: float) -> None:
        """Give connected nodes up to ``seconds`` to publish what they still have queued."""
        limit = time.monotonic() + seconds
        while time.monotonic() < limit:
            if not any(h.outbox and h.traffic.connected for h in self.hosted):
                return
            await asyncio.sleep(0.01)


async def host_nodes(
    nodes: Sequence[Node],
    broker_url: str | BrokerAddress,
    *,
    stop_when: Callable[[], bool],
    timeout: float,
    on_event: EventSink | None = None,
    options: DriverOptions | None = None,
) -> HostStats:
    """Run ``nodes`` over the broker until ``stop_when()`` holds or ``timeout`` seconds pass.

    Every node gets its own MQTT client (client id = `client_id_of(node)`). Returns the traffic
    counters; ``stopped_by`` tells whether the condition held or the time ran out. Raises
    `NetworkError` when the broker cannot be reached (or refuses a client) at the start, and
    `ValueError` for two nodes with the same client id. Exceptions raised by a node propagate.
    """
    options = options if options is not None else DriverOptions()
    address = broker_url if isinstance(broker_url, BrokerAddress) else parse_broker_url(broker_url)
    hosted: list[_HostedNode] = []
    seen: set[str] = set()
    for index, node in enumerate(nodes):
        client_id = client_id_of(node)
        if client_id in seen:
            raise ValueError(f"two nodes share the MQTT client id {client_id!r}")
        seen.add(client_id)
        hosted.append(_HostedNode(index, node, client_id))
    host = _Host(hosted, address, options, on_event)
    started = time.monotonic()
    deadline = started + timeout
    runners = [asyncio.create_task(host.run_node(h), name=f"mqtt-node-{h.client_id}") for h in hosted]
    timer_task = asyncio.create_task(host.timer_loop(), name="mqtt-timers")
    tasks = [*runners, timer_task]
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
                await asyncio.wait_for(host.changed.wait(), min(0.1, remaining))
            # Coalesce: stop_when() may scan 10^4 nodes, so evaluate it at most ~100 times a second.
            await asyncio.sleep(STOP_CHECK_INTERVAL)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return HostStats(
        per_node={h.client_id: h.traffic for h in hosted},
        elapsed=time.monotonic() - started,
        stopped_by=stopped_by,
        unsent=sum(len(h.outbox) for h in hosted),
    )
