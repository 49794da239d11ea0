"""How many messages the broker dropped during a round, when the broker says (mosquitto's ``$SYS``).

QoS 1 only means "reached the broker": mosquitto drops messages to a client whose queue holds
``max_queued_messages`` (1,000 by default), and the protocol then recovers them by re-sending, at a
cost in time. Measured here with ``coutil run --subjects 10000``: a default-configured mosquitto
dropped 22,804 messages and the round took 182 s; with ``docker/mosquitto/mosquitto.conf``'s limits
(``max_queued_messages 200000``) it dropped none and took 54 s. Nothing else tells a user why, so
``coutil run --broker`` follows mosquitto's counter ``$SYS/broker/publish/messages/dropped`` (published
every ``sys_interval`` seconds, 10 by default) on a connection of its own and reports the increase.

A broker that publishes no such counter (amqtt, or an ACL that hides ``$SYS``) gives ``None``:
unknown, not zero. Following the counter never fails a round: any error leaves it unknown.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

import aiomqtt

from coutil.net.mqtt import BrokerAddress

DROPPED_TOPIC = "$SYS/broker/publish/messages/dropped"
#: How long to wait after the round for one more update of the counter (mosquitto's default
#: ``sys_interval`` is 10 s; a broker configured with 1 s answers at once).
FINAL_UPDATE_SECONDS = 3.0


class BrokerDropCounter:
    """Follows the broker's dropped-messages counter while a round runs (`following`)."""

    def __init__(self, address: BrokerAddress, final_update_seconds: float = FINAL_UPDATE_SECONDS) -> None:
        self.address = address
        self.final_update_seconds = final_update_seconds
        self.first: int | None = None
        self.last: int | None = None
        self.updates = 0

    def _on_value(self, payload: object, first_value: asyncio.Event) -> None:
        if not isinstance(payload, bytes | bytearray):
            return
        try:
            value = int(bytes(payload))
        except ValueError:
            return
        self.first = value if self.first is None else self.first
        self.last = value
        self.updates += 1
        first_value.set()

    async def _read(self, first_value: asyncio.Event) -> None:
        address = self.address
        async with aiomqtt.Client(address.host, address.port, username=address.username,
                                  password=address.password, identifier=f"coutil-sys-{os.urandom(4).hex()}",
                                  tls_params=address.tls_parameters(),
                                  tls_insecure=address.insecure if address.tls else None,
                                  timeout=10.0) as client:
            await client.subscribe(DROPPED_TOPIC, qos=0)
            async for message in client.messages:
                self._on_value(message.payload, first_value)

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[BrokerDropCounter]:
        first_value = asyncio.Event()
        reader = asyncio.create_task(self._read(first_value))
        # mosquitto retains its $SYS counters: the current value arrives right after subscribing,
        # before the round starts. Give it a moment, but never hold the round up for it.
        waiter = asyncio.ensure_future(first_value.wait())
        try:
            await asyncio.wait({reader, waiter}, timeout=2.0, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        try:
            yield self
            if not reader.done() and self.updates:
                seen = self.updates
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.final_update_seconds):
                        while self.updates == seen and not reader.done():
                            await asyncio.sleep(0.05)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader

    @property
    def dropped(self) -> int | None:
        """Messages the broker dropped since the first reading; None when it published no counter."""
        if self.last is None or self.first is None:  # both are set by the first reading
            return None
        return self.last - self.first
