"""Re-sending until acknowledged: end-to-end delivery on top of lossy brokers.

MQTT QoS 1 only means "reached the broker"; brokers drop messages when queues overflow. Every
protocol message that someone waits for is therefore re-sent, with exponential backoff, until
the sender observes the evidence that it was consumed (an ack, or the next protocol step).
Receivers de-duplicate, so re-sending is always safe.
"""

from __future__ import annotations

from dataclasses import dataclass

from coutil.protocol.node import Outgoing

#: The re-send interval doubles after each try up to this multiple of the base interval (or a
#: lower cap, see `Resender.limit_interval`).
MAX_BACKOFF_FACTOR = 8.0


@dataclass
class _Pending:
    messages: tuple[Outgoing, ...]
    due: float
    interval: float


class Resender:
    """Keeps the messages to re-send, keyed by what acknowledges them."""

    def __init__(self, base_interval: float, max_interval: float | None = None) -> None:
        self._base = base_interval
        self._cap = base_interval * MAX_BACKOFF_FACTOR
        self._pending: dict[object, _Pending] = {}
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
        self._pending[key] = _Pending(msgs, now + self._base, self._base)

    def cancel(self, key: object) -> None:
        self._pending.pop(key, None)

    def cancel_where(self, predicate: object) -> None:
        """Cancel every key for which ``predicate(key)`` is true."""
        assert callable(predicate)
        for key in [k for k in self._pending if predicate(k)]:
            del self._pending[key]

    def clear(self) -> None:
        self._pending.clear()

    def pending(self, key: object) -> bool:
        return key in self._pending

    def due(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for entry in self._pending.values():
            if entry.due <= now:
                out.extend(entry.messages)
                entry.interval = min(entry.interval * 2.0, self._cap)
                entry.due = now + entry.interval
        return out

    def next_due(self) -> float | None:
        if not self._pending:
            return None
        return min(entry.due for entry in self._pending.values())
