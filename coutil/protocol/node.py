"""What every sans-IO protocol node exposes to its driver, and what it hands back.

A driver (the in-memory bus in `coutil.net.memory`, the MQTT driver in `coutil.net.mqtt`) owns
the clock and the transport. It calls `start`, `receive` and `on_timer` with ``now`` and publishes
the returned `Outgoing` messages; it asks `subscriptions()` after every call and (un)subscribes to
match; it calls `on_timer` when ``now >= next_timer()``; it drains `drain_events()` (typed
events, `coutil.protocol.events`). A node that also has `TransportAware.on_transport` is told when
its connection to the broker goes down and comes back (protocol/SPEC.md, section 4, "Outages"); a
driver calls it only on a change, and only after `start`.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Generic, Protocol, TypeVar, cast

# Re-exported: the event base class moved to coutil.protocol.events with the typed events.
from coutil.protocol.events import Event

__all__ = [
    "SERIAL_POOL",
    "Done",
    "Event",
    "Node",
    "Outgoing",
    "Pending",
    "RandomSource",
    "Rejection",
    "SeededRandom",
    "SerialPool",
    "SystemRandom",
    "TransportAware",
    "WorkPool",
    "shuffle_in_place",
    "transport_hook",
]

T = TypeVar("T")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Pending(Protocol[R_co]):
    """Work handed to a `WorkPool`: ``result()`` waits for it (at once for `SERIAL_POOL`)."""

    def result(self) -> R_co: ...


class WorkPool(Protocol):
    """Runs a pure function over items, results in the items' order: how a node spends CPU on
    independent work whose result it needs only later (opening a group's records, needed at the
    release). Injected like the clock and randomness: `SERIAL_POOL` computes at submission; a
    driver with spare cores passes one that computes meanwhile (`coutil.round.parallel`)."""

    def submit(self, fn: Callable[[T], R], items: Sequence[T]) -> Pending[list[R]]: ...


@dataclass(frozen=True)
class Done(Generic[R]):
    """A result computed already (`SerialPool`)."""

    value: R

    def result(self) -> R:
        return self.value


class SerialPool:
    """The `WorkPool` of a node nobody gave threads: the work is done when it is submitted."""

    def submit(self, fn: Callable[[T], R], items: Sequence[T]) -> Done[list[R]]:
        return Done([fn(item) for item in items])


SERIAL_POOL = SerialPool()


@dataclass(frozen=True)
class Outgoing:
    """A message to publish: exact payload bytes on a topic (grammar in protocol/SPEC.md)."""

    topic: str
    payload: bytes
    retain: bool = False
    qos: int = 1


@dataclass(frozen=True)
class Publication:
    """One message as a broker carried it: who published which bytes on which topic, and when (the
    in-memory bus records them; a deviating broker keeps an earlier round's to replay)."""

    at: float
    sender: str
    topic: str
    payload: bytes
    retain: bool


@dataclass(frozen=True)
class Rejection:
    """A received payload that was rejected (malformed/malicious) or ignored (stale/duplicate/early)."""

    at: float
    topic: str
    reason: str
    detail: str
    ignored: bool
    sender: bytes | None = None
    #: The message's type tag when it decoded (``run_keys``, ``assign``, ...): which kind of re-send a
    #: duplicate was. Empty when the payload did not decode.
    kind: str = ""


#: Rejections a node keeps one by one; every one is counted (`RejectionLog.tally`). A flood of bad messages
#: must not grow a node without bound (found by an attacker: 200,000 one-byte payloads on 2 kB topics added
#: 275 MB to the collector service).
KEPT_REJECTIONS = 10_000
#: Characters of a rejected message's topic and detail that are kept (the topic is the sender's choice).
KEPT_TEXT = 200


class RejectionLog(list[Rejection]):
    """A node's rejections: the first `KEPT_REJECTIONS` one by one (topic and detail cut to `KEPT_TEXT`
    characters), and a count of every one by (reason, ignored)."""

    def __init__(self) -> None:
        super().__init__()
        self.tally: Counter[tuple[str, bool]] = Counter()

    def append(self, rejection: Rejection) -> None:
        self.tally[(rejection.reason, rejection.ignored)] += 1
        if len(self) < KEPT_REJECTIONS:
            if len(rejection.topic) > KEPT_TEXT or len(rejection.detail) > KEPT_TEXT:
                rejection = replace(rejection, topic=rejection.topic[:KEPT_TEXT], detail=rejection.detail[:KEPT_TEXT])
            super().append(rejection)

    def counts(self) -> Counter[str]:
        """Every rejection (kept or not) by reason."""
        out: Counter[str] = Counter()
        for (reason, _), count in self.tally.items():
            out[reason] += count
        return out


class RandomSource(Protocol):
    """Injected randomness: cryptographic in deployment, seeded in simulations."""

    def bytes(self, n: int) -> bytes: ...

    def below(self, bound: int) -> int: ...


class SeededRandom:
    """Deterministic random source for simulations and tests: HMAC-SHA256 in counter mode.

    Not for deployment (its output is reproducible from the seed by design).
    """

    def __init__(self, seed: bytes | int | str) -> None:
        if isinstance(seed, int):
            seed = seed.to_bytes(16, "big", signed=True)
        elif isinstance(seed, str):
            seed = seed.encode()
        self._key = hashlib.sha256(b"coutil-seeded-random" + seed).digest()
        self._counter = 0
        self._buffer = b""

    def bytes(self, n: int) -> bytes:
        while len(self._buffer) < n:
            block = hmac.digest(self._key, self._counter.to_bytes(8, "big"), "sha256")  # OpenSSL's one-shot HMAC
            self._counter += 1
            self._buffer += block
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out

    def below(self, bound: int) -> int:
        if bound <= 0:
            raise ValueError("bound must be positive")
        # Rejection sampling avoids modulo bias.
        nbytes = (bound.bit_length() + 7) // 8 + 1
        limit = (256**nbytes // bound) * bound
        while True:
            value = int.from_bytes(self.bytes(nbytes), "big")
            if value < limit:
                return value % bound

    def fork(self, label: str) -> SeededRandom:
        """An independent stream for a sub-component (e.g. one per simulated node)."""
        return SeededRandom(self._key + label.encode())


class SystemRandom:
    """Cryptographic randomness from the operating system (deployment default)."""

    def bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def below(self, bound: int) -> int:
        return secrets.randbelow(bound)


def shuffle_in_place(items: list[T], rng: RandomSource) -> None:
    """Fisher-Yates shuffle driven by the injected random source."""
    for i in range(len(items) - 1, 0, -1):
        j = rng.below(i + 1)
        items[i], items[j] = items[j], items[i]


class Node(Protocol):
    """The interface every protocol node (collector, subject) implements."""

    def subscriptions(self) -> frozenset[str]: ...

    def start(self, now: float) -> list[Outgoing]: ...

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]: ...

    def on_timer(self, now: float) -> list[Outgoing]: ...

    def next_timer(self) -> float | None: ...

    def drain_events(self) -> Sequence[Event]: ...

    @property
    def finished(self) -> bool: ...


class TransportAware(Protocol):
    """Optional: a node that wants to know whether its own connection to the broker is up."""

    def on_transport(self, up: bool, now: float) -> list[Outgoing]: ...


def transport_hook(node: object) -> Callable[[bool, float], list[Outgoing]] | None:
    """The node's `TransportAware.on_transport`, or None when it has none (drivers call it on a change)."""
    hook = getattr(node, "on_transport", None)
    return cast("Callable[[bool, float], list[Outgoing]]", hook) if callable(hook) else None
