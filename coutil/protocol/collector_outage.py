"""When the collector takes the subjects' silence for a transport outage (protocol/SPEC.md §4,
"Outages"), sans-IO and without events: the collector asks, then acts (`CollectorNode.on_transport`
and `_end_outage` move the deadlines, `CollectorCore._outage_suspected` holds a group's).

Two sources say the transport is down: the driver's word on the collector's own connection
(`OutageWatch.transport`), and silence. Live members of a stalled run always re-send something (at
least every quarter step), so a group from which nothing at all arrived for half a step is *mute*:
all its members vanished, or the transport does not carry. When at least half of the active groups
are mute at once (a broker outage: all of them), it is the transport, for up to ``limit`` seconds;
past that, the silent are excluded as if the transport were up.
"""

from __future__ import annotations

from collections.abc import Callable


class OutageWatch:
    """The collector's knowledge of outages: the transport's state, when any subject was last heard,
    and when the outage under way (signalled or suspected) began."""

    __slots__ = ("heard_at", "limit", "since", "transport_up")

    def __init__(self, limit: float) -> None:
        #: Seconds of silence taken for an outage at most.
        self.limit = limit
        #: The driver's latest word on the collector's own connection to the broker.
        self.transport_up = True
        #: When the last message of this round from any subject arrived (duplicates included).
        self.heard_at: float | None = None
        #: When the outage under way began; None: none under way.
        self.since: float | None = None

    def transport(self, up: bool, now: float) -> bool:
        """The driver's word; True when it changed. Going down starts an outage if none is under way."""
        if up == self.transport_up:
            return False
        self.transport_up = up
        if not up and self.since is None:
            self.since = now
        return True

    def hear(self, now: float) -> bool:
        """A message of the round from a subject arrived; True when that ends an outage under way."""
        self.heard_at = now
        return self.since is not None and self.transport_up

    def end(self, now: float) -> float | None:
        """The outage under way is over: how long it lasted (None: there was none)."""
        since, self.since = self.since, None
        return None if since is None else now - since

    def group_is_cut_off(self, heard_at: float, now: float, half_step: float, mute_groups: Callable[[], int],
                         active_groups: int) -> bool:
        """At the deadline of a group last heard at ``heard_at``: is its silence an outage rather than
        silent members? ``mute_groups()`` counts the active groups silent for ``half_step`` (half the
        round's step timeout, as the collector's config says at the time of asking)."""
        quiet = now - heard_at
        # The limit counts from the start of the outage under way, if any: a run started during it
        # (after exclusions) does not restart the clock.
        since = heard_at if self.since is None else min(heard_at, self.since)
        if quiet < half_step or now - since >= self.limit:
            return False
        if 2 * mute_groups() < active_groups:
            return False
        if self.since is None and (self.heard_at is None or now - self.heard_at >= half_step):
            # Nothing from anyone: the first message to arrive ends it for every group (`hear`).
            self.since = self.heard_at if self.heard_at is not None else heard_at
        return True

    def audit_quiet(self, now: float, audit_started: float, half_step: float) -> float | None:
        """At the audit deadline with verdicts missing: seconds without any subject, when that is an
        outage (None: it is not, the audit ends). The first such answer starts the outage."""
        heard = self.heard_at if self.heard_at is not None else audit_started
        quiet = now - heard
        if quiet < half_step or quiet >= self.limit:
            return None
        if self.since is None:
            self.since = heard
        return quiet
