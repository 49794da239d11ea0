"""The MQTT client's fast read path (`coutil.net.mqtt._BufferedPahoClient._packet_read`), without a broker:
the same stream of packets, cut anywhere between two socket reads, gives the same (topic, payload) pairs
and the same PUBACKs as paho's own path, and what the fast path does not take (QoS 2, an empty topic, a
packet id 0, a remaining length over four bytes) still gets paho's answer. A lean publish sends paho's bytes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from paho.mqtt import client as paho_client
from paho.mqtt.enums import CallbackAPIVersion, MQTTErrorCode

from coutil.net.mqtt import _BufferedPahoClient


def _length(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _publish(topic: bytes, payload: bytes, qos: int = 0, mid: int = 0, retain: bool = False) -> bytes:
    body = len(topic).to_bytes(2, "big") + topic + (mid.to_bytes(2, "big") if qos else b"") + payload
    return bytes([0x30 | (qos << 1) | int(retain)]) + _length(len(body)) + body


def _puback(mid: int) -> bytes:
    return bytes([0x40, 2]) + mid.to_bytes(2, "big")


class _Socket:
    """Hands out the stream in the given chunks, then would block."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = list(chunks)

    def recv(self, size: int) -> bytes:
        if not self.chunks:
            raise BlockingIOError
        chunk = self.chunks.pop(0)
        if len(chunk) > size:
            self.chunks.insert(0, chunk[size:])
        return chunk[:size]

    def close(self) -> None:
        self.chunks = []


#: The topics the last `_read_all` took on the fast path.
taken_fast: list[str] = []


def _read_all(chunks: list[bytes], fast: bool) -> tuple[list[tuple[str, bytes]], list[int], list[int], MQTTErrorCode]:
    """Read the stream; (messages handed out, PUBACK ids sent, ids acknowledged to us, last return code)."""
    client: Any = paho_client.Client(CallbackAPIVersion.VERSION2, protocol=paho_client.MQTTv311)
    client.__class__ = _BufferedPahoClient
    client.reset_buffer()
    client._sock = _Socket(chunks)
    received: list[tuple[str, bytes]] = []
    acknowledged: list[int] = []
    sent: list[int] = []
    taken_fast.clear()
    # As `_BurstReadingClient` does: paho's path (a packet cut by a read, the first of each read) calls
    # ``on_message``, which hands the payload to the same handler as the fast path.
    client.on_message = lambda _c, _u, message: received.append((message.topic, message.payload))
    if fast:
        def handle(topic: str, payload: bytes) -> None:
            received.append((topic, payload))
            taken_fast.append(topic)

        client.fast_handler = handle

    def ack(mid: int, *_: Any) -> MQTTErrorCode:
        sent.append(mid)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    def acknowledged_to_us(mid: int, *_: Any) -> MQTTErrorCode:
        acknowledged.append(mid)
        return MQTTErrorCode.MQTT_ERR_SUCCESS

    client._send_puback = ack
    for mid in (5, 6):
        client._out_messages[mid] = paho_client.MQTTMessage(mid=mid, topic=b"t")
    client._do_on_publish = acknowledged_to_us
    rc = MQTTErrorCode.MQTT_ERR_SUCCESS
    for _ in range(1000):
        rc = client._packet_read()
        if rc != MQTTErrorCode.MQTT_ERR_SUCCESS:
            break
    return received, sent, acknowledged, rc


def test_the_fast_path_reads_what_paho_reads_wherever_the_stream_is_cut() -> None:
    stream = b"".join([
        _publish(b"coutil/v2/x/g/1", b"\x01\x02", qos=0),
        _puback(5),
        _publish(b"a", bytes(range(256)) * 2, qos=1, mid=7),  # a two-byte remaining length
        _puback(9),  # for nothing in flight: ignored
        _publish(b"b/\xc3\xa9", b"", qos=1, mid=8, retain=True),
        _publish(b"c", b"x" * 20000, qos=1, mid=65535),  # three bytes of remaining length
        _puback(6),
        _publish(b"d", b"end"),
    ])
    expected = _read_all([stream], fast=False)
    assert expected[0][-1] == ("d", b"end") and expected[1] == [7, 8, 65535] and expected[2] == [5, 6]
    assert expected[3] == MQTTErrorCode.MQTT_ERR_AGAIN
    assert _read_all([stream], fast=True) == expected
    assert taken_fast == [t for t, _ in expected[0][1:]]  # all but the first: the first of a read is paho's
    rng = random.Random(4)
    for _ in range(60):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 6)))
        chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        assert _read_all(chunks, fast=True) == expected


def test_a_topic_that_is_not_utf8_is_handed_out_as_no_topic() -> None:
    # (Behind a first packet: the first of a read is paho's.)
    received, sent, _, _ = _read_all([_publish(b"t", b"") + _publish(b"\xff\xfe", b"p", qos=1, mid=3)], fast=True)
    assert received == [("t", b""), ("", b"p")] and sent == [3]


@pytest.mark.parametrize("packet", [
    _publish(b"", b"p"),  # MQTT 3.1.1 forbids an empty topic
    _publish(b"t", b"p", qos=1, mid=0),  # a packet id 0 (paho takes it)
    bytes([0x30, 0x80, 0x80, 0x80, 0x80, 0x01]) + b"\x00" * 8,  # a fifth byte of remaining length
])
def test_what_the_fast_path_does_not_take_gets_pahos_answer(packet: bytes) -> None:
    assert _read_all([packet], fast=True)[3] == _read_all([packet], fast=False)[3] != MQTTErrorCode.MQTT_ERR_SUCCESS


def test_qos_2_is_left_to_paho() -> None:
    fast = _read_all([_publish(b"t", b"p", qos=2, mid=4)], fast=True)
    slow = _read_all([_publish(b"t", b"p", qos=2, mid=4)], fast=False)
    assert fast == slow


class _Wire(_Socket):
    """Records what is sent."""

    def __init__(self) -> None:
        super().__init__([])
        self.sent = bytearray()

    def send(self, data: bytes) -> int:
        self.sent += data
        return len(data)


@pytest.mark.parametrize(("topic", "payload", "retain"), [
    ("coutil/v2/r/s/ab/g", b"\x01" * 5, False),
    ("t", b"", True),
    ("coutil/v2/r/release", bytes(range(256)) * 80, True),  # three bytes of remaining length
])
def test_a_lean_publish_sends_pahos_bytes_and_its_puback_resolves_it(topic: str, payload: bytes, retain: bool) -> None:
    wires = []
    acknowledged: list[str] = []
    for lean in (False, True):
        client: Any = paho_client.Client(CallbackAPIVersion.VERSION2, protocol=paho_client.MQTTv311)
        client.__class__ = _BufferedPahoClient
        client.reset_buffer()
        client._sock = wire = _Wire()
        if lean:
            mid = client.publish_acknowledged(topic, payload, retain, lambda: acknowledged.append("ack"))
        else:
            mid = client.publish(topic, payload, 1, retain).mid
        client.loop_write()
        wires.append(bytes(wire.sent))
        if lean:
            # Its PUBACK, on the fast path (behind another packet) and on paho's: called once.
            wire.chunks = [_puback(mid + 1) + _puback(mid) + _puback(mid)]
            client.fast_handler = lambda *_: None
            while client._packet_read() == MQTTErrorCode.MQTT_ERR_SUCCESS:
                pass
            assert acknowledged == ["ack"] and not client._acks
    assert wires[0] == wires[1] and len(wires[0]) > len(payload)


def test_a_lean_publish_without_a_connection_is_refused() -> None:
    client: Any = paho_client.Client(CallbackAPIVersion.VERSION2, protocol=paho_client.MQTTv311)
    client.__class__ = _BufferedPahoClient
    client.reset_buffer()
    assert client.publish_acknowledged("t", b"p", False, lambda: None) is None
    client._sock = _Wire()
    with pytest.raises(ValueError, match="Invalid topic"):
        client.publish_acknowledged("t/+", b"p", False, lambda: None)
    with pytest.raises(ValueError, match="Invalid topic"):
        client.publish_acknowledged("t" * 70_000, b"p", False, lambda: None)
    with pytest.raises(ValueError, match="Payload too large"):
        client.publish_acknowledged("t", bytes(268_435_452), False, lambda: None)
    assert not client._acks
