"""Re-sending until acknowledged: end-to-end delivery on top of lossy brokers.

MQTT QoS 1 only means "reached the broker"; brokers drop messages when queues overflow. Every
protocol message that someone waits for is therefore re-sent, with exponential backoff, until
the sender observes the evidence that it was consumed (an ack, or the next protocol step).
Receivers de-duplicate, so re-sending is always safe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coutil.protocol.node import Outgoing
from coutil.protocol.schedule import TimerHeap

#: The re-send interval doubles after each try up to this multiple of the base interval (or a
#: lower cap, see `Resender.limit_interval`).
MAX_BACKOFF_FACTOR = 8.0


@dataclass
class _Pending:
    messages: tuple[Outgoing, ...]
    interval: float


class Resender:
    """Keeps the messages to re-send, keyed by what acknowledges them.

    Due times live in a `TimerHeap`: the collector re-sends one assign per subject, and its driver
    asks for the next due time after every message it handles.
    """

    def __init__(self, base_interval: float, max_interval: float | None = None) -> None:
        self._base = base_interval
        self._cap = base_interval * MAX_BACKOFF_FACTOR
        self._pending: dict[object, _Pending] = {}
        self._timers: TimerHeap[object] = TimerHeap()
        if max_interval is not None:
            self.limit_interval(max_interval)

    def limit_interval(self, max_interval: float) -> None:
        """Never wait longer than ``max_interval`` between two sends (at least the base interval).

        Protocol nodes pass a quarter of the step timeout: a message re-sent at least four times
        per step survives heavy loss before the collector declares its sender silent.
        """
        self._cap = max(self._base, min(self._base * MAX_BACKOFF_FACTOR, max_interval))

    def arm(self, key: object, messages: Outgoing | tuple[Outgoing, ...], now: float) -> None:
        """Start (or restart) re-sending ``messages`` until `cancel(key)`."""
        msgs = messages if isinstance(messages, tuple) else (messages,)
        self._pending[key] = _Pending(msgs, self._base)
        self._timers.set(key, now + self._base)

    def cancel(self, key: object) -> None:
        if self._pending.pop(key, None) is not None:
            self._timers.discard(key)

    def cancel_where(self, predicate: Callable[[object], bool]) -> None:
        """Cancel every key for which ``predicate(key)`` is true."""
        for key in [k for k in self._pending if predicate(k)]:
            self.cancel(key)

    def clear(self) -> None:
        self._pending.clear()
        self._timers.clear()

    def pending(self, key: object) -> bool:
        return key in self._pending

    def due(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for key in self._timers.pop_due(now):
            entry = self._pending[key]
            out.extend(entry.messages)
            entry.interval = min(entry.interval * 2.0, self._cap)
            self._timers.set(key, now + entry.interval)
        return out

    def next_due(self) -> float | None:
        return self._timers.next_time()
