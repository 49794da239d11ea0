"""The one round tracker: node events in, subject states, collector phases, progress and wall times out.

Every driver (the in-memory bus, the MQTT host, the worker pool) hands the events its nodes emit
to `RoundTracker.on_event`; the tracker is the only code that interprets them. It counts subjects
per state (from their `SubjectStateChanged` events), follows the collector's phase (from its
`PhaseChanged` events) with the wall time spent in each, counts events by kind, optionally keeps
them for the trace, and tells the progress display which fraction of the subjects is past the
current phase. Listeners registered with `on_subject_state` see every subject transition (the
in-memory driver uses one to make chosen subjects vanish when they enter a state).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

from coutil.protocol.events import Event, PhaseChanged, SubjectStateChanged
from coutil.protocol.states import CollectorState, SubjectState

#: The collector phases a round goes through, in order (what progress displays show).
PHASES: tuple[CollectorState, ...] = (CollectorState.REGISTRATION, CollectorState.SHARING, CollectorState.AUDITING)

#: Subject states that count as past each collector phase.
PAST_PHASE: dict[CollectorState, frozenset[SubjectState]] = {
    CollectorState.REGISTRATION: frozenset({
        SubjectState.REGISTERED, SubjectState.SHARING, SubjectState.AWAIT_RELEASE, SubjectState.VERDICT_SENT,
        SubjectState.DONE, SubjectState.EXCLUDED, SubjectState.SAMPLED_OUT}),
    CollectorState.SHARING: frozenset({
        SubjectState.AWAIT_RELEASE, SubjectState.VERDICT_SENT, SubjectState.DONE, SubjectState.EXCLUDED,
        SubjectState.SAMPLED_OUT}),
    CollectorState.AUDITING: frozenset({SubjectState.DONE, SubjectState.EXCLUDED, SubjectState.SAMPLED_OUT}),
}

#: Called with (phase, fraction of the subjects past it).
ProgressCallback = Callable[[CollectorState, float], None]
#: Called with (node id, the new state, the event) on every subject transition.
StateListener = Callable[[str, SubjectState, SubjectStateChanged], None]


class RoundTracker:
    """Subject states and collector phases of one round, fed with ``(node id, event)`` pairs."""

    def __init__(self, subjects: int, collector_id: str, *, keep_events: bool = False,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.subjects = subjects
        self.collector_id = collector_id
        self.keep_events = keep_events
        self._clock = clock
        #: Subjects per state (every subject starts waiting for the announce).
        self.states: Counter[SubjectState] = Counter({SubjectState.AWAIT_ANNOUNCE: subjects})
        self._state_of: dict[str, SubjectState] = {}
        self.phase: CollectorState = CollectorState.CREATED
        self._phase_since = clock()
        #: Wall seconds spent in each collector phase (closed by `close`).
        self.wall: dict[str, float] = {}
        #: Events by kind, collector and subjects together.
        self.kinds: Counter[str] = Counter()
        #: The events themselves, in arrival order, when ``keep_events``.
        self.events: list[tuple[str, Event]] = []
        self._listeners: list[StateListener] = []

    def on_subject_state(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def on_event(self, node_id: str, event: Event) -> None:
        self.kinds[event.kind] += 1
        if self.keep_events:
            self.events.append((node_id, event))
        if isinstance(event, PhaseChanged):
            if node_id == self.collector_id:
                self._enter_phase(event.phase)
        elif isinstance(event, SubjectStateChanged):
            previous = self._state_of.get(node_id, SubjectState.AWAIT_ANNOUNCE)
            self.states[previous] -= 1
            self.states[event.state] += 1
            self._state_of[node_id] = event.state
            for listener in self._listeners:
                listener(node_id, event.state, event)

    def _enter_phase(self, phase: CollectorState) -> None:
        now = self._clock()
        self.wall[self.phase] = self.wall.get(self.phase, 0.0) + now - self._phase_since
        self.phase, self._phase_since = phase, now

    def fraction_past(self) -> float:
        """The fraction of the subjects past the collector's current phase."""
        past = PAST_PHASE.get(self.phase, frozenset())
        return sum(self.states[s] for s in past) / max(self.subjects, 1)

    def report_progress(self, progress: ProgressCallback | None) -> None:
        if progress is not None:
            progress(self.phase, self.fraction_past())

    def subject_states(self) -> dict[str, int]:
        """Subjects per state (states nobody is in left out), JSON-ready."""
        return {str(state): count for state, count in sorted(self.states.items()) if count}

    def close(self) -> dict[str, float]:
        """Close the current phase's wall time; returns the wall seconds per phase."""
        self._enter_phase(self.phase)
        self.wall.pop(CollectorState.CREATED, None)
        return {str(phase): seconds for phase, seconds in self.wall.items()}
