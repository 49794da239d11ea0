"""Spare cores for a node's independent CPU work (`coutil.protocol.node.WorkPool`), with threads.

When the last groups of a round reveal, the collector opens about six X25519 operations' worth of
records per subject: at 10^5 subjects some 20 s of one core, while the subjects' processes, done
with their part, wait for the release. libsodium's curve operations run without the GIL (PyNaCl
calls them through cffi), so threads open the groups' records while the node's own thread goes on
reading the other groups' reveals. What comes back, in what order, is exactly `SERIAL_POOL`'s.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

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

    def close(self) -> None:
        self._executor.shutdown(wait=True)

    def __enter__(self) -> ThreadPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
