"""The protocol and its driver, unchanged, on other MQTT brokers: mosquitto, NATS's MQTT gateway, RabbitMQ's
MQTT plugin. Each test starts its own broker on free loopback ports (`simulations/bench/private_brokers.py`,
shared with the benchmark) and skips, saying why, when the broker or its MQTT support is not installed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coutil.errors import NetworkError
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions
from tests.net.helpers import IdleNode

BENCH = Path(__file__).resolve().parents[2] / "simulations" / "bench"
sys.path.insert(0, str(BENCH))
from private_brokers import private_broker, unavailable  # noqa: E402

pytestmark = pytest.mark.broker


def _started(kind: str) -> Iterator[str]:
    reason = unavailable(kind)
    if reason is not None:
        print(f"SKIP {kind}: {reason}")
        pytest.skip(f"{kind}: {reason}")
    with private_broker(kind) as url:
        yield url


@pytest.fixture(scope="module", params=["mosquitto", "nats", "rabbitmq"])
def broker_url(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    kind: str = request.param
    for url in _started(kind):
        yield kind, url


@pytest.fixture
def nats_url() -> Iterator[str]:
    yield from _started("nats")


def test_a_round_over_each_broker(broker_url: tuple[str, str], tmp_path: Path) -> None:
    """`coutil run --broker` (30 subjects, one multiplexed connection): every subject released, every verdict
    accepting, nothing dropped by the driver."""
    kind, url = broker_url
    out = tmp_path / "run"
    result = subprocess.run([sys.executable, "-m", "coutil", "run", "--subjects", "30", "--broker", url,
                             "--out", str(out), "--json"], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["completed"] is True
    assert summary["released_rows"] == summary["subjects"] == 30
    assert summary["accepted"] == summary["verdicts"] == 30
    assert summary["network"]["drops"] == 0
    audit = json.loads((out / "audit.json").read_text())
    assert audit["accepted"] == 30
    if kind == "nats":
        # 30 subjects subscribe to more than the 63 QoS 1 filters NATS grants one client: the connection
        # fell back to covering filters, and said so, on the same connection (it used to reconnect, and every
        # subject then re-sent what she had pending: her registration, each of them).
        assert "resubscribing to covering filters" in result.stderr
        assert summary["network"]["reconnects"] == 0
    if kind == "mosquitto":
        assert summary["dropped"].get("broker") == 0  # mosquitto publishes its drop counter
    else:
        assert "broker" not in summary["dropped"]  # no $SYS drop counter: unknown, not 0


class _ManyTopics(IdleNode):
    """A node subscribed to ``count`` topics of its own (more than NATS grants one client)."""

    client_id = "coutil-test-many-topics"

    def __init__(self, count: int) -> None:
        self.count = count

    def subscriptions(self) -> frozenset[str]:
        return frozenset(f"toy/many/{i}" for i in range(self.count))


def test_a_refused_subscription_is_an_error_not_silence(nats_url: str) -> None:
    """A client with its own connection that NATS will not subscribe (100 QoS 1 filters): `NetworkError`
    naming the limit, where the driver used to wait for messages that could never come."""
    with pytest.raises(NetworkError, match=r"refused \d+ subscription.*max_ack_pending"):
        asyncio.run(host_nodes([_ManyTopics(100)], nats_url, stop_when=lambda: False, timeout=20,
                               options=DriverOptions(connect_timeout=10)))
