"""Subject nodes on a real broker: read the retained announce, then take part in the round.

A subject must know the collector's key before she registers (she verifies every collector message
with it). `fetch_announce` reads the retained announce once; with ``expected_key`` the collector is
pinned (the key a survey team publishes out of band), without it the key is trusted on first use
and reported so that the user can compare it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import aiomqtt

from coutil.errors import InputError, NetworkError, RemoteProtocolError
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, parse_broker_url
from coutil.protocol import codec, topics
from coutil.protocol.messages import Announce
from coutil.protocol.node import RandomSource, SystemRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches


@dataclass(frozen=True)
class AnnouncedRound:
    round_id: bytes
    collector_key: bytes
    qi_names: tuple[str, ...]
    confidential_names: tuple[str, ...]
    k: int
    register_deadline: float


async def fetch_announce(broker: str | BrokerAddress, *, timeout: float = 30.0,
                         expected_key: bytes | None = None) -> AnnouncedRound:
    """The current round, from the retained announce (waits up to ``timeout`` for one)."""
    address = broker if isinstance(broker, BrokerAddress) else parse_broker_url(broker)
    try:
        async with aiomqtt.Client(address.host, address.port, username=address.username,
                                  password=address.password, tls_params=address.tls_parameters()) as client:
            await client.subscribe(topics.ANNOUNCE, qos=1)
            async with asyncio.timeout(timeout):
                async for message in client.messages:
                    payload = message.payload
                    if not isinstance(payload, bytes | bytearray):
                        continue
                    try:
                        decoded = codec.decode(bytes(payload), codec.Limits())
                    except RemoteProtocolError:
                        continue  # not a valid announce: keep waiting for one
                    announce = decoded.message
                    if not isinstance(announce, Announce):
                        continue
                    if expected_key is not None and announce.sender != expected_key:
                        continue  # an announce by someone else: not our collector
                    params = announce.params
                    return AnnouncedRound(announce.round_id, announce.sender, tuple(params.qi_names),
                                          tuple(params.confidential_names), int(params.k),
                                          float(params.register_deadline))
    except TimeoutError:
        raise NetworkError(f"no round announced on {address.display()} within {timeout:.0f} s") from None
    except aiomqtt.MqttError as exc:
        raise NetworkError(f"cannot reach the broker {address.display()}: {exc}") from None
    raise NetworkError(f"the broker {address.display()} closed the subscription")


def make_subjects(round_: AnnouncedRound, records: Sequence[tuple[Sequence[float], Sequence[float]]],
                  rng: RandomSource | None = None) -> list[SubjectNode]:
    """One node per (qi values, confidential values) record; keys from ``rng`` (the OS by default)."""
    rng = rng if rng is not None else SystemRandom()
    caches = SharedCaches()
    nodes = []
    for qi, confidential in records:
        if len(qi) != len(round_.qi_names) or len(confidential) != len(round_.confidential_names):
            raise InputError("a record does not have the announced attributes")
        nodes.append(SubjectNode(collector_key=round_.collector_key, qi=qi, confidential=confidential,
                                 rng=rng, caches=caches))
    return nodes


async def host_subjects(nodes: Sequence[SubjectNode], broker: str | BrokerAddress, *, timeout: float,
                        options: DriverOptions | None = None, shared_connection: bool = False) -> HostStats:
    """Host the subjects until each has finished (verdict acknowledged) or ``timeout`` passes.

    One MQTT connection per subject (her sid as client id, so a broker ACL can confine her to her
    own topics), or with ``shared_connection`` all of them multiplexed over one connection (no
    per-subject ACL possible; a group message then crosses the socket once, not once per member).
    """
    entries: list[SubjectNode | list[SubjectNode]] = [list(nodes)] if shared_connection else list(nodes)
    remaining = list(nodes)

    def finished() -> bool:
        # Finished nodes stay finished: drop them, so that the check does not rescan 10^4 nodes.
        while remaining and remaining[-1].finished:
            remaining.pop()
        return not remaining and all(n.finished for n in nodes)

    return await host_nodes(entries, broker, stop_when=finished, timeout=timeout, options=options)
