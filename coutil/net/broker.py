"""The embedded default broker: amqtt started in-process, bound to loopback, explicitly configured.

`coutil run` and the tests need an MQTT broker without anything installed. amqtt 0.12 is a pure
Python MQTT 3.1.1 broker, but its defaults are unsafe for us: it binds ``0.0.0.0``, accepts
anonymous clients, loads chatty logging and ``$SYS`` plugins, and has no packet-size limit. So we
never use its defaults:

- the listener binds ``127.0.0.1`` (or another loopback address) unless credentials are
  configured: anonymous access is only ever offered to processes on this machine;
- with ``users`` given, a small password plugin of ours requires a matching username/password
  (constant-time comparison), so the broker may listen beyond loopback;
- only the authentication plugin is loaded (no packet logger, no ``$SYS`` publisher);
- the message-size limit (``max_message_bytes``) is enforced by our driver (`coutil.net.mqtt`), which
  refuses to publish and drops on receipt anything larger, because amqtt cannot enforce one;
- amqtt delivers QoS 0 as QoS 1 and keeps retained messages in memory only: a broker restart loses
  them, which the protocol tolerates (the collector re-publishes its bulletins on request).

Usage::

    async with EmbeddedBroker() as broker:      # picks a free port
        await host_nodes(nodes, broker.url, ...)
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from amqtt.broker import Broker
from amqtt.plugins.base import BaseAuthPlugin

from coutil.errors import InputError, NetworkError

#: Default cap on one MQTT payload: the protocol's default ``max_message_bytes`` (64 MiB) plus room
#: for the envelope (version, signature) so a maximal protocol message still fits.
DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20 + 4096

#: Dotted path of our password plugin as amqtt's plugin loader expects it.
_PASSWORD_PLUGIN = f"{__name__}.StaticPasswordAuthPlugin"
_ANONYMOUS_PLUGIN = "amqtt.plugins.authentication.AnonymousAuthPlugin"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class EmbeddedBrokerConfig:
    """How the embedded broker listens and whom it lets in."""

    #: Address to bind. Must be a loopback address unless ``users`` is given.
    host: str = "127.0.0.1"
    #: TCP port; 0 picks a free one (read it back from `EmbeddedBroker.port`).
    port: int = 0
    #: username -> password. ``None``: anonymous clients are accepted (loopback only).
    users: Mapping[str, str] | None = None
    #: Maximum simultaneous client connections; 0 means unlimited.
    max_connections: int = 0
    #: Largest payload our driver publishes or accepts through this broker.
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    #: Seconds an idle client may stay connected past its keep-alive before amqtt drops it.
    timeout_disconnect_delay: int = 0
    extra_plugins: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InputError(f"broker port must be in 0..65535, got {self.port}")
        if self.users is None and not _is_loopback(self.host):
            raise InputError(
                f"embedded broker: refusing to bind {self.host!r} with anonymous access; "
                "bind 127.0.0.1 or configure users"
            )
        if self.max_message_bytes <= 0:
            raise InputError("max_message_bytes must be positive")
        if self.max_connections < 0:
            raise InputError("max_connections must be >= 0")

    def amqtt_config(self) -> dict[str, Any]:
        """The explicit amqtt configuration dictionary (no amqtt default is relied upon)."""
        plugins: dict[str, Any]
        if self.users is None:
            plugins = {_ANONYMOUS_PLUGIN: {"allow_anonymous": True}}
        else:
            plugins = {_PASSWORD_PLUGIN: {"users": dict(self.users)}}
        plugins.update({name: dict(options) for name, options in self.extra_plugins.items()})
        return {
            "listeners": {
                "default": {
                    "type": "tcp",
                    "bind": f"{self.host}:{self.port}",
                    "max_connections": self.max_connections,
                }
            },
            "timeout_disconnect_delay": self.timeout_disconnect_delay,
            "plugins": plugins,
        }


class StaticPasswordAuthPlugin(BaseAuthPlugin):  # type: ignore[misc]
    """amqtt authentication plugin: a fixed username -> password table, no anonymous access."""

    @dataclass
    class Config:
        """Plugin options (amqtt hydrates this from the ``plugins`` section)."""

        users: dict[str, str] = field(default_factory=dict)

    async def authenticate(self, *, session: Any) -> bool | None:
        users: dict[str, str] = getattr(self.config, "users", {}) or {}
        username = getattr(session, "username", None)
        password = getattr(session, "password", None)
        if not username or password is None or username not in users:
            return False
        supplied = password.encode() if isinstance(password, str) else bytes(password)
        # Constant-time comparison: the broker must not leak how much of a password matched.
        return hmac.compare_digest(supplied, users[username].encode())


class _UnknownAckFilter(logging.Filter):
    """Drops amqtt's warnings about acknowledgements it no longer waits for.

    amqtt re-delivers a QoS 1 message that a busy client has not acknowledged yet, then warns when
    the acknowledgement of the first copy arrives ("Received PUBACK for unknown pending message
    Id", or "PUBACK waiter with Id ... already done" when the client went away meanwhile, as when
    an interrupted ``coutil run`` disconnects). Duplicates are expected (the protocol de-duplicates);
    the warning is noise on a user's terminal. Every other amqtt warning still gets through.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "for unknown pending" not in message and "waiter with Id" not in message


class _IteratesACopy(dict[str, Any]):
    """A dict whose iteration walks a snapshot of its keys (see `EmbeddedBroker.start`)."""

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.keys()))


class EmbeddedBroker:
    """An amqtt broker running inside the current asyncio loop (an async context manager)."""

    def __init__(self, config: EmbeddedBrokerConfig | None = None) -> None:
        self.config = config if config is not None else EmbeddedBrokerConfig()
        self._broker: Broker | None = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        """The TCP port actually bound (valid once started)."""
        if self._port is None:
            raise RuntimeError("embedded broker not started")
        return self._port

    @property
    def host(self) -> str:
        return self.config.host

    @property
    def url(self) -> str:
        """``mqtt://host:port`` for `coutil.net.mqtt.parse_broker_url` (no credentials)."""
        return f"mqtt://{self.config.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._broker is not None

    async def start(self) -> None:
        """Bind and start serving; raises `NetworkError` when the address cannot be bound."""
        if self._broker is not None:
            raise RuntimeError("embedded broker already started")
        # amqtt logs every connection at INFO; the broker's own chatter is not our trace.
        logging.getLogger("amqtt").setLevel(logging.WARNING)
        # A logger's filters see only the records of that very logger, not of its children.
        handler_logger = logging.getLogger("amqtt.mqtt.protocol.handler")
        if not any(isinstance(f, _UnknownAckFilter) for f in handler_logger.filters):
            handler_logger.addFilter(_UnknownAckFilter())
        logging.getLogger("transitions").setLevel(logging.WARNING)
        broker = Broker(self.config.amqtt_config(), loop=asyncio.get_running_loop())
        # amqtt 0.12 iterates its table of subscriptions with an await inside the loop when a client
        # connects (`Broker._handle_client_session`); another client subscribing meanwhile made it raise
        # "dictionary changed size during iteration" and drop the connecting client's session (about 1
        # run in 10 of tests/net/test_broker.py::test_ping_pong_over_embedded_broker). Iterating a copy
        # is what it meant; every other use of the table is unchanged.
        broker._subscriptions = _IteratesACopy(broker._subscriptions)
        try:
            await broker.start()
        except Exception as exc:  # amqtt wraps OSError in BrokerError
            raise NetworkError(
                f"embedded broker: cannot listen on {self.config.host}:{self.config.port}: {exc}"
            ) from exc
        self._broker = broker
        self._port = self._bound_port(broker)

    def _bound_port(self, broker: Broker) -> int:
        if self.config.port:
            return self.config.port
        # Port 0 asks the OS for a free port; amqtt does not report it, so read it off the
        # listening socket (race-free, unlike probing for a free port and then binding it).
        server = broker._servers["default"].instance
        return int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Disconnect every client and close the listener (idempotent)."""
        broker, self._broker = self._broker, None
        if broker is None:
            return
        with contextlib.suppress(Exception):
            await broker.shutdown()

    async def __aenter__(self) -> EmbeddedBroker:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
