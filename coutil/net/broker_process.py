"""The embedded amqtt broker in a child process of its own.

amqtt is pure Python: at a few thousand subjects it needs a core to itself. In the process that
hosts the nodes it competes with their cryptography: in the same event loop it was starved (its
QoS 1 acknowledgement timeouts fired and it dropped deliveries), and even in a thread of its own
it got too little of the interpreter (2,000 subjects: a fifth of them excluded as silent because
their shuffle messages came too late). ``coutil run`` therefore starts it as a child process
(``spawn``: no fork of a process with a running loop), with the same explicit configuration
(`coutil.net.broker.EmbeddedBrokerConfig`: loopback, no anonymous access beyond it). Nothing needs
installing; the child ends with the round, or by itself if its parent disappears.

Usage::

    async with BrokerProcess() as broker:
        await host_nodes(nodes, broker.url, ...)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from coutil.errors import NetworkError
from coutil.net.broker import EmbeddedBroker, EmbeddedBrokerConfig

logger = logging.getLogger(__name__)

#: Seconds the child gets to import amqtt and bind its port.
START_TIMEOUT = 60.0
#: Seconds the child gets to disconnect its clients and exit before it is terminated.
STOP_TIMEOUT = 10.0
#: How often the child checks the stop request and that its parent is alive.
POLL_SECONDS = 0.1


@contextlib.contextmanager
def children_ignore_sigint() -> Iterator[None]:
    """Start child processes inside this block: they inherit SIGINT ignored.

    Ctrl-C reaches every process of the terminal's process group; a child must not die of it with a
    traceback (mid-import, or while its parent still talks to it). The parent, which receives it
    too, stops its children itself (clean-up of `BrokerProcess` and `coutil.round.workers`). An
    ignored signal stays ignored across exec, and Python then installs no handler of its own.
    """
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals cannot be changed here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def ignore_sigint() -> None:
    """In a child process: ignore SIGINT (its parent stops it; see `children_ignore_sigint`)."""
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def serve(config: EmbeddedBrokerConfig, channel: Any, stop: Any, parent_pid: int) -> None:
    """Entry point of the child: run the broker until ``stop`` is set or the parent is gone."""
    ignore_sigint()

    async def main() -> None:
        # An overloaded amqtt leaves tasks failed on acknowledgement timeouts ("Task exception was
        # never retrieved" and a traceback on the user's terminal). The protocol re-sends what was
        # lost; these are logged at debug level only.
        asyncio.get_running_loop().set_exception_handler(_quiet_exception_handler)
        broker = EmbeddedBroker(config)
        try:
            await broker.start()
        except Exception as exc:  # reported to the parent, which raises it as a NetworkError
            channel.send(("error", str(exc)))
            return
        # Stopped mid-round (the round was interrupted), amqtt warns about the messages it did not
        # deliver: the round is over, nobody waits for them.
        logging.getLogger("amqtt.broker").setLevel(logging.ERROR)
        channel.send(("port", broker.port))
        try:
            while not stop.is_set() and os.getppid() == parent_pid:
                await asyncio.sleep(POLL_SECONDS)
        finally:
            await broker.stop()

    asyncio.run(main())


def _quiet_exception_handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    logger.debug("embedded broker: %s (%r)", context.get("message"), context.get("exception"))


class BrokerProcess:
    """An `EmbeddedBroker` in a child process (an async context manager with the same ``url``)."""

    def __init__(self, config: EmbeddedBrokerConfig | None = None) -> None:
        self.config = config if config is not None else EmbeddedBrokerConfig()
        self._process: Any = None
        self._stop: Any = None
        self._port: int | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("embedded broker not started")
        return self._port

    @property
    def url(self) -> str:
        return f"mqtt://{self.config.host}:{self.port}"

    async def start(self) -> None:
        """Start the child and wait until it listens; `NetworkError` when it cannot."""
        if self._process is not None:
            raise RuntimeError("embedded broker already started")
        context = multiprocessing.get_context("spawn")
        receiver, sender = context.Pipe(duplex=False)
        self._stop = context.Event()
        self._process = context.Process(target=serve, args=(self.config, sender, self._stop, os.getpid()),
                                        daemon=True, name="coutil-embedded-broker")
        with children_ignore_sigint():
            self._process.start()
        sender.close()
        loop = asyncio.get_running_loop()
        try:
            ready = await loop.run_in_executor(None, receiver.poll, START_TIMEOUT)
            message = receiver.recv() if ready else None
        except (EOFError, OSError):
            message = None
        finally:
            receiver.close()
        if message is None or message[0] != "port":
            await self.stop()
            reason = message[1] if message is not None else "it did not start"
            raise NetworkError(f"embedded broker: cannot listen on {self.config.host}:{self.config.port}: {reason}")
        self._port = int(message[1])

    async def stop(self) -> None:
        """Ask the child to shut down; terminate it if it does not (idempotent)."""
        process, self._process = self._process, None
        if process is None:
            return
        self._stop.set()
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, process.join, STOP_TIMEOUT)
        if process.is_alive():
            process.terminate()
            await loop.run_in_executor(None, process.join, STOP_TIMEOUT)

    async def __aenter__(self) -> BrokerProcess:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()
