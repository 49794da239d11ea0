"""Toy sans-IO nodes and a mosquitto launcher shared by the networked tests.

The toy nodes implement `coutil.protocol.node.Node` the way the real protocol nodes do: a pinger
re-sends its current ping until the matching pong arrives (end-to-end confirmation), so a broker
restart mid-exchange only delays the exchange. The real CollectorNode/SubjectNode plug into the
same driver through the same interface.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from coutil.protocol.node import Event, Outgoing

MOSQUITTO_CANDIDATES = ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto")


class IdleNode:
    """A node that subscribes to nothing, sends nothing and never finishes: toy nodes override what
    their test is about."""

    client_id = "idle"

    @property
    def finished(self) -> bool:
        return False

    def subscriptions(self) -> frozenset[str]:
        return frozenset()

    def start(self, now: float) -> list[Outgoing]:
        return []

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        return []

    def on_timer(self, now: float) -> list[Outgoing]:
        return []

    def next_timer(self) -> float | None:
        return None

    def drain_events(self) -> list[Event]:
        return []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def mosquitto_binary() -> str:
    """Path of the mosquitto binary, or skip the test printing why."""
    found = shutil.which("mosquitto") or next((p for p in MOSQUITTO_CANDIDATES if os.path.exists(p)), None)
    if found is None:
        print("SKIP: no mosquitto binary on PATH or in /usr/sbin")
        pytest.skip("no mosquitto binary (install the mosquitto package to run this test)")
    return found


def wait_for_port(port: int, seconds: float = 10.0) -> None:
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port}")


class Mosquitto:
    """A private mosquitto on a free loopback port (never the machine's shared broker)."""

    def __init__(self, workdir: Path, *, port: int | None = None, config_text: str | None = None) -> None:
        self.binary = mosquitto_binary()
        self.port = port if port is not None else free_port()
        self.config = workdir / f"mosquitto-{self.port}.conf"
        self.config.write_text(
            config_text
            if config_text is not None
            else f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            "max_queued_messages 100000\nset_tcp_nodelay true\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            wait_for_port(self.port)
        except TimeoutError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None


class PongNode:
    """Answers ``ping`` messages; publishes a retained hello on start."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.client_id = f"pong-{tag}"
        self.pings_seen = 0
        self._events: list[Event] = []

    @property
    def finished(self) -> bool:
        return False

    def subscriptions(self) -> frozenset[str]:
        return frozenset({f"toy/{self.tag}/ping/+"})

    def start(self, now: float) -> list[Outgoing]:
        return [Outgoing(f"toy/{self.tag}/hello", b"hello", retain=True)]

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        sender = topic.rsplit("/", 1)[1]
        self.pings_seen += 1
        # Echo the ping number; the payload is opaque to the driver (any bytes).
        return [Outgoing(f"toy/{self.tag}/pong/{sender}", b"pong:" + payload.split(b":", 1)[1])]

    def on_timer(self, now: float) -> list[Outgoing]:
        return []

    def next_timer(self) -> float | None:
        return None

    def drain_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events


@dataclass(frozen=True)
class Started(Event):
    KIND: ClassVar[str] = "started"
    name: str


@dataclass(frozen=True)
class Pong(Event):
    KIND: ClassVar[str] = "pong"
    number: int


class PingNode:
    """Waits for the retained hello, then sends ``rounds`` pings one at a time, each re-sent every
    ``retry`` seconds until its pong arrives; ``pace`` seconds pass between an answer and the next
    ping. Its subscriptions change over time (hello first, then its pong topic)."""

    def __init__(self, tag: str, name: str, rounds: int, *, retry: float = 0.3, pace: float = 0.0) -> None:
        self.tag = tag
        self.name = name
        self.client_id = f"ping-{tag}-{name}"
        self.rounds = rounds
        self.retry = retry
        self.pace = pace
        self.current = -1  # -1: waiting for hello
        self.answered: list[int] = []
        self.resends = 0
        self._timer: float | None = None
        self._waiting_answer = False
        self._events: list[Event] = []

    @property
    def finished(self) -> bool:
        return len(self.answered) >= self.rounds

    def subscriptions(self) -> frozenset[str]:
        if self.current < 0:
            return frozenset({f"toy/{self.tag}/hello"})
        return frozenset({f"toy/{self.tag}/pong/{self.name}"})

    def _ping(self, now: float) -> list[Outgoing]:
        self._waiting_answer = True
        self._timer = now + self.retry
        return [Outgoing(f"toy/{self.tag}/ping/{self.name}", f"ping:{self.current}".encode())]

    def start(self, now: float) -> list[Outgoing]:
        self._events.append(Started(now, self.name))
        return []

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        if topic.endswith("/hello"):
            if self.current < 0:
                self.current = 0
                return self._ping(now)
            return []
        number = int(payload.split(b":", 1)[1])
        if number != self.current or not self._waiting_answer:
            return []  # a duplicate or stale pong: ignored, as the protocol ignores them
        self.answered.append(number)
        self._events.append(Pong(now, number))
        self._waiting_answer = False
        if self.finished:
            self._timer = None
            return []
        self.current += 1
        if self.pace > 0:
            self._timer = now + self.pace
            return []
        return self._ping(now)

    def on_timer(self, now: float) -> list[Outgoing]:
        if self.finished or self.current < 0:
            self._timer = None
            return []
        if self._waiting_answer:
            self.resends += 1
        return self._ping(now)

    def next_timer(self) -> float | None:
        return self._timer

    def drain_events(self) -> list[Event]:
        events, self._events = self._events, []
        return events
