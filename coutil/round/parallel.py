"""Spare cores for a node's independent CPU work (`coutil.protocol.node.WorkPool`).

When the last groups of a round reveal, the collector opens about six X25519 operations' worth of
records per subject: at 10^5 subjects some 20 s of one core, while the subjects' processes, done
with their part, wait for the release. A pool opens the groups' records while the node's own
thread goes on reading the other groups' reveals. What comes back, in what order, is exactly
`SERIAL_POOL`'s.

- `ProcessPool` (what `coutil run` and `coutil collector serve` use): processes of their own, so
  the node's thread and the openings never wait for each other's interpreter lock (measured at
  10^5 subjects, two worker processes: the phase took 25 s at 1.5 cores with threads).
- `signature_prechecker`: the same processes verify the signatures of a burst of received messages
  (registrations, verdicts) ahead of the collector's thread (`coutil.net.burst`).
- `ThreadPool`: threads; libsodium's curve operations run without the GIL (PyNaCl calls them
  through cffi), the Python around them does not.

A helper process that dies (killed, out of memory) breaks a `ProcessPool`; the work handed to it,
and all work after, is then done in the node's own process: slower, the same result, and nothing
the collector accepted is lost (`tests/round/test_parallel.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Generic, TypeVar

from coutil.net.broker_process import children_ignore_sigint, ignore_sigint
from coutil.net.burst import BurstCheck
from coutil.protocol import codec
from coutil.protocol.collector import CollectorNode

logger = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


def _run(fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
    return [fn(item) for item in items]


class ThreadPool:
    """A `WorkPool` of ``threads`` threads (default: one per core, at most four); each submission
    is one task. `close` waits for what was submitted."""

    def __init__(self, threads: int | None = None) -> None:
        self.threads = max(1, threads if threads is not None else min(os.cpu_count() or 1, 4))
        self._executor = ThreadPoolExecutor(self.threads, thread_name_prefix="coutil-pool")

    def submit(self, fn: Callable[[T], R], items: Sequence[T]) -> Future[list[R]]:
        return self._executor.submit(_run, fn, items)

    def future(self, fn: Callable[[T], R], items: Sequence[T]) -> Future[list[R]]:
        """`submit`, as a `concurrent.futures.Future` (what an event loop can await)."""
        return self.submit(fn, items)

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> ThreadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: Subjects from which `coutil run` opens records in a `ProcessPool` (below, the second its processes
#: take to start costs more than the openings: 10^3 subjects' records open in about 0.2 s).
PROCESS_POOL_FROM = 5_000


def _ready() -> bool:
    return True


class InProcessIfBroken(Generic[R]):
    """What `ProcessPool.submit` hands back: the processes' result, or, if the pool broke before
    delivering it, ``fallback()`` (the same work, done by the caller)."""

    __slots__ = ("_fallback", "_future")

    def __init__(self, future: Future[R] | None, fallback: Callable[[], R]) -> None:
        self._future = future
        self._fallback = fallback

    def result(self, timeout: float | None = None) -> R:
        if self._future is not None:
            try:
                return self._future.result(timeout)
            except BrokenProcessPool:
                pass
        return self._fallback()


class ProcessPool:
    """A `WorkPool` of ``processes`` processes (default: one per core, at most four), started from
    a clean interpreter (``spawn``: the caller's threads and event loop are not forked). Functions
    and items must pickle: `coutil.protocol.collector_groups.open_item` and its keys do.

    The processes start when the pool is made, not at the first opening (a spawned interpreter
    takes about a second to import the crypto stack). `close` waits for what was submitted."""

    def __init__(self, processes: int | None = None) -> None:
        self.processes = max(1, processes if processes is not None else min(os.cpu_count() or 1, 4))
        # Ctrl-C reaches the whole process group: the pool's processes ignore it (started with SIGINT
        # ignored, and ignoring it again once up), and the main process ends the pool at its clean-up.
        with children_ignore_sigint():
            self._executor = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=ignore_sigint)
            self._warm = [self._executor.submit(_ready) for _ in range(self.processes)]
        self.broken = False  #: a process died: everything is done in the caller's process since

    def submit(self, fn: Callable[[T], R], items: Sequence[T]) -> InProcessIfBroken[list[R]]:
        """Run ``fn`` over ``items`` in a helper process; if the pool is or gets broken, in this one."""
        def here() -> list[R]:
            self._note_broken()
            return _run(fn, items)

        if not self.broken:
            try:
                return InProcessIfBroken(self._executor.submit(_run, fn, items), here)
            except BrokenProcessPool:
                pass
        return InProcessIfBroken(None, here)

    def future(self, fn: Callable[[T], R], items: Sequence[T]) -> Future[list[R]]:
        """The helper processes' `concurrent.futures.Future` (what an event loop can await), with no
        fallback: it raises `BrokenProcessPool` once a process died (for work that may be skipped)."""
        if self.broken:
            raise BrokenProcessPool("a helper process died earlier")
        return self._executor.submit(_run, fn, items)

    def _note_broken(self) -> None:
        if not self.broken:
            self.broken = True
            logger.warning("a helper process died; the collector does the helpers' work in its own process")

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def signature_prechecker(pool: ProcessPool | ThreadPool, node: CollectorNode) -> BurstCheck:
    """A `coutil.net.burst.BurstCheck` that verifies a burst's signatures in ``pool`` (with the node's
    decoding limits) and records the envelopes that verified in the node's decode cache.

    The collector's registrations and verdicts arrive in bursts of tens of thousands, each with a
    signature that costs the collector's thread more than the rest of the message does; the pool's
    processes, idle until the release, verify them meanwhile (measured in README, "10^5 subjects
    over mosquitto")."""
    verify = functools.partial(codec.verified_digest, node.limits)
    cache = node.decode_cache

    async def check(payloads: list[bytes]) -> None:
        digests: list[bytes | None] = await asyncio.wrap_future(pool.future(verify, payloads))
        cache.remember_digests(digests)

    return check
