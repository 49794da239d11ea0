"""The MQTT driver over a private mosquitto: ping-pong, broker restart mid-exchange, URL parsing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coutil.errors import InputError
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions, HostStats, client_id_of, parse_broker_url
from tests.net.helpers import Mosquitto, PingNode, PongNode


@pytest.fixture
def mosquitto(tmp_path: Path):
    broker = Mosquitto(tmp_path)
    broker.start()
    yield broker
    broker.stop()


@pytest.mark.broker
def test_ping_pong_over_mosquitto(mosquitto: Mosquitto) -> None:
    pong = PongNode("mq")
    pings = [PingNode("mq", f"n{i}", 10) for i in range(5)]
    stats = asyncio.run(
        host_nodes([pong, *pings], mosquitto.url, stop_when=lambda: all(p.finished for p in pings), timeout=30)
    )
    assert stats.stopped_by == "condition"
    assert all(p.answered == list(range(10)) for p in pings)
    assert stats.per_node[pong.client_id].received_messages == pong.pings_seen >= 50
    # Byte counters add up: each pong reply is b"pong:<n>" (6 bytes for n < 10).
    assert stats.per_node[pong.client_id].sent_bytes == 5 + 6 * (stats.per_node[pong.client_id].sent_messages - 1)
    assert stats.reconnects == 0 and stats.unsent == 0


@pytest.mark.broker
def test_broker_restart_mid_exchange_reconnects_and_completes(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    pong = PongNode("restart")
    rounds = 30
    pings = [PingNode("restart", f"r{i}", rounds, retry=0.25, pace=0.05) for i in range(4)]
    answered_at_kill: list[int] = []
    options = DriverOptions(backoff_initial=0.05, backoff_max=0.5)

    async def main() -> HostStats:
        hosting = asyncio.create_task(
            host_nodes(
                [pong, *pings],
                broker.url,
                stop_when=lambda: all(p.finished for p in pings),
                timeout=45,
                options=options,
            )
        )
        while min(len(p.answered) for p in pings) < 5:
            await asyncio.sleep(0.02)
        broker.stop()  # mid-exchange: no ping node is done yet
        answered_at_kill.extend(len(p.answered) for p in pings)
        await asyncio.sleep(1.0)  # pings queue up and are re-sent meanwhile; nothing connects
        broker.start()  # same port, empty broker: the driver must resubscribe everything
        return await hosting

    try:
        stats = asyncio.run(main())
    finally:
        broker.stop()
    assert all(count < rounds for count in answered_at_kill)
    assert stats.stopped_by == "condition"
    for ping in pings:
        assert ping.answered == list(range(rounds))  # in order, none skipped
        assert stats.per_node[ping.client_id].reconnects >= 1
    assert stats.per_node[pong.client_id].reconnects >= 1
    # The outage made at least one pinger re-send an unanswered ping.
    assert sum(p.resends for p in pings) >= 1


def test_parse_broker_url() -> None:
    plain = parse_broker_url("mqtt://localhost")
    assert (plain.host, plain.port, plain.tls, plain.username) == ("localhost", 1883, False, None)
    full = parse_broker_url("mqtt://collector:p%40ss@mosquitto:1884")
    assert (full.host, full.port, full.username, full.password) == ("mosquitto", 1884, "collector", "p@ss")
    assert "p@ss" not in full.display() and "p@ss" not in repr(full)
    secure = parse_broker_url("mqtts://broker.example.org", insecure=True)
    assert (secure.port, secure.tls, secure.insecure) == (8883, True, True)
    assert secure.tls_parameters() is not None and plain.tls_parameters() is None
    for bad in ("http://x:1", "mqtt://:1883", "mqtt://h:99999", "mqtt://h/topic", "mqtt://u:hunter2@h:1/x"):
        with pytest.raises(InputError) as info:
            parse_broker_url(bad)
        assert "hunter2" not in str(info.value)
    with pytest.raises(InputError, match="CA file"):
        parse_broker_url("mqtts://h", ca_file="/nonexistent/ca.pem")


def test_client_ids_come_from_nodes_and_must_be_unique() -> None:
    assert client_id_of(PongNode("t")) == "pong-t"

    class Anonymous:
        pass

    first, second = client_id_of(Anonymous()), client_id_of(Anonymous())  # type: ignore[arg-type]
    assert first.startswith("coutil-") and first != second
    with pytest.raises(ValueError, match="pong-t"):
        asyncio.run(host_nodes([PongNode("t"), PongNode("t")], "mqtt://127.0.0.1:1", stop_when=lambda: True, timeout=1))
