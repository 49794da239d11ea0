"""What the nodes report to their drivers: typed, frozen event dataclasses (the JSONL trace).

Every event has the time it happened (``at``, the node's ``now``) and a stable ``KIND`` code; its
other fields are plain public values. `Event.as_dict` is one line of the trace:
``{"at": ..., "event": KIND, **fields}`` with bytes in hex and states as their names. No event ever
carries a confidential attribute value (nor a secret): subject keys, digests, group numbers, counts
and reason codes only.

Each node emits a closed set of events: `SubjectEvent` and `CollectorEvent`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from coutil.protocol.states import CollectorState, SubjectState


def _plain(value: object) -> object:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, enum.Enum):
        return value.value
    return value


@dataclass(frozen=True)
class Event:
    """Base of every event: when it happened; subclasses set ``KIND`` and add their fields."""

    KIND: ClassVar[str] = "event"
    at: float

    @property
    def kind(self) -> str:
        return self.KIND

    def as_dict(self) -> dict[str, object]:
        """One JSON-ready trace line: ``{"at", "event", **fields}``, bytes as hex, enums as values."""
        out: dict[str, object] = {"at": self.at, "event": self.KIND}
        for f in dataclasses.fields(self):
            if f.name != "at":
                out[f.name] = _plain(getattr(self, f.name))
        return out


# ---------------------------------------------------------------------- subject events
@dataclass(frozen=True)
class SubjectStateChanged(Event):
    KIND: ClassVar[str] = "state"
    sid: str
    state: SubjectState


@dataclass(frozen=True)
class SubjectSampledOut(Event):
    """A SafePub round: her own draw (probability beta) said she does not take part; she sends nothing."""

    KIND: ClassVar[str] = "sampled_out"
    sid: str


@dataclass(frozen=True)
class SubjectIncompatible(Event):
    """The announced round does not fit her record or asks for an audit she will not run."""

    KIND: ClassVar[str] = "incompatible"
    reason: str


@dataclass(frozen=True)
class RosterMissing(Event):
    """Her assign arrived before the roster: she fetches the roster."""

    KIND: ClassVar[str] = "roster_missing"
    sid: str


@dataclass(frozen=True)
class SubjectRegrouped(Event):
    """A new assign moved her to another group (a merge)."""

    KIND: ClassVar[str] = "regrouped"
    sid: str
    group: int


@dataclass(frozen=True)
class SubjectGrouped(Event):
    KIND: ClassVar[str] = "grouped"
    sid: str
    group: int
    size: int


@dataclass(frozen=True)
class SubjectExcluded(Event):
    KIND: ClassVar[str] = "excluded"
    sid: str
    reason: str


@dataclass(frozen=True)
class SubjectRunStarted(Event):
    KIND: ClassVar[str] = "run_started"
    sid: str
    group: int
    run: int


@dataclass(frozen=True)
class NoGoVoted(Event):
    """Her ciphertext was missing or duplicated in the final batch."""

    KIND: ClassVar[str] = "no_go"
    sid: str
    group: int
    run: int


@dataclass(frozen=True)
class UnpeelableItem(Event):
    """An item she was to mix did not peel: she votes no-go and blames."""

    KIND: ClassVar[str] = "unpeelable"
    sid: str
    group: int
    run: int
    step: int


@dataclass(frozen=True)
class BlameSent(Event):
    KIND: ClassVar[str] = "blame_sent"
    sid: str
    group: int
    run: int


@dataclass(frozen=True)
class VerdictRecorded(Event):
    """Her verdict (only what it discloses: d and the plausibility stay in `SubjectNode.audit`)."""

    KIND: ClassVar[str] = "verdict"
    sid: str
    accept: bool
    reason: str


@dataclass(frozen=True)
class RunRefused(Event):
    """She refused a run (or a regrouping) the protocol forbids her to join (SPEC §4 share.1, 7);
    her verdict reports ``reason``."""

    KIND: ClassVar[str] = "run_refused"
    sid: str
    group: int
    run: int
    reason: str


@dataclass(frozen=True)
class SplitViewSeen(Event):
    """A member's run_keys or vote stated another roster root or run membership than hers."""

    KIND: ClassVar[str] = "split_view"
    sid: str
    group: int
    run: int
    member: str


SubjectEvent: TypeAlias = (
    SubjectStateChanged
    | SubjectSampledOut
    | SubjectIncompatible
    | RosterMissing
    | SubjectRegrouped
    | SubjectGrouped
    | SubjectExcluded
    | SubjectRunStarted
    | NoGoVoted
    | UnpeelableItem
    | BlameSent
    | VerdictRecorded
    | RunRefused
    | SplitViewSeen
)


# ---------------------------------------------------------------------- collector events
@dataclass(frozen=True)
class PhaseChanged(Event):
    KIND: ClassVar[str] = "phase"
    phase: CollectorState


@dataclass(frozen=True)
class RegistrationAccepted(Event):
    """A NEW registration was accepted (a re-sent copy is not reported). Key and digest are public."""

    KIND: ClassVar[str] = "registration_accepted"
    sid: str
    subject: bytes
    digest: bytes


@dataclass(frozen=True)
class RoundAborted(Event):
    KIND: ClassVar[str] = "aborted"
    reason: str
    registered: int


@dataclass(frozen=True)
class GroupsFormed(Event):
    """Registration closed: the roster is fixed and every registered subject assigned a group."""

    KIND: ClassVar[str] = "grouped"
    registered: int
    groups: int


@dataclass(frozen=True)
class RunStarted(Event):
    KIND: ClassVar[str] = "run_started"
    group: int
    run: int
    size: int


@dataclass(frozen=True)
class RevealOpened(Event):
    """The reveal barrier fell: every active group voted go."""

    KIND: ClassVar[str] = "reveal_open"
    groups: int


@dataclass(frozen=True)
class GroupOpened(Event):
    KIND: ClassVar[str] = "group_opened"
    group: int
    run: int
    records: int
    undecryptable: int


@dataclass(frozen=True)
class BlameResolved(Event):
    KIND: ClassVar[str] = "blame"
    group: int
    run: int
    culprits: int
    detail: str


@dataclass(frozen=True)
class RunRelayed(Event):
    KIND: ClassVar[str] = "relayed"
    group: int
    run: int
    messages: int


@dataclass(frozen=True)
class MemberExcluded(Event):
    KIND: ClassVar[str] = "excluded"
    group: int
    reason: str
    sid: str


@dataclass(frozen=True)
class GroupDissolved(Event):
    """A group fell below k with no sealed group to merge with: its members are excluded."""

    KIND: ClassVar[str] = "dissolved"
    group: int
    members: int


@dataclass(frozen=True)
class GroupSuppressed(Event):
    """A group is left out of the release: it lost members after its reveal_open, or fewer than k
    of its records opened. Never released below k, never re-run."""

    KIND: ClassVar[str] = "suppressed"
    group: int
    records: int
    reason: str


@dataclass(frozen=True)
class GroupMerged(Event):
    """A group fell below k: its ``moved`` members joined group ``into`` (and got a new assign)."""

    KIND: ClassVar[str] = "merged"
    group: int
    into: int
    moved: int


@dataclass(frozen=True)
class ReleasePublished(Event):
    KIND: ClassVar[str] = "released"
    rows: int
    groups: int


@dataclass(frozen=True)
class VerdictAccepted(Event):
    """A NEW verdict was recorded (a re-sent copy is not reported). Key and digest are public."""

    KIND: ClassVar[str] = "verdict_accepted"
    sid: str
    subject: bytes
    digest: bytes
    accept: bool
    reason: str


@dataclass(frozen=True)
class TransportChanged(Event):
    """The driver reported the collector's own connection to the broker down or back up."""

    KIND: ClassVar[str] = "transport"
    up: bool


@dataclass(frozen=True)
class OutageSuspected(Event):
    """A deadline passed while the subjects awaited were silent, and so were most others: taken for a
    transport outage, the deadline was extended instead of excluding anyone (protocol/SPEC.md, section 4).
    Reported once per group and outage."""

    KIND: ClassVar[str] = "outage_suspected"
    #: The phase whose deadline was extended ("sharing": group steps; "auditing": the audit window).
    phase: str
    #: The group whose step deadline was extended (-1: the audit window).
    group: int
    #: Seconds since the last message from any of the awaited subjects.
    silent_for: float


@dataclass(frozen=True)
class OutageEnded(Event):
    """Subjects are heard again after an outage (signalled or suspected): every waiting deadline was
    moved to at least one step timeout from now."""

    KIND: ClassVar[str] = "outage_ended"
    lasted: float


@dataclass(frozen=True)
class RoundDone(Event):
    KIND: ClassVar[str] = "round_done"
    verdicts: int
    accepted: int


CollectorEvent: TypeAlias = (
    PhaseChanged
    | RegistrationAccepted
    | RoundAborted
    | GroupsFormed
    | RunStarted
    | RevealOpened
    | GroupOpened
    | BlameResolved
    | RunRelayed
    | MemberExcluded
    | GroupDissolved
    | GroupSuppressed
    | GroupMerged
    | ReleasePublished
    | VerdictAccepted
    | TransportChanged
    | OutageSuspected
    | OutageEnded
    | RoundDone
)
