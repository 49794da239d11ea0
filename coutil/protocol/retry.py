"""Re-sending until acknowledged: end-to-end delivery on top of lossy brokers.

MQTT QoS 1 only means "reached the broker"; brokers drop messages when queues overflow. Every
protocol message that someone waits for is therefore re-sent, with exponential backoff, until
the sender observes the evidence that it was consumed (an ack, or the next protocol step).
Receivers de-duplicate, so re-sending is always safe.

The first re-send waits for the *retransmission timeout* (RTO), estimated as TCP does (RFC 6298:
smoothed round trip plus four times its variation, from how long the node's earlier messages
took to be acknowledged), never below the configured base interval nor above the cap. On an idle
network the RTO is the base interval. When one machine hosts thousands of subjects, an answer
takes seconds to come back because the CPU is busy; re-sending every 2 s then multiplied the
load (at 2,000 subjects, 20 duplicate deliveries per subject), and the RTO grows instead.

News holds re-sends back (RFC 6298, rule 5.3: "when an ACK is received that acknowledges new data,
restart the retransmission timer"): while fresh messages keep arriving (an acknowledgement, or
`news` from the node: a fellow member's keys, a batch), the peers are busy serving the queue in
which this message waits, and a copy would only lengthen it. A message is then re-sent once its
wait has passed since the later of its last send and the last news, and at the latest after the
cap since its last send (so that a lost message is still re-sent within the cap). The subjects one
process hosts share their news (`NewsClock`): their messages wait in the same queues, and one
subject's news is evidence that the queue ahead of the others' is moving. `postpone` delays the
first re-send of a burst (the collector's assigns and shuffle_starts, all sent when registration
closes), `relax` re-sends only at the cap what waits for something other than its receivers (a
member's vote at the reveal barrier). Measured at 10^4 subjects with two worker processes
(`simulations/bench/bench_round_mqtt.py`): 7.8 duplicates per subject before these rules, none after
(README, "Benchmarks").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from coutil.protocol.node import Outgoing
from coutil.protocol.schedule import TimerHeap, fair_order

#: The re-send interval doubles after each try up to this multiple of the base interval (or a
#: lower cap, see `Resender.limit_interval`).
MAX_BACKOFF_FACTOR = 8.0


#: RFC 6298 smoothing gains.
RTT_ALPHA = 0.125
RTT_BETA = 0.25


class NewsClock:
    """When news last arrived (see `Resender.news`): one per node, or shared by the nodes one
    process hosts over one connection, whose messages wait in the same queues."""

    def __init__(self) -> None:
        self.at = float("-inf")


@dataclass
class _Pending:
    messages: tuple[Outgoing, ...]
    interval: float
    armed_at: float
    #: When its messages last left (first send or re-send).
    sent_at: float


class Resender:
    """Keeps the messages to re-send, keyed by what acknowledges them.

    Due times live in a `TimerHeap`: the collector re-sends one assign per subject, and its driver
    asks for the next due time after every message it handles.
    """

    def __init__(self, base_interval: float, max_interval: float | None = None, *,
                 news: NewsClock | None = None) -> None:
        self._base = base_interval
        self._cap = base_interval * MAX_BACKOFF_FACTOR
        self._pending: dict[object, _Pending] = {}
        self._timers: TimerHeap[object] = TimerHeap()
        #: Bursts of due re-sends so far: each goes out in a rotated order (`fair_order`).
        self._turn = 0
        #: The node's clock as of its latest call (nodes set it; acknowledgements are timed with it).
        self.now = 0.0
        self._srtt: float | None = None
        self._rttvar = 0.0
        #: When the last news arrived (see `news`).
        self._news = news if news is not None else NewsClock()
        #: Messages re-sent so far, by kind of key (its first element: ``assign``, ``keys``, ...).
        self.resent: Counter[str] = Counter()
        if max_interval is not None:
            self.limit_interval(max_interval)

    def limit_interval(self, max_interval: float) -> None:
        """Never wait longer than ``max_interval`` between two sends (at least the base interval).

        Protocol nodes pass a quarter of the step timeout: a message re-sent at least four times
        per step survives heavy loss before the collector declares its sender silent.
        """
        self._cap = max(self._base, min(self._base * MAX_BACKOFF_FACTOR, max_interval))

    @property
    def timeout(self) -> float:
        """The current retransmission timeout: the wait before a message's first re-send."""
        if self._srtt is None:
            return self._base
        return min(self._cap, max(self._base, self._srtt + 4.0 * self._rttvar))

    def arm(self, key: object, messages: Outgoing | tuple[Outgoing, ...], now: float) -> None:
        """Start (or restart) re-sending ``messages`` until `cancel(key)`."""
        msgs = messages if isinstance(messages, tuple) else (messages,)
        interval = self.timeout
        self._pending[key] = _Pending(msgs, interval, now, now)
        self._timers.set(key, now + interval)

    def postpone(self, seconds: float) -> None:
        """Every pending message's next send waits ``seconds`` longer (at most the cap after its last
        send): a burst was just queued, and its acknowledgements cannot come before it drained."""
        if seconds <= 0.0:
            return
        for key, entry in self._pending.items():
            due = self._timers.get(key)
            if due is not None:
                self._timers.set(key, min(due + seconds, entry.sent_at + self._cap))

    def relax(self, key: object) -> None:
        """Re-send ``key``'s messages only at the cap from now on: their acknowledgement waits for
        something other than their receivers (a member's vote, for the reveal barrier)."""
        entry = self._pending.get(key)
        if entry is None or entry.armed_at == float("inf"):
            return
        # Not a round-trip sample when acknowledged: the wait is the other groups', not the network's
        # (a member's vote waited minutes at the barrier at 10^5 subjects, and every later RTO with it).
        entry.armed_at = float("inf")
        if entry.interval < self._cap:
            entry.interval = self._cap
            self._timers.set(key, entry.sent_at + self._cap)

    def resend_now(self, now: float) -> list[Outgoing]:
        """A peer re-sent something it already sent me: it lacks evidence it waits for, perhaps a
        message of mine (TCP's fast retransmit). Re-send every pending message not sent within
        half the base interval, whatever the news (it reconnected, or its copy was lost)."""
        out: list[Outgoing] = []
        for key, entry in self._pending.items():
            if now - entry.sent_at >= self._base / 2.0:
                entry.sent_at = now
                out.extend(entry.messages)
                self.resent[_kind_of(key)] += len(entry.messages)
        return out

    def news(self, now: float) -> None:
        """A fresh message arrived (not a duplicate): the peers are being served; pending re-sends
        wait for their interval from now (never beyond the cap since their last send)."""
        self._news.at = max(self._news.at, now)

    def cancel(self, key: object, *, acknowledged: bool = True) -> None:
        """Stop re-sending ``key``'s messages. ``acknowledged``: the evidence that they were consumed
        arrived (the time since `arm` is a round-trip sample); False for any other reason to stop."""
        entry = self._pending.pop(key, None)
        if entry is None:
            return
        self._timers.discard(key)
        if acknowledged:
            self.news(self.now)
            if self.now >= entry.armed_at:
                self._observe(self.now - entry.armed_at)

    def _observe(self, sample: float) -> None:
        if self._srtt is None:
            self._srtt, self._rttvar = sample, sample / 2.0
        else:
            self._rttvar = (1.0 - RTT_BETA) * self._rttvar + RTT_BETA * abs(self._srtt - sample)
            self._srtt = (1.0 - RTT_ALPHA) * self._srtt + RTT_ALPHA * sample

    def cancel_where(self, predicate: Callable[[object], bool]) -> None:
        """Cancel every key for which ``predicate(key)`` is true (not acknowledgements)."""
        for key in [k for k in self._pending if predicate(k)]:
            self.cancel(key, acknowledged=False)

    def clear(self) -> None:
        self._pending.clear()
        self._timers.clear()

    def pending(self, key: object) -> bool:
        return key in self._pending

    def due(self, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        self._turn += 1
        for key in fair_order(self._timers.pop_due(now), self._turn):
            entry = self._pending[key]
            held = min(self._news.at + entry.interval, entry.sent_at + self._cap)
            if held > now:
                self._timers.set(key, held)  # news since it left: not yet
                continue
            entry.sent_at = now
            out.extend(entry.messages)
            self.resent[_kind_of(key)] += len(entry.messages)
            entry.interval = min(entry.interval * 2.0, self._cap)
            self._timers.set(key, now + entry.interval)
        return out

    def expedite(self, now: float) -> None:
        """Make every pending message due at ``now``, its back-off restarted: the transport is back
        after an outage, and whatever was sent into it may be lost (a restarted broker forgets)."""
        interval = self.timeout
        self._news.at = float("-inf")  # news from before the outage holds nothing back
        for key, entry in self._pending.items():
            entry.interval = interval
            # Not a round-trip sample when acknowledged later: the outage is not the network's delay.
            entry.armed_at = float("inf")
            self._timers.set(key, now)

    def next_due(self) -> float | None:
        return self._timers.next_time()


def _kind_of(key: object) -> str:
    """A re-send key's kind: the key itself (``"register"``) or its first element (``("assign", k)``)."""
    return str(key[0] if isinstance(key, tuple) and key else key)
