"""A keyed timer heap: the next due time of many timers in O(log n), for nodes that hold thousands.

The collector holds one re-send timer per subject (her assign) and one step timer per group; a
driver asks `next_timer()` after every message, so a linear scan would make a round quadratic in
the number of subjects. Entries are (time, sequence, key) in a binary heap with lazy deletion: a key
whose time changes gets a new entry, and entries that no longer match their key's time are dropped
when they reach the top (or when stale entries outnumber live ones, in one rebuild).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class TimerHeap(Generic[K]):
    """Due times by key: set, discard, peek at the earliest, pop the due ones."""

    def __init__(self) -> None:
        self._when: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._sequence = 0

    def __len__(self) -> int:
        return len(self._when)

    def __contains__(self, key: object) -> bool:
        return key in self._when

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._when))

    def get(self, key: K) -> float | None:
        return self._when.get(key)

    def set(self, key: K, when: float) -> None:
        """(Re)schedule ``key`` at ``when``."""
        if self._when.get(key) == when:
            return
        self._when[key] = when
        self._sequence += 1  # ties pop in insertion order, and keys are never compared
        heapq.heappush(self._heap, (when, self._sequence, key))
        if len(self._heap) > 2 * len(self._when) + 64:
            self._rebuild()

    def discard(self, key: K) -> None:
        self._when.pop(key, None)

    def clear(self) -> None:
        self._when.clear()
        self._heap.clear()

    def next_time(self) -> float | None:
        """The earliest due time, or None when nothing is scheduled."""
        heap = self._heap
        while heap:
            when, _, key = heap[0]
            if self._when.get(key) == when:
                return when
            heapq.heappop(heap)
        return None

    def pop_due(self, now: float) -> list[K]:
        """Remove and return the keys due at ``now`` (earliest first)."""
        due: list[K] = []
        heap = self._heap
        while heap and heap[0][0] <= now:
            when, _, key = heapq.heappop(heap)
            if self._when.get(key) == when:
                del self._when[key]
                due.append(key)
        return due

    def _rebuild(self) -> None:
        self._heap = [(when, sequence, key) for when, sequence, key in self._heap if self._when.get(key) == when]
        heapq.heapify(self._heap)


def fair_order(keys: list[K], turn: int) -> list[K]:
    """``keys`` rotated by ``turn``: the order in which a burst of due re-sends or relays goes out.

    A broker with a bounded queue per client (mosquitto's ``max_queued_messages``) drops the tail of a
    burst. Timers re-armed in emission order would keep the same keys at the tail, burst after burst,
    so the same messages were lost every time (a whole group never got its ``shuffle_start`` and was
    excluded as silent); rotating by a counter the caller increments per burst brings every key to the
    front within ``len(keys)`` bursts.
    """
    if len(keys) < 2:
        return keys
    start = turn % len(keys)
    return keys[start:] + keys[:start]
