"""Wire codec: every message type round-trips, and no input whatsoever escapes as another exception.

Strategies are built from the message dataclasses' annotations with byte lengths taken from SPEC §7.3
(independently of the codec's own schema tables).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto
from coutil.protocol.messages import MESSAGE_TYPES, Message, Submit
from coutil.protocol.node import SeededRandom

KEY = crypto.SigningKey.generate(SeededRandom("codec-tests"))
OTHER = crypto.SigningKey.generate(SeededRandom("codec-tests-other"))
VARIABLE = {"onion", "items", "rows"}

printable = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Zs")), max_size=20)


def _strategy(annotation: Any, name: str) -> st.SearchStrategy[Any]:
    if annotation is bytes:
        if name in VARIABLE:
            return st.binary(max_size=200)
        return st.binary(min_size=16, max_size=16) if name == "round_id" else st.binary(min_size=32, max_size=32)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(0, 2**53 - 1)
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is str:
        return printable
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _message_strategy(annotation)
    args = typing.get_args(annotation)
    if len(args) == 2 and args[1] is Ellipsis:
        return st.lists(_strategy(args[0], name), max_size=5).map(tuple)
    return st.tuples(*(_strategy(a, name) for a in args))


def _message_strategy(cls: type, sender: bytes | None = None) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    kwargs = {f.name: _strategy(hints[f.name], f.name) for f in dataclasses.fields(cls)}
    if sender is not None:
        kwargs["sender"] = st.just(sender)
    return st.builds(cls, **kwargs)


any_message = st.one_of(*(_message_strategy(cls, KEY.public) for cls in MESSAGE_TYPES.values()))


@pytest.mark.parametrize("tag", sorted(MESSAGE_TYPES))
def test_round_trip_every_type(tag: str) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_message_strategy(MESSAGE_TYPES[tag], KEY.public))
    def check(message: Message) -> None:
        data = codec.encode(message, KEY)
        decoded = codec.decode(data, codec.Limits())
        assert decoded.message == message
        assert decoded.digest == codec.payload_digest(decoded.payload) == codec.payload_digest_of(data)
        # Re-encoding is byte-identical (Ed25519 is deterministic, the packer canonical for our values).
        assert codec.encode(decoded.message, KEY) == data
        assert codec.message_from_plain(codec.message_to_plain(message)) == message

    check()


def _assert_rejected(data: bytes, limits: codec.Limits | None = None) -> str:
    with pytest.raises(RemoteProtocolError) as info:
        codec.decode(data, limits)
    assert info.value.reason in codec.REASONS
    assert not info.value.ignore
    return info.value.reason


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_rejected_cleanly(data: bytes) -> None:
    _assert_rejected(data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_message, st.data())
def test_mutated_messages_are_rejected_or_unchanged(message: Message, data: st.DataObject) -> None:
    encoded = bytearray(codec.encode(message, KEY))
    kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
    position = data.draw(st.integers(0, len(encoded) - 1))
    if kind == "flip":
        encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    elif kind == "truncate":
        del encoded[position:]
    elif kind == "insert":
        encoded[position:position] = data.draw(st.binary(min_size=1, max_size=4))
    else:
        del encoded[position]
    try:
        decoded = codec.decode(bytes(encoded))
    except RemoteProtocolError as exc:
        assert exc.reason in codec.REASONS
    else:
        # Only a change the signature does not cover may survive, and it cannot alter the message.
        assert decoded.message == message


# Type confusion: a correctly signed payload whose fields are replaced by arbitrary msgpack values.
msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.binary(max_size=40)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4),
    max_leaves=8,
)


def _signed(payload: bytes, key: crypto.SigningKey = KEY, version: object = codec.PROTOCOL_VERSION) -> bytes:
    packed: bytes = msgpack.packb([version, payload, key.sign(codec.SIGNATURE_DOMAIN + payload)], use_bin_type=True)
    return packed


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_message, st.data())
def test_type_confusion_is_rejected(message: Message, data: st.DataObject) -> None:
    body = list(msgpack.unpackb(codec.encode_payload(message), raw=False))
    index = data.draw(st.integers(1, len(body) - 1))
    replacement = data.draw(msgpack_values)
    body[index] = replacement
    payload = msgpack.packb(body, use_bin_type=True)
    try:
        decoded = codec.decode(_signed(payload))
    except RemoteProtocolError as exc:
        assert exc.reason in codec.REASONS
    else:
        assert type(decoded.message) is type(message)  # the replacement happened to be valid


def test_field_rules() -> None:
    good = Submit(bytes(16), KEY.public, 1, 2, b"onion", bytes(32))
    body = list(msgpack.unpackb(codec.encode_payload(good), raw=False))

    def reason(**changes: Any) -> str:
        b = list(body)
        for index, value in changes.items():
            b[int(index[1:])] = value
        return _assert_rejected(_signed(msgpack.packb(b, use_bin_type=True)))

    assert reason(i3=True) == "bad_field"  # a bool is not a uint
    assert reason(i3=-1) == "bad_field"
    assert reason(i3=2**53) == "bad_field"
    assert reason(i3=1.0) == "bad_field"
    assert reason(i1=bytes(15)) == "bad_field"  # round id length
    assert reason(i5="onion") == "bad_field"  # str is not bin
    assert _assert_rejected(_signed(msgpack.packb([*body, 0], use_bin_type=True))) == "bad_field"
    assert _assert_rejected(_signed(msgpack.packb(body[:-1], use_bin_type=True))) == "bad_field"
    payload = msgpack.packb(body, use_bin_type=True)
    assert _assert_rejected(_signed(payload, OTHER)) == "bad_signature"  # signed by someone else
    assert codec.decode(_signed(payload)).message == good


def test_float_and_string_rules() -> None:
    from coutil.protocol.messages import Fetch, Register

    reg = list(msgpack.unpackb(codec.encode_payload(Register(bytes(16), KEY.public, (1.0, 2.0), bytes(32))), raw=False))
    for bad in (math.nan, math.inf, 1):
        reg[3] = [1.0, bad]
        assert _assert_rejected(_signed(msgpack.packb(reg, use_bin_type=True))) == "bad_field"
    fetch = list(msgpack.unpackb(codec.encode_payload(Fetch(bytes(16), KEY.public, "release")), raw=False))
    fetch[3] = "rel\x00ease"
    assert _assert_rejected(_signed(msgpack.packb(fetch, use_bin_type=True))) == "bad_field"
    fetch[3] = "x" * 300
    limits = codec.Limits(max_string_bytes=256)
    assert _assert_rejected(_signed(msgpack.packb(fetch, use_bin_type=True)), limits) == "oversized"


def test_limits() -> None:
    message = Submit(bytes(16), KEY.public, 1, 2, bytes(70000), bytes(32))
    data = codec.encode(message, KEY)
    assert _assert_rejected(data, codec.Limits(max_message_bytes=65536)) == "oversized"
    assert codec.decode(data, codec.Limits(max_message_bytes=len(data))).message == message
    from coutil.protocol.messages import Batch

    batch = Batch(bytes(16), KEY.public, 0, 0, 1, (b"",) * 5)
    assert _assert_rejected(codec.encode(batch, KEY), codec.Limits(max_array_entries=4)) == "oversized"
    deep = b"\x91" * 5000 + b"\xc0"
    assert _assert_rejected(_signed(deep)) in ("not_msgpack", "bad_envelope")


def test_encode_refuses_what_a_peer_would_reject() -> None:
    with pytest.raises(ValueError):
        codec.encode(Submit(bytes(16), OTHER.public, 1, 2, b"", bytes(32)), KEY)  # sender is not the signer
    with pytest.raises(ValueError):
        codec.encode(Submit(bytes(15), KEY.public, 1, 2, b"", bytes(32)), KEY)
    with pytest.raises(ValueError):
        codec.encode(Submit(bytes(16), KEY.public, -1, 2, b"", bytes(32)), KEY)


def test_encode_coerces_numeric_types() -> None:
    import numpy as np

    from coutil.protocol.messages import Register

    message = Register(bytes(16), KEY.public, (1, np.float64(2.5)), bytes(32))
    decoded = codec.decode(codec.encode(message, KEY)).message
    assert isinstance(decoded, Register) and decoded.qi == (1.0, 2.5)
    assert all(type(v) is float for v in decoded.qi)


def test_decode_cache_verifies_each_envelope_once_even_after_eviction(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoded-message LRU can drop a message before its last receiver asks (thousands of groups
    step at once); the memo of verified envelopes keeps the signature from being checked again."""
    calls: list[bytes] = []
    real_verify = crypto.verify

    def counting(public: bytes, data: bytes, signature: bytes) -> bool:
        calls.append(signature)
        return real_verify(public, data, signature)

    monkeypatch.setattr(crypto, "verify", counting)
    round_id = bytes(16)
    first = codec.encode(Submit(round_id, KEY.public, 1, 0, b"onion-1", bytes(32)), KEY)
    second = codec.encode(Submit(round_id, KEY.public, 1, 0, b"onion-2", bytes(32)), KEY)
    cache = codec.DecodeCache(capacity=1)
    limits = codec.Limits()
    for data in (first, second, first, second, first):  # each decode evicts the other message
        assert cache.decode(data, limits).envelope == data
    assert len(calls) == 2


def test_verified_envelopes_never_excuse_a_different_signature() -> None:
    """Same payload, forged signature: a different envelope, verified (and rejected) on its own."""
    round_id = bytes(16)
    genuine = codec.encode(Submit(round_id, KEY.public, 1, 0, b"onion", bytes(32)), KEY)
    payload = codec.decode(genuine).payload
    forged = msgpack.packb([codec.PROTOCOL_VERSION, payload, bytes(64)], use_bin_type=True)
    cache = codec.DecodeCache()
    limits = codec.Limits()
    cache.decode(genuine, limits)
    with pytest.raises(RemoteProtocolError, match="bad_signature"):
        cache.decode(forged, limits)
    verified = codec.VerifiedEnvelopes(capacity=2)
    for data in (genuine, genuine):
        codec.decode(data, limits, verified)
    with pytest.raises(RemoteProtocolError, match="bad_signature"):
        codec.decode(forged, limits, verified)


def test_a_large_payload_is_compared_byte_for_byte_once_per_copy() -> None:
    """Each connection of a process hands its own copy of a bulletin to each of its nodes: after one
    comparison with the cached copy, a copy is found by identity (no per-node comparison of megabytes)."""
    compared: list[int] = []

    class CountingBytes(bytes):
        __hash__ = bytes.__hash__

        def __eq__(self, other: object) -> bool:
            compared.append(1)
            return bytes.__eq__(self, other)

    envelope = codec.encode(Submit(bytes(16), KEY.public, 1, 0, bytes(70_000), bytes(32)), KEY)
    assert len(envelope) > codec.DecodeCache.LARGE
    cache = codec.DecodeCache()
    limits = codec.Limits()
    first = cache.decode(envelope, limits)
    copy = CountingBytes(envelope)  # another connection's copy: equal bytes, another object
    for _ in range(100):  # one per node of that connection
        assert cache.decode(copy, limits) is first
    assert len(compared) <= 2, len(compared)  # the first lookup's, not one per node (100 without the fast path)
    assert cache.decode(copy, codec.Limits(max_message_bytes=10**7)).payload == first.payload  # other limits


def test_peek_tag_reads_the_tag_from_the_headers_only() -> None:
    """A multiplexed connection peeks every group message it receives (to keep members' run_keys): the tag is
    read from the payload's headers, nothing of the payload decoded; anything that is no envelope is None."""
    message = Submit(bytes(16), KEY.public, 1, 2, bytes(70), bytes(32))
    assert codec.peek_tag(codec.encode(message, KEY)) == "submit"
    body = b"\x93" + msgpack.packb("run_keys") + b"\xc1\xc1"  # 0xc1 is never valid msgpack: not decoded
    assert codec.peek_tag(_signed(body)) == "run_keys"
    assert codec.peek_tag(b"\x00") is None and codec.peek_tag(_signed(msgpack.packb(7))) is None
    assert codec.peek_tag(_signed(b"\x91\xa2\xff\xfe")) is None  # a tag that is not UTF-8
