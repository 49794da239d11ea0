"""MQTT plumbing for the driver: broker addresses, driver options, traffic counters, the client.

`coutil.net.hosting.host_nodes` is the driver itself (one connection per node, or nodes multiplexed
over one connection). This module holds what it is configured with and reports:

- `parse_broker_url` / `BrokerAddress`: ``mqtt[s]://[user:pass@]host:port`` (the password is never
  echoed in messages), CA file and insecure mode for self-signed test brokers;
- `DriverOptions`: connect concurrency and timeouts, back-off, publish window, size limits;
- `NodeTraffic` / `HostStats`: per-node and per-connection counters;
- `make_client`: an aiomqtt client (MQTT 3.1.1, clean session, TCP_NODELAY) that reads bursts of
  packets (see `_BurstReadingClient`).

amqtt has no packet-size limit, so ``max_message_bytes`` is enforced by the driver on both directions.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

import aiomqtt
from paho.mqtt import client as paho_client
from paho.mqtt.client import DISCONNECT, PUBACK, PUBLISH
from paho.mqtt.enums import MQTTErrorCode
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

from coutil.errors import InputError
from coutil.net.broker import DEFAULT_MAX_MESSAGE_BYTES
from coutil.protocol.node import Event, Node, Outgoing

logger = logging.getLogger(__name__)

_DEFAULT_PORTS = {"mqtt": 1883, "mqtts": 8883}
#: CONNACK codes meaning "your credentials/identity are refused" (3.1.1: 2, 4, 5; MQTT 5: 0x85-0x87).
REFUSED_CODES = frozenset({2, 4, 5, 133, 134, 135})

EventSink = Callable[[str, Event], None]


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
        what = "is a directory" if os.path.isdir(ca_file) else "does not exist"
        raise InputError(f"broker CA file {ca_file!r} {what}")
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
    #: Messages queued per node (while disconnected, or behind a slow broker); the oldest is dropped
    #: beyond this. The collector queues one assign and one run start per subject at once.
    max_outbox: int = 1_000_000
    #: QoS 1 publishes of one connection in flight at once (ordered issue, pipelined acks; the
    #: driver awaits each window). paho's own in-flight limit is off: its default, 20, throttled the
    #: collector's bursts of assigns and run starts, and any limit makes paho scan every message in
    #: flight on each acknowledgement (at 10^5 subjects, seconds of the collector's busiest phase).
    publish_window: int = 256
    #: Node calls the driver makes in a row before it lets the event loop run (socket I/O, the
    #: broker's acknowledgements, keep-alive pings). A message for more hosted nodes than this (the
    #: release reaches 50,000 subjects per worker at 10^5) is handed out in chunks of this size.
    delivery_chunk: int = 500
    #: Bytes of received messages a connection holds waiting for its nodes (the backlog, the bursts being
    #: checked ahead); beyond it a message is dropped and counted (re-sends recover an honest one). Found by
    #: an attacker: 3 GB of junk in 7 s grew a collector with helper processes to 2.7 GB.
    max_backlog_bytes: int = 512 * 1024 * 1024
    #: Seconds granted after ``stop_when()`` holds to publish what the nodes still queued.
    drain_timeout: float = 2.0
    #: A multiplexed connection subscribes at the broker to covering filters (one per round and kind
    #: of topic, `coutil.protocol.topics.covering_filter`) and routes to its nodes locally, instead of
    #: subscribing to every node's own topics. For amqtt, which matches every message against every
    #: subscription in Python (at 2,000 subjects, 12,000 filters: the round never finished). Only
    #: for a broker of this run: covers also bring other subjects' traffic and retained messages.
    coarse_subscriptions: bool = False
    #: Subjects per multiplexed connection of a subject worker process (`coutil.round.workers` hosts
    #: its subjects in slices of at most this many neighbouring QIs). mosquitto 2.0 walks a client's
    #: whole list of subscriptions on every SUBSCRIBE, so a connection's filters cost it time
    #: quadratic in their number: at 10^5 subjects, one connection per worker (about 150,000 filters,
    #: three per subject) held the broker some 12 s at one core while both workers waited for their
    #: SUBACKs (README, "10^5 subjects over mosquitto"); c connections cost it 1/c of that. A group
    #: split between two connections reaches its worker twice (the copy decodes from its cache).
    subjects_per_connection: int = 12_500
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
    """What `host_nodes` observed: ``per_node`` (keyed by the node's client id) counts what each node
    sent and was handed; ``wire`` (keyed by connection client id) what crossed each socket, less
    than the nodes' sum when nodes share a multiplexed connection."""

    per_node: dict[str, NodeTraffic]
    elapsed: float
    #: ``"condition"`` when ``stop_when()`` held, ``"timeout"`` otherwise.
    stopped_by: str
    #: Messages still queued (unpublished) when hosting stopped.
    unsent: int = 0
    wire: dict[str, NodeTraffic] = field(default_factory=dict)

    @property
    def reconnects(self) -> int:
        return sum(t.reconnects for t in self.wire.values())

    @property
    def drops(self) -> int:
        return sum(t.drops for t in self.per_node.values()) + sum(t.drops for t in self.wire.values())

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
            "connections": len(self.wire),
            "wire_received_messages": sum(t.received_messages for t in self.wire.values()),
            "wire_sent_messages": sum(t.sent_messages for t in self.wire.values()),
            "reconnects": self.reconnects,
            "drops": self.drops,
            "unsent": self.unsent,
        }


#: MQTT packets read per wake-up of a readable socket (see `_BurstReadingClient`).
READ_BURST = 64
#: Bytes asked of the socket at once. paho asks for each packet's first byte, then its length byte by
#: byte, then its body: three system calls or more per message, most of a small message's cost.
RECV_CHUNK = 256 * 1024
#: Bytes of queued packets joined into one send (see `_BurstReadingClient._packet_write`).
SEND_CHUNK = 1024 * 1024


PayloadHandler = Callable[[str, bytes], None]
#: The largest remaining length of an MQTT packet (four bytes of seven bits).
_MAX_REMAINING_LENGTH = 268_435_455


_PUBACK_SUCCESS = ReasonCode(PacketTypes.PUBACK)
_NO_PROPERTIES = Properties(PacketTypes.PUBACK)  # type: ignore[no-untyped-call]


class _BufferedPahoClient(paho_client.Client):
    """paho's client with buffered socket I/O and lean PUBLISH/PUBACK paths (no new state but the read
    buffer and the acknowledgements awaited; same wire bytes).

    paho issues a system call per packet part (``_sock_recv``: the first byte, the length byte by
    byte, the body) and a ``send`` per queued packet; with TCP_NODELAY each send is a segment the
    broker reads on its own. Here the socket is read `RECV_CHUNK` bytes at a time, and the packets
    queued when the socket is writable leave in one ``send`` (up to `SEND_CHUNK`), in order.
    """

    _rbuf: bytes = b""
    _rpos: int = 0
    #: Set by `_BurstReadingClient` when it hands payloads straight to a handler: PUBLISH and PUBACK
    #: packets already whole in the read buffer then take `_packet_read`'s fast path.
    fast_handler: PayloadHandler | None = None

    #: What to call at the PUBACK of each `publish_acknowledged` message, by packet id.
    _acks: dict[int, Callable[[], None]]

    def reset_buffer(self) -> None:
        """A new connection: nothing of the old one's stream is valid, and no PUBACK of hers will come
        (a publish it did not acknowledge is re-published by its sender: `publish_window` raises)."""
        self._rbuf, self._rpos = b"", 0
        self._acks = {}

    def publish_acknowledged(self, topic: str, payload: bytes, retain: bool, on_ack: Callable[[], None]) -> int | None:
        """Queue a QoS 1 PUBLISH (MQTT 3.1.1) and call ``on_ack`` at its PUBACK; its packet id, None when
        not connected. The packet's bytes are paho's.

        paho's ``publish`` builds a message object, an info object with its own condition variable, and
        keeps the message to re-send it itself after a reconnection; at the PUBACK it calls back under
        two mutexes. The driver re-publishes what was not acknowledged by itself (`publish_window`), so
        none of that is needed: about a tenth of a subject worker's CPU went to it (cProfile, 10^4)."""
        if self._sock is None:
            return None
        topic_bytes = topic.encode()
        if not topic_bytes or b"+" in topic_bytes or b"#" in topic_bytes or len(topic_bytes) > 0xFFFF:
            raise ValueError("Invalid topic.")
        size = 4 + len(topic_bytes) + len(payload)
        if size > _MAX_REMAINING_LENGTH:  # what four bytes of remaining length hold (paho's publish refuses it too)
            raise ValueError("Payload too large.")
        mid = self._mid_generate()
        self._acks[mid] = on_ack
        header = bytearray((PUBLISH | 2 | int(retain),))
        while True:  # the remaining length, 7 bits a byte, low first
            byte, size = size & 0x7F, size >> 7
            header.append(byte | 0x80 if size else byte)
            if not size:
                break
        packet = b"".join((header, len(topic_bytes).to_bytes(2, "big"), topic_bytes, mid.to_bytes(2, "big"), payload))
        self._packet_queue(PUBLISH, packet, mid, 1)
        return mid

    def forget_acknowledgement(self, mid: int) -> None:
        self._acks.pop(mid, None)

    def _acknowledged(self, mid: int) -> MQTTErrorCode:
        on_ack = self._acks.pop(mid, None)
        if on_ack is not None:
            on_ack()
            return MQTTErrorCode.MQTT_ERR_SUCCESS
        with self._out_message_mutex:
            if mid in self._out_messages:
                return self._do_on_publish(mid, _PUBACK_SUCCESS, _NO_PROPERTIES)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def buffered(self) -> bool:
        """Bytes are read but not yet taken: the socket will not signal them again."""
        return self._rpos < len(self._rbuf)

    def _sock_recv(self, bufsize: int) -> bytes:
        buf, pos = self._rbuf, self._rpos
        if pos >= len(buf):
            data = super()._sock_recv(max(bufsize, RECV_CHUNK))
            if len(data) <= bufsize:
                return data
            buf, pos = self._rbuf, self._rpos = data, 0
        end = min(pos + bufsize, len(buf))
        self._rpos = end
        return buf[pos:end]

    def _packet_read(self) -> MQTTErrorCode:
        # paho reads a packet into a dict it then rebuilds, parses a PUBLISH into a message object with
        # its own info object and condition variable, and calls back under two mutexes: about a
        # seventh of a subject worker's CPU (cProfile, 10^4 subjects). A QoS 0/1 PUBLISH or a PUBACK of
        # MQTT 3.1.1 that is whole in the buffer is taken here; anything else, a packet cut by the end
        # of the buffer included, is paho's, which reads on from the same buffer.
        buf, pos = self._rbuf, self._rpos
        size = len(buf)
        handler = self.fast_handler
        if pos + 4 > size or handler is None or self._in_packet["command"] or self._protocol == paho_client.MQTTv5:
            return super()._packet_read()
        first = buf[pos]
        kind = first & 0xF0
        if kind == PUBACK:
            if first != PUBACK or buf[pos + 1] != 2:
                return super()._packet_read()
            self._rpos = pos + 4
            self._last_bytes_received = paho_client.time_func()  # what keep-alive reads (paho sets it per packet)
            return self._acknowledged((buf[pos + 2] << 8) | buf[pos + 3])
        qos = (first >> 1) & 3
        if kind != PUBLISH or qos > 1:  # (no per-topic paho callbacks here: every message goes to the handler)
            return super()._packet_read()
        start, length, shift = pos + 1, 0, 0
        while True:  # the remaining length: at most 4 bytes of 7 bits each, low first
            if start >= size or shift > 21:
                return super()._packet_read()
            byte = buf[start]
            start += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        end = start + length
        if end > size or length < 2:
            return super()._packet_read()
        topic_end = start + 2 + ((buf[start] << 8) | buf[start + 1])
        body = topic_end + 2 * qos
        if topic_end == start + 2 or body > end or (qos and buf[topic_end] == 0 and buf[topic_end + 1] == 0):
            return super()._packet_read()  # no topic (paho's protocol error), or packet id 0 (paho's to judge)
        self._rpos = end
        self._last_bytes_received = paho_client.time_func()
        try:
            topic = buf[start + 2:topic_end].decode()
        except UnicodeDecodeError:
            topic = ""  # not a topic anyone subscribes to: the handler counts it as a drop
        handler(topic, buf[body:end])
        if qos and not self._manual_ack:
            return self._send_puback((buf[topic_end] << 8) | buf[topic_end + 1])
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def _packet_write(self) -> MQTTErrorCode:
        # A run of packets that need nothing after their write (paho acts after writing a QoS 0
        # PUBLISH or a DISCONNECT) is joined into one packet; paho's partial-write handling applies.
        queue = self._out_packet
        if len(queue) > 1:
            parts: list[bytes | bytearray] = []
            size = 0
            while queue and size < SEND_CHUNK:
                packet = queue[0]
                command = packet["command"] & 0xF0
                if command == DISCONNECT or (command == PUBLISH and packet["qos"] == 0):
                    break
                queue.popleft()
                part = packet["packet"][packet["pos"]:]  # paho's packets are bytearrays: one copy
                parts.append(part)
                size += len(part)
            if parts:
                data = parts[0] if len(parts) == 1 else b"".join(parts)
                queue.appendleft({"command": PUBACK, "mid": 0, "qos": 1, "pos": 0, "to_process": len(data),
                                  "packet": data, "info": None})
        return super()._packet_write()

    def _handle_pubackcomp(self, cmd: Literal["PUBACK", "PUBCOMP"]) -> MQTTErrorCode:
        # An MQTT 3.1.1 PUBACK is its packet id alone; paho builds a reason code and a property
        # set for each (a fifth of its cost per publish). The same constant pair goes to aiomqtt,
        # which ignores both.
        packet = self._in_packet["packet"]
        if cmd == "PUBACK" and self._protocol != paho_client.MQTTv5 and len(packet) == 2:
            return self._acknowledged((packet[0] << 8) | packet[1])
        return super()._handle_pubackcomp(cmd)


class _BurstReadingClient(aiomqtt.Client):
    """An aiomqtt client that reads up to `READ_BURST` packets each time its socket is readable,
    and hands each received message straight to `on_payload` (when set) instead of queueing it.

    aiomqtt registers paho's ``loop_read()`` as the socket's reader, and paho 2.x reads one packet
    per call when nothing is in flight. A connection that receives most of the traffic (the
    collector's: every registration, key, submission, batch, vote and verdict of the round) is then
    served one packet per event-loop iteration, while thousands of subject connections share that
    loop: measured with 1,000 subjects, the collector's backlog reached 10 s. Reading a burst per
    wake-up removes the bottleneck; `_packet_read` returns ``MQTT_ERR_AGAIN`` once the socket is dry.

    aiomqtt queues every message as a `aiomqtt.Message` and its iterator creates a task and an
    `asyncio.wait` per message; with 10^4 hosted subjects that was a tenth of the process's time.
    `on_payload` is called synchronously from the read callback instead; it must not raise.

    Its paho client is a `_BufferedPahoClient`.
    """

    on_payload: PayloadHandler | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client.__class__ = _BufferedPahoClient  # same state, buffered socket I/O
        cast(_BufferedPahoClient, self._client).reset_buffer()

    # A subscribe or unsubscribe abandoned at a timeout or when hosting stops is still answered by
    # the broker; aiomqtt logs each such answer with a traceback. Nobody waits for it: drop it.
    def _on_subscribe(self, client: Any, userdata: Any, mid: int, *args: Any) -> None:
        if mid in self._pending_subscribes:
            super()._on_subscribe(client, userdata, mid, *args)

    def _on_unsubscribe(self, client: Any, userdata: Any, mid: int, *args: Any) -> None:
        if mid in self._pending_unsubscribes:
            super()._on_unsubscribe(client, userdata, mid, *args)

    def _on_message(self, client: Any, userdata: Any, message: Any) -> None:
        handler = self.on_payload
        if handler is None:
            super()._on_message(client, userdata, message)
            return
        try:
            topic = message.topic
        except UnicodeDecodeError:
            topic = ""  # not a topic anyone subscribes to: the handler counts it as a drop
        handler(topic, message.payload)

    def _on_socket_open(self, client: Any, userdata: Any, sock: Any) -> None:
        super()._on_socket_open(client, userdata, sock)
        buffered = cast(_BufferedPahoClient, client)
        buffered.reset_buffer()
        disconnected = self._disconnected
        loop = self._loop

        def read_burst() -> None:
            try:
                for _ in range(READ_BURST):
                    if client._sock is None:
                        return
                    rc = client._packet_read()
                    if rc == MQTTErrorCode.MQTT_ERR_AGAIN:
                        break
                    if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                        client._loop_rc_handle(rc)
                        return
                # TLS sockets can hold decoded bytes that no longer make the socket readable.
                while client._sock is not None and hasattr(client._sock, "pending") and client._sock.pending() > 0:
                    client.loop_read()
                # Neither can bytes already read into the buffer: their turn comes after others'.
                if client._sock is not None and buffered.buffered():
                    loop.call_soon(read_burst)
            except Exception as exc:  # as aiomqtt does: a broken connection ends the session
                if not disconnected.done():
                    disconnected.set_exception(exc)

        # Queued after aiomqtt's own add_reader (same thread-safe FIFO), so this one replaces it; then
        # one read, for bytes that aiomqtt's reader may have buffered meanwhile (the socket would not
        # signal them again).
        self._loop.call_soon_threadsafe(self._loop.add_reader, sock.fileno(), read_burst)
        self._loop.call_soon_threadsafe(read_burst)


def client_id_of(node: Node) -> str:
    """The node's MQTT client id: its ``client_id`` attribute (a subject's sid) when it has one."""
    client_id = getattr(node, "client_id", None)
    if isinstance(client_id, str) and client_id:
        return client_id
    # A random suffix: two processes hosting id-less nodes must not kick each other off the broker.
    return f"coutil-{os.urandom(6).hex()}"


def make_client(address: BrokerAddress, client_id: str, options: DriverOptions,
                on_payload: PayloadHandler | None = None) -> aiomqtt.Client:
    """An MQTT 3.1.1 clean-session client for one connection of the driver; with ``on_payload``
    every received message is handed to it as (topic, payload) and `aiomqtt.Client.messages` stays
    empty."""
    client = _BurstReadingClient(
        address.host,
        address.port,
        username=address.username,
        password=address.password,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V311,
        clean_session=True,
        keepalive=options.keepalive,
        timeout=options.connect_attempt_timeout,
        tls_params=address.tls_parameters(),
        tls_insecure=address.insecure if address.tls else None,
        max_inflight_messages=0,  # unlimited: the driver's window bounds it (`DriverOptions.publish_window`)
        # Small request/ack messages: without TCP_NODELAY, Nagle's algorithm meeting delayed ACKs
        # adds ~40 ms to every hop (measured: 88 ms per request/ack cycle on loopback).
        socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)],
    )
    # aiomqtt warns above 10 unacknowledged publishes; our window is deliberately larger.
    client.pending_calls_threshold = options.publish_window + 16
    client.on_payload = on_payload
    cast(Any, client)._client.fast_handler = on_payload
    # paho formats a debug record for every packet it reads or writes; nobody reads them here.
    cast(Any, client)._client.disable_logger()
    return client


def disconnected_future(client: aiomqtt.Client) -> asyncio.Future[None]:
    """The future aiomqtt resolves (or fails) when the connection ends."""
    future: asyncio.Future[None] = cast(Any, client)._disconnected
    return future


class _Acknowledgement:
    """What aiomqtt keeps per pending publish (it calls ``.set()`` on the broker's PUBACK), here
    resolving a future so that a whole window is awaited with one ``gather`` of plain futures."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future

    def set(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


def _acknowledge(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def publish_window(client: aiomqtt.Client, window: Sequence[Outgoing], timeout: float) -> None:
    """Publish ``window`` in order and wait until the broker acknowledged every QoS 1 message.

    ``aiomqtt.Client.publish`` costs a task, a timer and a scan of every pending call per message
    (about 60 us, and quadratic in the window); a round's collector publishes tens of thousands of
    messages. This issues them straight to the paho client aiomqtt wraps, registers each pending
    acknowledgement the way aiomqtt does (its PUBACK callback resolves it, even one that arrives
    before we registered is handled there), and waits for the window once. Raises `aiomqtt.MqttError`
    on a lost connection or a missing acknowledgement.
    """
    wrapped = cast(Any, client)
    paho = wrapped._client
    lean = isinstance(paho, _BufferedPahoClient) and paho._protocol != paho_client.MQTTv5
    pending: dict[int, Any] = wrapped._pending_publishes
    loop = asyncio.get_running_loop()
    futures: list[asyncio.Future[None]] = []
    mids: list[int] = []
    lean_mids: list[int] = []
    try:
        for out in window:
            if lean and out.qos == 1:
                acknowledged: asyncio.Future[None] = loop.create_future()
                mid = paho.publish_acknowledged(out.topic, out.payload, out.retain,
                                                functools.partial(_acknowledge, acknowledged))
                if mid is None:
                    raise aiomqtt.MqttCodeError(MQTTErrorCode.MQTT_ERR_NO_CONN, "Could not publish message")
                futures.append(acknowledged)
                lean_mids.append(mid)
                continue
            info = paho.publish(out.topic, out.payload, out.qos, out.retain)
            if info.rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
                raise aiomqtt.MqttCodeError(info.rc, "Could not publish message")
            if out.qos and not info.is_published():
                future: asyncio.Future[None] = loop.create_future()
                pending[info.mid] = _Acknowledgement(future)
                futures.append(future)
                mids.append(info.mid)
        if futures:
            # `asyncio.wait`, not `wait_for(gather(...))`: no gathering future left behind with an
            # unretrieved CancelledError, and no cancellation swallowed (CPython gh-86296).
            _, missing = await asyncio.wait(futures, timeout=timeout)
            if missing:
                raise aiomqtt.MqttError(f"{len(missing)} publishes not acknowledged within {timeout:g} s")
    finally:
        for mid in mids:
            pending.pop(mid, None)
        for mid in lean_mids:
            paho.forget_acknowledgement(mid)
