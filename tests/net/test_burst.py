"""`coutil.net.burst`: bursts checked ahead reach the node in order, once, and a broken check costs
only the shortcut; `codec.verified_digest` vouches only for envelopes that verify."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections import deque
from pathlib import Path

import pytest

from coutil.errors import RemoteProtocolError
from coutil.net import burst
from coutil.net.burst import Entry, deliver_checked
from coutil.protocol import codec, crypto
from coutil.protocol.messages import Register
from coutil.protocol.node import SeededRandom


async def _run(arrivals: list[list[bytes]], check: burst.BurstCheck) -> list[bytes]:
    """Feed ``arrivals`` (one list per read of the socket) to `deliver_checked`; what it delivered."""
    backlog: deque[Entry[str]] = deque()
    ready = asyncio.Event()
    delivered: list[bytes] = []
    total = sum(len(a) for a in arrivals)

    def deliver(target: str, topic: str, data: bytes) -> None:
        assert target == "collector" and topic == "t"
        delivered.append(data)

    task = asyncio.create_task(deliver_checked(backlog, ready, check, deliver, chunk=50))
    for arrival in arrivals:
        backlog.extend(("t", data, ["collector"]) for data in arrival)
        ready.set()
        await asyncio.sleep(0)
    async with asyncio.timeout(10):
        while len(delivered) < total:
            await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)  # nothing more comes
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return delivered


def test_bursts_are_checked_ahead_and_delivered_in_order_once() -> None:
    checked: list[list[bytes]] = []

    async def check(payloads: list[bytes]) -> None:
        await asyncio.sleep(0.002 * len(checked))  # later checks finish sooner than earlier ones would
        checked.append(payloads)

    trickle = [[b"a", b"b"], [b"c"]]
    flood = [[i.to_bytes(4, "big") for i in range(n, n + 700)] for n in range(0, 2100, 700)]
    arrivals = [*trickle, *flood]
    delivered = asyncio.run(_run(arrivals, check))
    assert delivered == [data for arrival in arrivals for data in arrival]
    # The trickle went straight to the node; the flood in batches of at most BATCH, all checked.
    assert all(burst.CHECK_FROM <= len(batch) <= burst.BATCH for batch in checked)
    assert sum(len(batch) for batch in checked) >= 2000


def test_a_check_that_fails_leaves_the_messages_to_the_node(caplog: pytest.LogCaptureFixture) -> None:
    calls = 0

    async def broken(payloads: list[bytes]) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("a pool process died")

    arrivals = [[i.to_bytes(4, "big") for i in range(n, n + 300)] for n in range(0, 1200, 300)]
    with caplog.at_level(logging.WARNING, logger="coutil.net.burst"):
        delivered = asyncio.run(_run(arrivals, broken))
    assert delivered == [data for arrival in arrivals for data in arrival]
    assert 1 <= calls <= burst.DEPTH  # no new check once one failed
    assert "the node checks them itself" in caplog.text


def test_a_node_error_while_delivering_ends_the_delivery() -> None:
    async def fine(payloads: list[bytes]) -> None:
        return None

    async def main() -> None:
        backlog: deque[Entry[str]] = deque(("t", b"x", ["collector"]) for _ in range(100))
        ready = asyncio.Event()
        ready.set()

        def deliver(target: str, topic: str, data: bytes) -> None:
            raise ValueError("a node's bug")

        with pytest.raises(ValueError, match="a node's bug"):
            await deliver_checked(backlog, ready, fine, deliver, chunk=10)

    asyncio.run(main())


def test_only_an_envelope_that_verifies_is_vouched_for() -> None:
    key = crypto.SigningKey.generate(SeededRandom(1))
    other = crypto.SigningKey.generate(SeededRandom(2))
    message = Register(bytes(16), key.public, (30.0, 170.0), bytes(32))
    good = codec.encode(message, key)
    limits = codec.Limits()
    assert codec.verified_digest(limits, good) is not None
    # Signed by another key than its sender's: no digest, and the node still rejects it after the
    # driver passed on what the check found.
    forged = codec.encode(Register(bytes(16), other.public, (30.0, 170.0), bytes(32)), other)
    forged = forged.replace(other.public, key.public)
    assert codec.verified_digest(limits, forged) is None
    assert codec.verified_digest(limits, b"\x93garbage") is None
    cache = codec.DecodeCache()
    cache.remember_digests([codec.verified_digest(limits, forged), codec.verified_digest(limits, good)])
    assert cache.decode(good, limits).message == message
    with pytest.raises(RemoteProtocolError) as caught:
        cache.decode(forged, limits)
    assert caught.value.reason == "bad_signature"


def _vector_envelopes() -> list[bytes]:
    root = Path(__file__).resolve().parents[2] / "protocol" / "vectors"
    valid = json.loads((root / "messages.json").read_text(encoding="utf-8"))["valid"]
    invalid = json.loads((root / "invalid.json").read_text(encoding="utf-8"))["invalid"]
    return [bytes.fromhex(v["envelope"]) for v in (*valid, *invalid)]


def _decodes(limits: codec.Limits, data: bytes) -> bool:
    try:
        codec.decode(data, limits)
    except RemoteProtocolError:
        return False
    return True


def test_the_signature_check_vouches_for_what_decode_accepts_and_for_nothing_it_refuses_on_its_signature() -> None:
    """The helpers check the signature under the sender the payload states, without building the message
    (`codec.verified_digest`). Over every vector and thousands of byte-level mutations of them: whatever
    decodes in full gets a digest, and nothing that fails only on its signature does; a digest never lets an
    envelope through that `decode` would refuse (the node parses it in full, then skips only the check)."""
    limits = codec.Limits()
    rng = random.Random(7)
    envelopes = _vector_envelopes()
    assert len(envelopes) > 40
    samples = list(envelopes)
    for _ in range(3000):
        mutated = bytearray(rng.choice([e for e in envelopes if e]))
        for _ in range(rng.randint(1, 3)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        samples.append(bytes(mutated))
    vouched = 0
    for data in samples:
        digest = codec.verified_digest(limits, data)
        full = _decodes(limits, data)
        if full:
            assert digest is not None
        cache = codec.DecodeCache()
        cache.remember_digests([digest])
        try:
            cache.decode(data, limits)
            assert full, "a digest let through what decode refuses"
        except RemoteProtocolError:
            assert not full
        vouched += digest is not None
    assert vouched >= len(envelopes) // 2
