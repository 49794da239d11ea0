"""Throughput of the MQTT driver: embedded amqtt (in-process) vs a private mosquitto, N toy clients.

Reproduce with::

    python simulations/bench/bench_mqtt.py                          # 1,000 clients, 10 requests each
    python simulations/bench/bench_mqtt.py --clients 200 --requests 5   # quick smoke run
    python simulations/bench/bench_mqtt.py --brokers mosquitto --clients 5000

Topology (the shape of a protocol round): one *hub* node (the collector's role) subscribes to
``bench/+/up`` and acknowledges every request on the sender's inbox ``bench/<id>/to``; N *client*
nodes (one MQTT connection each, as behind a per-subject ACL; ``coutil run`` multiplexes instead)
send ``--requests`` requests one after another, each re-sent every 2 s until acknowledged. The
nodes run in this one process through `coutil.net.hosting.host_nodes`; the embedded amqtt broker
runs in a child process of its own (`coutil.net.broker_process`, as ``coutil run`` starts it) and
mosquitto in its own process (started here on a free port; skipped with a message when the binary
is missing). amqtt matches each message against every subscription, so one connection per client
is its worst case: it shows why ``coutil run`` multiplexes and subscribes to covering filters.

Reported per broker: time for all clients to connect and start, time for the exchange, delivered
messages per second (requests + acks received by nodes), re-sends, driver drops and reconnects, and
the ratio mosquitto / embedded measured in the same run. Writes
``simulations/bench/results/bench_mqtt.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

from private_mosquitto import BASE_SETTINGS, mosquitto_binary, private_mosquitto

from coutil.net.broker_process import BrokerProcess
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions
from coutil.protocol.node import Event, Outgoing

RESULTS = Path(__file__).parent / "results" / "bench_mqtt.json"
PAYLOAD_BYTES = 200  # the reference figures' payload size
RETRY_SECONDS = 2.0


class HubNode:
    """Acknowledges every request (the collector's role)."""

    client_id = "bench-hub"

    def __init__(self) -> None:
        self.requests_seen = 0
        self.finished = False

    def subscriptions(self) -> frozenset[str]:
        return frozenset({"bench/+/up"})

    def start(self, now: float) -> list[Outgoing]:
        return []

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self.requests_seen += 1
        sender = topic.split("/")[1]
        return [Outgoing(f"bench/{sender}/to", payload[:8])]

    def on_timer(self, now: float) -> list[Outgoing]:
        return []

    def next_timer(self) -> float | None:
        return None

    def drain_events(self) -> list[Event]:
        return []


class ClientNode:
    """Sends ``requests`` numbered requests, one at a time, re-sending until acknowledged."""

    def __init__(self, index: int, requests: int) -> None:
        self.client_id = f"bench-{index:06d}"
        self.requests = requests
        self.current = 0
        self.resends = 0
        self.started = False
        self._timer: float | None = None

    @property
    def finished(self) -> bool:
        return self.current >= self.requests

    def subscriptions(self) -> frozenset[str]:
        return frozenset({f"bench/{self.client_id}/to"})

    def _request(self, now: float) -> list[Outgoing]:
        self._timer = now + RETRY_SECONDS
        body = self.current.to_bytes(8, "big")
        return [Outgoing(f"bench/{self.client_id}/up", body + bytes(PAYLOAD_BYTES - len(body)))]

    def start(self, now: float) -> list[Outgoing]:
        self.started = True
        return self._request(now)

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        if self.finished or int.from_bytes(payload[:8], "big") != self.current:
            return []  # duplicate ack of an earlier request
        self.current += 1
        if self.finished:
            self._timer = None
            return []
        return self._request(now)

    def on_timer(self, now: float) -> list[Outgoing]:
        if self.finished:
            self._timer = None
            return []
        self.resends += 1
        return self._request(now)

    def next_timer(self) -> float | None:
        return self._timer

    def drain_events(self) -> list[Event]:
        return []


async def _exchange(url: str, clients: int, requests: int, timeout: float) -> dict[str, Any]:
    hub = HubNode()
    nodes = [ClientNode(i, requests) for i in range(clients)]
    began = time.perf_counter()
    marks: dict[str, float] = {}

    def done() -> bool:
        if "connected" not in marks and all(n.started for n in nodes):
            marks["connected"] = time.perf_counter()
        return all(n.finished for n in nodes)

    stats = await host_nodes([hub, *nodes], url, stop_when=done, timeout=timeout, options=DriverOptions())
    ended = time.perf_counter()
    connected = marks.get("connected", ended)
    delivered = stats.received_messages
    exchange_seconds = ended - connected
    return {
        "clients": clients,
        "requests_per_client": requests,
        "completed": stats.stopped_by == "condition",
        "connect_seconds": round(connected - began, 3),
        "exchange_seconds": round(exchange_seconds, 3),
        "total_seconds": round(ended - began, 3),
        "delivered_messages": delivered,
        "messages_per_second": round(delivered / (ended - began), 1),
        "resends": sum(n.resends for n in nodes),
        "driver": stats.as_dict(),
    }


async def _embedded(clients: int, requests: int, timeout: float) -> dict[str, Any]:
    async with BrokerProcess() as broker:
        return await _exchange(broker.url, clients, requests, timeout)


def _mosquitto(clients: int, requests: int, timeout: float) -> dict[str, Any] | None:
    binary = mosquitto_binary()
    if binary is None:
        print("mosquitto: skipped (no mosquitto binary)", file=sys.stderr)
        return None
    settings = BASE_SETTINGS + "max_queued_messages 200000\nmax_connections -1\n"
    with private_mosquitto(binary, settings) as url:
        return asyncio.run(_exchange(url, clients, requests, timeout))


def _raise_fd_limit(needed: int) -> None:
    """Each client holds a socket (and the embedded broker one more): lift the soft fd limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="MQTT driver throughput: embedded amqtt vs mosquitto")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--brokers", nargs="+", choices=("embedded", "mosquitto"), default=["embedded", "mosquitto"])
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    _raise_fd_limit(2 * args.clients + 256)
    results: dict[str, dict[str, Any]] = {}
    for broker in args.brokers:
        if broker == "embedded":
            results[broker] = asyncio.run(_embedded(args.clients, args.requests, args.timeout))
        else:
            outcome = _mosquitto(args.clients, args.requests, args.timeout)
            if outcome is not None:
                results[broker] = outcome
    header = (
        f"{'broker':<10} {'clients':>7} {'connect s':>9} {'exchange s':>10} {'msg/s':>8} {'resends':>7} {'drops':>5}"
    )
    print(header)
    print("-" * len(header))
    for name, row in results.items():
        print(
            f"{name:<10} {row['clients']:>7} {row['connect_seconds']:>9.2f} {row['exchange_seconds']:>10.2f} "
            f"{row['messages_per_second']:>8.0f} {row['resends']:>7} {row['driver']['drops']:>5}"
            + ("" if row["completed"] else "  (timed out)")
        )
    ratio = None
    if {"embedded", "mosquitto"} <= set(results):
        ratio = results["mosquitto"]["messages_per_second"] / max(results["embedded"]["messages_per_second"], 1e-9)
        print(f"mosquitto / embedded throughput: {ratio:.2f}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": "bench_mqtt",
        "command": "python simulations/bench/bench_mqtt.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "payload_bytes": PAYLOAD_BYTES,
        "results": results,
        "mosquitto_over_embedded": ratio,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if all(row["completed"] for row in results.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
