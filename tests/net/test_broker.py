"""The embedded amqtt broker: toy ping-pong nodes over it through the MQTT driver."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aiomqtt
import pytest

from coutil.errors import ExitCode, InputError, NetworkError
from coutil.net.broker import EmbeddedBroker, EmbeddedBrokerConfig
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import DriverOptions, HostStats
from coutil.protocol.node import Event, Outgoing
from tests.net.helpers import PingNode, PongNode, free_port


def _ping_pong(url: str, *, pingers: int, rounds: int, options: DriverOptions | None = None):
    pong = PongNode("embedded")
    pings = [PingNode("embedded", f"p{i}", rounds) for i in range(pingers)]
    events: list[tuple[str, Event]] = []

    async def run() -> HostStats:
        return await host_nodes(
            [pong, *pings],
            url,
            stop_when=lambda: all(p.finished for p in pings),
            timeout=30,
            on_event=lambda cid, ev: events.append((cid, ev)),
            options=options,
        )

    return pong, pings, events, run


def test_ping_pong_over_embedded_broker() -> None:
    async def main() -> tuple[HostStats, PongNode, list[PingNode], list[tuple[str, Event]]]:
        async with EmbeddedBroker() as broker:
            assert broker.host == "127.0.0.1" and broker.port > 0
            pong, pings, events, run = _ping_pong(broker.url, pingers=3, rounds=8)
            stats = await run()
            return stats, pong, pings, events

    stats, pong, pings, events = asyncio.run(main())
    assert stats.stopped_by == "condition"
    for ping in pings:
        assert ping.answered == list(range(8))
        # Every ping went out at least once, and each answered ping was received by the pong node.
        assert stats.per_node[ping.client_id].sent_messages >= 8
        assert stats.per_node[ping.client_id].received_messages >= 9  # retained hello + 8 pongs
    assert pong.pings_seen >= 24
    assert stats.per_node[pong.client_id].received_messages == pong.pings_seen
    pong_events = [ev for cid, ev in events if ev.kind == "pong"]
    assert len(pong_events) == 24
    assert {cid for cid, ev in events if ev.kind == "started"} == {p.client_id for p in pings}
    assert stats.drops == 0 and stats.reconnects == 0


class _BigHelloPong(PongNode):
    def start(self, now: float) -> list[Outgoing]:
        return [Outgoing(f"toy/{self.tag}/hello", b"x" * 100, retain=True)]


def test_oversized_payloads_are_dropped_by_the_driver() -> None:
    """amqtt has no size limit: the driver refuses to publish, and drops on receipt, big payloads."""
    options = DriverOptions(max_message_bytes=20)
    pong = _BigHelloPong("big")

    async def main() -> tuple[HostStats, list[bytes]]:
        received: list[bytes] = []
        async with EmbeddedBroker() as broker:
            hosting = asyncio.create_task(
                host_nodes([pong], broker.url, stop_when=lambda: False, timeout=3, options=options)
            )
            async with aiomqtt.Client("127.0.0.1", broker.port, identifier="raw") as client:
                await client.subscribe([("toy/big/pong/raw", 1), ("toy/big/hello", 1)])
                while pong.pings_seen < 2:
                    # The node may not be subscribed yet (its SUBSCRIBE may even land between the two
                    # publishes of a pair): re-send both until two small ones landed.
                    await client.publish("toy/big/ping/raw", b"ping:" + b"9" * 50, qos=1)
                    await client.publish("toy/big/ping/raw", b"ping:1", qos=1)
                    await asyncio.sleep(0.1)
                message = await asyncio.wait_for(anext(client.messages), 5)
                received.append(bytes(message.payload))  # type: ignore[arg-type]
            return await hosting, received

    stats, received = asyncio.run(main())
    traffic = stats.per_node[pong.client_id]
    assert received[:1] == [b"pong:1"]  # the 100-byte retained hello never reached the broker
    assert pong.pings_seen == traffic.received_messages >= 2
    # The node's one dropped outgoing hello; on its connection, a dropped 55-byte ping before every
    # small ping delivered but perhaps the first (published before the subscription took hold).
    assert traffic.drops == 1 and stats.wire[pong.client_id].drops >= pong.pings_seen - 1 >= 1
    assert stats.drops == traffic.drops + stats.wire[pong.client_id].drops
    assert stats.stopped_by == "timeout"


def test_password_config_refuses_anonymous_and_wrong_password() -> None:
    async def main() -> list[str]:
        outcomes: list[str] = []
        config = EmbeddedBrokerConfig(users={"collector": "s3cret"})
        async with EmbeddedBroker(config) as broker:
            for url in (broker.url, f"mqtt://collector:wrong@127.0.0.1:{broker.port}"):
                try:
                    await host_nodes([PongNode("auth")], url, stop_when=lambda: False, timeout=5)
                except NetworkError as exc:
                    outcomes.append(f"refused: {exc}")
            good = f"mqtt://collector:s3cret@127.0.0.1:{broker.port}"
            stats = await host_nodes([PongNode("auth")], good, stop_when=lambda: False, timeout=1)
            outcomes.append(f"ok {stats.stopped_by}")
            async with aiomqtt.Client(
                "127.0.0.1", broker.port, identifier="raw", username="collector", password="s3cret"
            ) as client:
                await client.subscribe("toy/auth/hello")
                message = await asyncio.wait_for(anext(client.messages), 5)
                outcomes.append(f"retained {message.payload!r}")
        return outcomes

    outcomes = asyncio.run(main())
    assert len(outcomes) == 4
    assert outcomes[0].startswith("refused") and outcomes[1].startswith("refused")
    assert "wrong" not in outcomes[1]  # the password is never echoed
    assert outcomes[2] == "ok timeout"
    assert outcomes[3] == "retained b'hello'"


def test_anonymous_broker_must_stay_on_loopback() -> None:
    with pytest.raises(InputError, match="anonymous"):
        EmbeddedBrokerConfig(host="0.0.0.0")
    EmbeddedBrokerConfig(host="0.0.0.0", users={"u": "p"})  # allowed: credentials required
    config = EmbeddedBrokerConfig(port=1234).amqtt_config()
    assert config["listeners"]["default"]["bind"] == "127.0.0.1:1234"
    assert list(config["plugins"]) == ["amqtt.plugins.authentication.AnonymousAuthPlugin"]


def test_unreachable_broker_is_a_network_error_quickly() -> None:
    port = free_port()  # nothing listens here
    options = DriverOptions(connect_timeout=0.5, backoff_max=0.2)
    began = time.monotonic()
    with pytest.raises(NetworkError, match=f"127.0.0.1:{port}") as info:
        asyncio.run(
            host_nodes(
                [PongNode("x")], f"mqtt://127.0.0.1:{port}", stop_when=lambda: False, timeout=30, options=options
            )
        )
    assert info.value.exit_code == ExitCode.NETWORK
    assert time.monotonic() - began < 5


def test_port_in_use_is_a_network_error() -> None:
    async def main() -> None:
        async with EmbeddedBroker() as first:
            with pytest.raises(NetworkError, match="cannot listen"):
                await EmbeddedBroker(EmbeddedBrokerConfig(port=first.port)).start()

    asyncio.run(main())


def test_amqtt_warnings_about_stale_acknowledgements_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """amqtt's "PUBACK for unknown pending message" is noise (duplicates are expected); others are not."""

    async def main() -> None:
        async with EmbeddedBroker():
            handler_log = logging.getLogger("amqtt.mqtt.protocol.handler")
            handler_log.warning("Received PUBACK for unknown pending message Id: '7'")
            handler_log.warning("Something else went wrong")

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("amqtt")]
    assert "Something else went wrong" in messages
    assert not any("unknown pending" in m for m in messages)


class _BuggyPong(PongNode):
    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        raise RuntimeError("bug in a node")


@pytest.mark.parametrize("multiplexed", [False, True])
def test_an_exception_raised_by_a_node_ends_hosting_with_that_exception(multiplexed: bool) -> None:
    """A node's bug propagates out of `host_nodes` promptly; it is not taken for a lost connection."""
    pong = _BuggyPong("buggy")
    ping = PingNode("buggy", "p0", 3)

    async def main() -> None:
        async with EmbeddedBroker() as broker:
            nodes: list[Any] = [[pong, ping]] if multiplexed else [pong, ping]
            await host_nodes(nodes, broker.url, stop_when=lambda: ping.finished, timeout=30)

    began = time.monotonic()
    with pytest.raises(RuntimeError, match="bug in a node"):
        asyncio.run(main())
    assert time.monotonic() - began < 15
