"""Wire codec (protocol/SPEC.md §7): signed msgpack envelopes around the tagged message union.

``envelope = [1, payload, signature]`` with ``payload = msgpack [tag, round_id, sender, *fields]`` and
``signature = Ed25519(sender, "coutil/v2\\x00" || payload)``. `decode` checks in the order of SPEC §7.2
and turns *every* failure into a `RemoteProtocolError` with a stable reason: ``oversized``,
``not_msgpack``, ``bad_envelope``, ``bad_version``, ``unknown_type``, ``bad_field``, ``bad_signature``.
The signature is verified over the exact payload bytes received (msgpack has no canonical form).

Field types come from the message dataclasses' annotations (`bytes`, `int` = uint, `float`,
`bool`, `str`, ``tuple[T, ...]``, fixed tuples, nested dataclasses); byte lengths, which
annotations cannot express, come from `_BIN_LENGTHS`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import typing
from collections import OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgpack

from coutil.errors import RemoteProtocolError
from coutil.protocol import crypto
from coutil.protocol.messages import MESSAGE_TYPES, Message, Release
from coutil.protocol.unpack import array_size, first_str, third_bin, unpack

PROTOCOL_VERSION = 2
SIGNATURE_DOMAIN = crypto.SIGNATURE_DOMAIN
#: Defaults of SPEC §12.
MAX_MESSAGE_BYTES = 64 * 2**20
MAX_ARRAY_ENTRIES = 4096
MAX_LONG_ARRAY_ENTRIES = 2**20
MAX_STRING_BYTES = 65536
#: Entries of all the arrays of one payload together (SPEC §7.1; `coutil.protocol.unpack` says why). The
#: release (two per-group arrays of up to 2^20 entries) has a larger bound than every other message, whose
#: largest honest instance (an assign's fellows at the largest group the array limit admits, each with a
#: 64-hash inclusion proof) holds about 2.8 x 10^5 entries.
MAX_PAYLOAD_ENTRIES = 2**19
MAX_RELEASE_ENTRIES = 2 * MAX_LONG_ARRAY_ENTRIES + 2**16
#: Largest uint on the wire: integers stay exact in every language's double.
UINT_BOUND = 2**53

#: Stable rejection reasons of the codec, in validation order (SPEC §7.2).
REASONS = ("oversized", "not_msgpack", "bad_envelope", "bad_version", "unknown_type", "bad_field", "bad_signature")

#: Exact byte lengths by field name (at any depth below that field); None = any length.
_BIN_LENGTHS: dict[str, int | None] = {"round_id": 16, "onion": None, "items": None, "rows": None, "no_go_vote": None,
                                      "taken": None}
_DEFAULT_BIN_LENGTH = 32
#: Arrays bounded only by the message size (and `Limits.max_long_array_entries`), by (tag, field).
_LONG_ARRAYS = {("release", "group_ids"), ("release", "group_sizes")}


@dataclass(frozen=True)
class Limits:
    """Decoding limits (SPEC §7.1, §12). Beyond them a message is REJECT ``oversized``."""

    max_message_bytes: int = MAX_MESSAGE_BYTES
    #: Entries of any array field, except the release's per-group arrays.
    max_array_entries: int = MAX_ARRAY_ENTRIES
    #: Entries of the release's per-group arrays (also the msgpack decoder's hard array limit).
    max_long_array_entries: int = MAX_LONG_ARRAY_ENTRIES
    max_string_bytes: int = MAX_STRING_BYTES
    #: Entries of all the arrays of one payload together (nested ones included), the release excepted.
    max_payload_entries: int = MAX_PAYLOAD_ENTRIES
    #: The same for a release.
    max_release_entries: int = MAX_RELEASE_ENTRIES


@dataclass(frozen=True)
class Decoded:
    """A verified message with the exact payload bytes it was signed over and their SHA-256."""

    message: Message
    payload: bytes
    digest: bytes
    #: The whole envelope as received (what a relay re-publishes, signature included).
    envelope: bytes = b""


_DEFAULT_LIMITS = Limits()


def _bad(detail: str) -> RemoteProtocolError:
    return RemoteProtocolError("bad_field", detail)


# ---------------------------------------------------------------------- field schema
class _Kind:
    """One node of a message's field schema: strict decode checks, encode coercion, JSON form."""

    def check(self, value: object, limits: Limits, where: str) -> Any:
        raise NotImplementedError

    def wire(self, value: object) -> object:
        return value

    def plain(self, value: Any) -> object:
        return value

    def from_plain(self, value: Any) -> object:
        return value


class _Bin(_Kind):
    def __init__(self, length: int | None) -> None:
        self.length = length

    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not bytes:
            raise _bad(f"{where}: expected bin, got {type(value).__name__}")
        if self.length is not None and len(value) != self.length:
            raise _bad(f"{where}: expected {self.length} bytes, got {len(value)}")
        return value

    def wire(self, value: object) -> object:
        return bytes(value) if isinstance(value, (bytearray, memoryview)) else value

    def plain(self, value: Any) -> object:
        return bytes(value).hex()

    def from_plain(self, value: Any) -> object:
        return bytes.fromhex(value)


class _UInt(_Kind):
    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not int:
            raise _bad(f"{where}: expected uint, got {type(value).__name__}")
        if not 0 <= value < UINT_BOUND:
            raise _bad(f"{where}: uint out of range [0, 2^53)")
        return value

    def wire(self, value: object) -> object:
        # numpy integers and the like become plain ints; bools stay bools (and are rejected).
        if not isinstance(value, bool) and hasattr(value, "__index__"):
            return int(typing.cast(Any, value))
        return value


class _Float(_Kind):
    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not float:
            raise _bad(f"{where}: expected float, got {type(value).__name__}")
        if not math.isfinite(value):
            raise _bad(f"{where}: float not finite")
        return value

    def wire(self, value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)  # an int (or numpy float) is sent as float 64
        return value


class _Bool(_Kind):
    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not bool:
            raise _bad(f"{where}: expected bool, got {type(value).__name__}")
        return value


class _Str(_Kind):
    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not str:
            raise _bad(f"{where}: expected str, got {type(value).__name__}")
        if len(value) > limits.max_string_bytes or len(value.encode("utf-8")) > limits.max_string_bytes:
            raise RemoteProtocolError("oversized", f"{where}: string longer than {limits.max_string_bytes} bytes")
        if not value.isprintable():
            raise _bad(f"{where}: string holds a control or unprintable character")
        return value


class _Array(_Kind):
    def __init__(self, item: _Kind, long: bool) -> None:
        self.item = item
        self.long = long

    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not tuple:
            raise _bad(f"{where}: expected array, got {type(value).__name__}")
        bound = limits.max_long_array_entries if self.long else limits.max_array_entries
        if len(value) > bound:
            raise RemoteProtocolError("oversized", f"{where}: array of {len(value)} entries, limit {bound}")
        item = self.item
        if type(item) is _Bin:
            # The common array (keys, hashes, ciphertexts): checked in one pass and kept as it is.
            length = item.length
            for v in value:
                if type(v) is not bytes or (length is not None and len(v) != length):
                    item.check(v, limits, where)  # raises, with the detail
            return value
        check = item.check
        return tuple([check(v, limits, where) for v in value])

    def wire(self, value: object) -> object:
        if not isinstance(value, (list, tuple)):
            return value
        if type(value) is tuple and type(self.item) is _Bin and all(type(v) is bytes for v in value):
            return value
        return tuple([self.item.wire(v) for v in value])

    def plain(self, value: Any) -> object:
        return [self.item.plain(v) for v in value]

    def from_plain(self, value: Any) -> object:
        return tuple(self.item.from_plain(v) for v in value)


class _Fixed(_Kind):
    """A fixed-size heterogeneous tuple, e.g. ``tuple[bytes, str]``."""

    def __init__(self, items: tuple[_Kind, ...]) -> None:
        self.items = items

    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not tuple or len(value) != len(self.items):
            raise _bad(f"{where}: expected an array of {len(self.items)} entries")
        return tuple(kind.check(v, limits, where) for kind, v in zip(self.items, value, strict=True))

    def wire(self, value: object) -> object:
        if not isinstance(value, (list, tuple)) or len(value) != len(self.items):
            return value
        return tuple(kind.wire(v) for kind, v in zip(self.items, value, strict=True))

    def plain(self, value: Any) -> object:
        return [kind.plain(v) for kind, v in zip(self.items, value, strict=True)]

    def from_plain(self, value: Any) -> object:
        return tuple(kind.from_plain(v) for kind, v in zip(self.items, value, strict=True))


class _Struct(_Kind):
    """A dataclass: on the wire the array of its fields in declaration order."""

    def __init__(self, cls: type, fields: tuple[tuple[str, _Kind], ...]) -> None:
        self.cls = cls
        self.fields = fields

    def check(self, value: object, limits: Limits, where: str) -> Any:
        if type(value) is not tuple or len(value) != len(self.fields):
            raise _bad(f"{where}: expected an array of {len(self.fields)} fields")
        args = [kind.check(v, limits, f"{where}.{name}") for (name, kind), v in zip(self.fields, value, strict=True)]
        return self.cls(*args)

    def validate(self, value: object, limits: Limits, where: str) -> None:
        """`check` without building the message (what `encode_payload` needs of its own output)."""
        if type(value) is not tuple or len(value) != len(self.fields):
            raise _bad(f"{where}: expected an array of {len(self.fields)} fields")
        for (name, kind), v in zip(self.fields, value, strict=True):
            kind.check(v, limits, f"{where}.{name}")

    def wire(self, value: object) -> object:
        if not isinstance(value, self.cls):
            return value
        return tuple([kind.wire(getattr(value, name)) for name, kind in self.fields])

    def plain(self, value: Any) -> object:
        return {name: kind.plain(getattr(value, name)) for name, kind in self.fields}

    def from_plain(self, value: Any) -> object:
        return self.cls(*(kind.from_plain(value[name]) for name, kind in self.fields))


def _kind_of(annotation: Any, tag: str, field_name: str) -> _Kind:
    if annotation is bytes:
        return _Bin(_BIN_LENGTHS.get(field_name, _DEFAULT_BIN_LENGTH))
    if annotation is bool:
        return _Bool()
    if annotation is int:
        return _UInt()
    if annotation is float:
        return _Float()
    if annotation is str:
        return _Str()
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return _struct_of(annotation, tag)
    if typing.get_origin(annotation) is tuple:
        args = typing.get_args(annotation)
        if len(args) == 2 and args[1] is Ellipsis:
            return _Array(_kind_of(args[0], tag, field_name), (tag, field_name) in _LONG_ARRAYS)
        return _Fixed(tuple(_kind_of(a, tag, field_name) for a in args))
    raise TypeError(f"no wire encoding for {annotation!r} ({tag}.{field_name})")


def _struct_of(cls: type, tag: str) -> _Struct:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    return _Struct(cls, tuple((name, _kind_of(hints[name], tag, name)) for name in names))


#: tag -> schema of the whole message (round_id and sender included, in declaration order).
SCHEMAS: dict[str, _Struct] = {tag: _struct_of(cls, tag) for tag, cls in MESSAGE_TYPES.items()}


# ---------------------------------------------------------------------- msgpack
def _unpack(data: bytes, limits: Limits, what: str, entries: int, longest: int) -> Any:
    return unpack(data, what, entries=entries, longest=longest, max_str=limits.max_string_bytes,
                  max_bin=limits.max_message_bytes)


def _payload_bounds(payload: bytes, limits: Limits) -> tuple[int, int]:
    """A payload's entry budget and longest array (SPEC §7.1): a release's when its tag is ``release``, whose
    per-group arrays may hold 2^20 entries; every other message's arrays at most ``max_array_entries``."""
    if first_str(payload) == _RELEASE_TAG:
        return limits.max_release_entries, limits.max_long_array_entries
    return limits.max_payload_entries, limits.max_array_entries


_RELEASE_TAG = Release.TAG.encode()
#: What an envelope may build beyond its three entries before it is `bad_envelope` (a few nested arrays).
_ENVELOPE_ENTRIES = 64


def _open_envelope(data: bytes, limits: Limits) -> tuple[bytes, bytes]:
    """Steps 1-3 of SPEC §7.2: size, envelope shape, version. Returns (payload, signature)."""
    if not isinstance(data, bytes):
        raise RemoteProtocolError("bad_envelope", f"expected bytes, got {type(data).__name__}")
    if len(data) > limits.max_message_bytes:
        raise RemoteProtocolError("oversized", f"{len(data)} bytes, limit {limits.max_message_bytes}")
    # [version, payload, signature]: an array of another size is refused from its header, and inside one of
    # three no array may hold more than three entries (what else it holds is `bad_envelope` once decoded).
    size = array_size(data)
    if size is not None and size != 3:
        raise RemoteProtocolError("bad_envelope", "not an array of [version, payload, signature]")
    envelope = _unpack(data, limits, "envelope", _ENVELOPE_ENTRIES, 3)
    if type(envelope) is not tuple or len(envelope) != 3:
        raise RemoteProtocolError("bad_envelope", "not an array of [version, payload, signature]")
    version, payload, signature = envelope
    if type(version) is not int or type(payload) is not bytes or type(signature) is not bytes:
        raise RemoteProtocolError("bad_envelope", "envelope entries must be [uint, bin, bin(64)]")
    if len(signature) != crypto.SIGNATURE_BYTES:
        raise RemoteProtocolError("bad_envelope", f"signature of {len(signature)} bytes")
    if version != PROTOCOL_VERSION:
        raise RemoteProtocolError("bad_version", f"version {version}, this implementation speaks {PROTOCOL_VERSION}")
    return payload, signature


_PEEK_LIMITS = Limits()


def peek_tag(data: bytes) -> str | None:
    """The tag of an envelope's message, unverified (None if it does not parse): for a transport that
    keeps messages by kind (a multiplexed connection keeps each member's retained run_keys), never to
    act on a message, which `decode` checks in full. Read from the payload's headers: nothing of the payload
    is decoded (every group message a multiplexed connection receives is peeked)."""
    try:
        payload, _ = _open_envelope(data, _PEEK_LIMITS)
        tag = first_str(payload)
        return None if tag is None else tag.decode("utf-8")
    except (RemoteProtocolError, UnicodeDecodeError):
        return None


class VerifiedEnvelopes:
    """The SHA-256 digests of the last ``capacity`` envelopes whose signature verified (FIFO).

    Verifying an Ed25519 signature is what decoding costs (about 0.15 ms, ten times the rest). A
    digest of the whole envelope (version, payload with the sender's key, signature) identifies a
    verified message: an envelope that hashes to a remembered digest is that very envelope, so its
    signature need not be checked again. 32 bytes per entry, against a whole decoded message.
    """

    def __init__(self, capacity: int = 1 << 18) -> None:
        self._digests: OrderedDict[bytes, None] = OrderedDict()
        self._capacity = capacity

    def __contains__(self, digest: bytes) -> bool:
        return digest in self._digests

    def add(self, digest: bytes) -> None:
        self._digests[digest] = None
        if len(self._digests) > self._capacity:
            self._digests.popitem(last=False)


def _parse(data: bytes, limits: Limits) -> tuple[Message, bytes, bytes]:
    """SPEC §7.2 steps 1-5: (message, payload, signature), the signature not yet checked."""
    payload, signature = _open_envelope(data, limits)
    body = _unpack(payload, limits, "payload", *_payload_bounds(payload, limits))
    if type(body) is not tuple or len(body) < 3 or type(body[0]) is not str:
        raise RemoteProtocolError("bad_envelope", "payload is not an array [tag, round_id, sender, ...]")
    schema = SCHEMAS.get(body[0])
    if schema is None:
        raise RemoteProtocolError("unknown_type", f"tag {body[0][:64]!r}")
    if len(body) - 1 != len(schema.fields):
        raise _bad(f"{body[0]}: {len(body) - 3} fields, expected {len(schema.fields) - 2}")
    message: Message = schema.check(body[1:], limits, body[0])
    return message, payload, signature


def decode(data: bytes, limits: Limits | None = None, verified: VerifiedEnvelopes | None = None) -> Decoded:
    """Decode and verify one envelope (SPEC §7.2 steps 1-6); RemoteProtocolError on any failure.

    ``verified``: envelopes known to verify (see `VerifiedEnvelopes`); this one is added when it does.
    """
    limits = limits if limits is not None else Limits()
    message, payload, signature = _parse(data, limits)
    envelope_digest = hashlib.sha256(data).digest() if verified is not None else b""
    if verified is None or envelope_digest not in verified:
        if not crypto.verify(message.sender, SIGNATURE_DOMAIN + payload, signature):
            raise RemoteProtocolError("bad_signature", f"{message.TAG} signature does not verify under its sender")
        if verified is not None:
            verified.add(envelope_digest)
    return Decoded(message, payload, payload_digest(payload), bytes(data))


def verified_digest(limits: Limits, data: bytes) -> bytes | None:
    """The `VerifiedEnvelopes` digest of ``data`` if its signature verifies under the sender its payload
    states (the third entry, a bin), else None. Such a digest says only that: `decode` skips the signature
    check of an envelope with a known digest *after* parsing it in full, and the sender it parses is that
    same entry, so a payload that does not parse is refused as before.

    A module-level function of picklable arguments: a driver has a burst of received envelopes checked
    in other processes ahead of the node that will decode them (`DecodeCache.remember_digests`). What
    fails here is not rejected here: the node decodes it as if nothing had been checked.
    """
    try:
        payload, signature = _open_envelope(data, limits)
    except RemoteProtocolError:
        return None
    # Only the signature, under the sender the payload states: the node parses every message in full
    # anyway, and drops the digest's claim with a payload that does not parse. Building the message
    # here too was about a third of the helpers' work (cProfile, 10^4 subjects).
    sender = third_bin(payload)
    if sender is None or not crypto.verify(sender, SIGNATURE_DOMAIN + payload, signature):
        return None
    return hashlib.sha256(data).digest()


def decode_own(data: bytes, limits: Limits | None = None) -> Message:
    """Decode a message this process encoded and signed itself, WITHOUT checking the signature.

    Only for bytes that never left the process (the collector service reading its node's outgoing
    messages to store them); anything received goes through `decode`.
    """
    return _parse(data, limits if limits is not None else Limits())[0]


class DecodeCache:
    """`decode` memoized for the nodes one process hosts (LRU; successes only).

    Decoding and verifying a message is a pure function of its bytes and the limits, so the nodes of
    one process (a simulation, a subject swarm, `coutil run`) verify each message once instead of
    once per receiver: a group message reaches every member and the collector. Large payloads (a
    release) get a small cache of their own so that they never evict thousands of small messages.
    """

    LARGE = 64 * 1024
    #: Bytes of large payloads both large caches hold together at most (found by an attacker: twenty signed
    #: 32 MiB messages, each rejected, kept 1.9 GB alive in the collector service). A release of 10^5 subjects
    #: is about 6 MB, so a bulletin still stays cached.
    LARGE_BYTES = 64 * 1024 * 1024

    def __init__(self, capacity: int = 8192, large_capacity: int = 4, verified_capacity: int = 1 << 18) -> None:
        self._small: OrderedDict[tuple[Limits, bytes], Decoded] = OrderedDict()
        self._large: OrderedDict[tuple[Limits, bytes], Decoded] = OrderedDict()
        self._capacity = capacity
        self._large_capacity = large_capacity
        #: Outlives the decoded messages: when thousands of groups step at once, a message can leave
        #: the LRU before its last receiver asks; decoding it again is cheap, verifying is not.
        self._verified = VerifiedEnvelopes(verified_capacity)
        #: The large payload objects last looked up, found by identity. Each connection of a process
        #: hands its copy of a bulletin (the roster, the release: megabytes at 10^5 subjects) to each
        #: of its nodes; a dict lookup with another connection's copy compares every byte, per node
        #: (measured at 10^5 subjects, four connections per worker: auditing 39 -> 61 s).
        self._large_objects: deque[tuple[bytes, Limits, Decoded]] = deque(maxlen=4 * large_capacity)

    def remember_verified(self, data: bytes) -> None:
        """Record that ``data`` (a whole envelope) was verified elsewhere in the same simulation: a
        process hosting one shard of a simulated round trusts the shard that published it, as the
        nodes of one process trust their shared cache."""
        self._verified.add(hashlib.sha256(data).digest())

    def remember_digests(self, digests: Iterable[bytes | None]) -> None:
        """Record envelopes as verified by their digests (from `verified_digest`, run by a helper
        process of this one: the node it serves trusts it as it trusts its own thread). None: an
        envelope that did not verify there, left to `decode`."""
        for digest in digests:
            if digest is not None:
                self._verified.add(digest)

    def encode(self, message: Message, signing_key: crypto.SigningKey) -> bytes:
        """`encode`, remembering the envelope as verified: its signature was just made over these
        very bytes, so when the broker hands them back (to fellow members this process hosts) only
        their digest is checked. Bytes altered after signing hash differently and are verified."""
        data = encode(message, signing_key)
        self._verified.add(hashlib.sha256(data).digest())
        return data

    def decode(self, data: bytes, limits: Limits) -> Decoded:
        large = len(data) > self.LARGE
        if large:
            for seen, seen_limits, seen_decoded in self._large_objects:
                if seen is data and seen_limits == limits:
                    return seen_decoded
        cache, capacity = (self._large, self._large_capacity) if large else (self._small, self._capacity)
        key = (limits, data)
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
        else:
            hit = decode(data, limits, self._verified)
            cache[key] = hit
            if len(cache) > capacity:
                cache.popitem(last=False)
        if large:
            self._large_objects.append((data, limits, hit))
            self._trim_large()
        return hit

    def _trim_large(self) -> None:
        """Drop the oldest large entries while they hold more than `LARGE_BYTES` (the newest always stays)."""
        def held() -> int:
            objects = {id(key[1]): len(key[1]) for key in self._large}
            objects.update((id(data), len(data)) for data, _, _ in self._large_objects)
            return sum(objects.values())

        while held() > self.LARGE_BYTES and len(self._large) + len(self._large_objects) > 2:
            if len(self._large_objects) > 1:
                self._large_objects.popleft()
            elif len(self._large) > 1:
                self._large.popitem(last=False)
            else:
                break


def encode_payload(message: Message) -> bytes:
    """The payload bytes of ``message``; ValueError if a peer would reject it (a bug of the caller)."""
    schema = SCHEMAS.get(message.TAG)
    if schema is None or type(message) is not schema.cls:
        raise ValueError(f"not a protocol message: {message!r}")
    body = schema.wire(message)
    assert isinstance(body, tuple)
    try:
        schema.validate(body, _DEFAULT_LIMITS, message.TAG)
    except RemoteProtocolError as exc:
        raise ValueError(f"cannot encode {message.TAG}: {exc}") from None
    packed: bytes = msgpack.packb((message.TAG, *body), use_bin_type=True)
    return packed


def encode(message: Message, signing_key: crypto.SigningKey) -> bytes:
    """Sign and wrap ``message`` in an envelope. Its ``sender`` must be ``signing_key``'s public key."""
    if message.sender != signing_key.public:
        raise ValueError(f"{message.TAG}: sender is not the signing key's public key")
    payload = encode_payload(message)
    signature = signing_key.sign(SIGNATURE_DOMAIN + payload)
    envelope: bytes = msgpack.packb((PROTOCOL_VERSION, payload, signature), use_bin_type=True)
    return envelope


def payload_digest(payload: bytes) -> bytes:
    """The digest of a message (acks, de-duplication): SHA-256 of its exact payload bytes."""
    return hashlib.sha256(payload).digest()


def payload_digest_of(envelope: bytes, limits: Limits | None = None) -> bytes:
    """`payload_digest` of the payload inside an envelope (checks only the envelope, not the signature)."""
    payload, _ = _open_envelope(envelope, limits if limits is not None else Limits())
    return payload_digest(payload)


# ---------------------------------------------------------------------- language-neutral form
def message_to_plain(message: Message) -> dict[str, object]:
    """JSON-ready form (test vectors): ``{"type": tag, "fields": {...}}``; bytes as hex, structs as objects."""
    schema = SCHEMAS[message.TAG]
    fields = schema.plain(message)
    return {"type": message.TAG, "fields": fields}


def message_from_plain(data: dict[str, Any]) -> Message:
    """Inverse of `message_to_plain`."""
    schema = SCHEMAS[data["type"]]
    message: Message = typing.cast(Message, schema.from_plain(data["fields"]))
    return message
