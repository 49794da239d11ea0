"""The collector's state machine (sans-IO).

The collector announces the round, accepts registrations, fixes the roster (a Merkle tree over
the registrations sorted by subject key) and the groups (MDAV on the QIs, exactly as centralized
MDAV would form them), coordinates every group's shuffle (deadlines, exclusions, merges, blame),
opens the confidential records once every member of a group has voted go, and publishes and
signs the release. It learns the QIs (as in centralized k-anonymity) but, unless all other members
of a group collude with it, not which confidential record belongs to whom.

Top-level states and the messages each accepts are in `TRANSITIONS`; group runs are in `GroupState`.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field

import numpy as np

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, merkle, topics
from coutil.protocol.collector_groups import GroupMessage, GroupState, Record, merge_target
from coutil.protocol.config import RoundConfig
from coutil.protocol.dispatch import Handler, on, table
from coutil.protocol.events import (
    BlameResolved,
    CollectorEvent,
    GroupDissolved,
    GroupMerged,
    GroupOpened,
    GroupsFormed,
    GroupSuppressed,
    MemberExcluded,
    OutageEnded,
    OutageSuspected,
    PhaseChanged,
    RegistrationAccepted,
    ReleasePublished,
    RevealOpened,
    RoundAborted,
    RoundDone,
    RunRelayed,
    RunStarted,
    TransportChanged,
    VerdictAccepted,
)
from coutil.protocol.messages import (
    Announce,
    Assign,
    Batch,
    Blame,
    Fetch,
    Message,
    Register,
    RegisterAck,
    Release,
    Reveal,
    Roster,
    RoundParams,
    RunKeys,
    Submit,
    Verdict,
    VerdictAck,
    Vote,
)
from coutil.protocol.node import SERIAL_POOL, Outgoing, Pending, RandomSource, Rejection, WorkPool
from coutil.protocol.retry import Resender
from coutil.protocol.schedule import TimerHeap, fair_order
from coutil.protocol.states import CollectorState
from coutil.sdc.generalization import classes_of
from coutil.sdc.mdav import mdav

__all__ = ["OUTAGE_LIMIT", "STATE_EDGES", "TRANSITIONS", "CollectorNode", "CollectorState", "RoundOutcome"]

#: Seconds of silence the collector takes for a transport outage at most (protocol/SPEC.md, section 4,
#: "Outages"): past this, the silent are excluded as if the transport were up. Not a round parameter
#: (the announce and the vectors stay as they are); `CollectorNode(outage_limit=...)` overrides it.
OUTAGE_LIMIT = 600.0
#: Messages per task when the collector signs many at once (`CollectorNode._sign_many`): enough tasks
#: to keep every process of a pool busy, few enough that handing them over costs little.
SIGN_CHUNK = 2000

#: Where each state may lead (for the spec's diagram; checked by the tests against the code paths).
STATE_EDGES: dict[CollectorState, tuple[CollectorState, ...]] = {
    CollectorState.CREATED: (CollectorState.REGISTRATION,),
    CollectorState.REGISTRATION: (CollectorState.SHARING, CollectorState.ABORTED),
    CollectorState.SHARING: (CollectorState.AUDITING, CollectorState.ABORTED),
    CollectorState.AUDITING: (CollectorState.DONE,),
    CollectorState.DONE: (),
    CollectorState.ABORTED: (),
}

@dataclass
class Registration:
    key: bytes
    qi: tuple[float, ...]
    digest: bytes
    ack: Outgoing


@dataclass
class RoundOutcome:
    """What a round produced (the collector's view)."""

    completed: bool
    phase: str
    columns: tuple[str, ...]
    rows: np.ndarray
    group_sizes: tuple[int, ...]
    verdicts: list[dict[str, object]]
    excluded: list[dict[str, object]]
    manifest: dict[str, str]
    phase_times: dict[str, float]
    registered: int
    round_id: str = ""
    rejections: dict[str, int] = field(default_factory=dict)
    #: The label of each released group, in release order (beside ``group_sizes``).
    group_ids: tuple[int, ...] = ()


class CollectorNode:
    """The collector of one round. Implements `coutil.protocol.node.Node`."""

    def __init__(
        self,
        config: RoundConfig,
        *,
        identity: crypto.SigningKey,
        rng: RandomSource,
        round_id: bytes,
        limits: codec.Limits | None = None,
        decode_cache: codec.DecodeCache | None = None,
        outage_limit: float = OUTAGE_LIMIT,
        pool: WorkPool = SERIAL_POOL,
    ) -> None:
        if len(round_id) != 16:
            raise ValueError("round_id must be 16 bytes")
        self.config = config
        self._identity = identity
        self.public_key = identity.public
        self.client_id = "collector-" + round_id.hex()[:8]
        self._rng = rng
        self.round_id = round_id
        self._limits = limits if limits is not None else codec.Limits(max_message_bytes=config.max_message_bytes)
        #: Shared with the subjects hosted in the same process, if any (see `codec.DecodeCache`).
        self._decode_cache = decode_cache if decode_cache is not None else codec.DecodeCache(capacity=1024)
        self._kx = crypto.KxKey.generate(rng)
        #: Where the groups' records are opened (see `WorkPool`); needed at the release.
        self._pool = pool
        self._opening: dict[int, Pending[list[Record | None]]] = {}
        self.state = CollectorState.CREATED
        self.rejections: list[Rejection] = []
        self._events: list[CollectorEvent] = []
        self._resend = Resender(config.retry_interval, config.step_timeout / 4)
        self._registrations: dict[bytes, Registration] = {}
        self._order: list[bytes] = []  # roster order (sorted keys)
        self._tree: merkle.MerkleTree | None = None
        self._qi_matrix: np.ndarray | None = None
        self._groups: dict[int, GroupState] = {}
        self._group_of: dict[bytes, int] = {}
        self._assign_msgs: dict[bytes, Outgoing] = {}
        self._excluded: dict[bytes, str] = {}
        self._records: dict[int, list[tuple[float, ...]]] = {}
        self._roster_out: Outgoing | None = None
        self._release_out: Outgoing | None = None
        self._release_matrix: np.ndarray | None = None
        self._release_sizes: tuple[int, ...] = ()
        self._release_ids: tuple[int, ...] = ()
        self._release_digest = b""
        self._verdicts: dict[bytes, Verdict] = {}
        self._deadline: float | None = None
        self._reveal_opened = False
        #: Each opened group's signed group_done (re-sent when a member re-sends her reveal).
        self._done_out: dict[int, Outgoing] = {}
        # Indexes that keep every step O(log n) in the number of groups (a round has thousands):
        self._active: set[int] = set()  # groups whose records are still sealed
        self._unready: set[int] = set()  # active groups not yet all-go on their final batch
        self._group_timers: TimerHeap[int] = TimerHeap()  # next deadline or relay per active group
        self._relay_turn = 0  # bursts of due groups so far: each relayed in a rotated order (`fair_order`)
        self._awaiting_verdicts: set[bytes] = set()
        self._phase_started: dict[str, float] = {}
        self._phase_times: dict[str, float] = {}
        self._announce_out: Outgoing | None = None
        self._now = 0.0
        # Outages (see `on_transport` and `_outage_suspected`):
        self._outage_limit = outage_limit
        #: The driver's latest word on this node's own connection to the broker.
        self._transport_up = True
        #: When the last message of this round from any subject arrived (duplicates included).
        self._heard_at: float | None = None
        #: When the outage under way (signalled or suspected) began; None: none under way.
        self._outage_since: float | None = None
        #: When the announce left and the latest registration arrived (`_close_registration`).
        self._registration_started = 0.0
        self._last_registration_at = 0.0

    # ------------------------------------------------------------------ Node interface
    @property
    def finished(self) -> bool:
        return self.state in (CollectorState.DONE, CollectorState.ABORTED)

    def subscriptions(self) -> frozenset[str]:
        if self.state in (CollectorState.CREATED, CollectorState.ABORTED):
            return frozenset()
        return frozenset({topics.all_subject_up(self.round_id), topics.all_subject_group(self.round_id),
                          topics.all_subject_to(self.round_id)})

    @property
    def limits(self) -> codec.Limits:
        """The decoding limits this node applies to what it receives."""
        return self._limits

    @property
    def decode_cache(self) -> codec.DecodeCache:
        """Where this node looks up envelopes already verified: a driver whose helper processes verify
        bursts ahead of the node records them here (`coutil.round.parallel.signature_prechecker`)."""
        return self._decode_cache

    @property
    def resends(self) -> dict[str, int]:
        """Messages this node re-sent so far, by kind (``assign``, ``keys``, ``submit``, ...)."""
        return dict(self._resend.resent)

    def drain_events(self) -> list[CollectorEvent]:
        events, self._events = self._events, []
        return events

    def next_timer(self) -> float | None:
        if not self._transport_up:
            # Deadlines wait for the transport; only re-sends (queued by the driver) go on.
            return self._resend.next_due()
        times = [t for t in (self._resend.next_due(), self._deadline, self._group_timers.next_time()) if t is not None]
        return min(times) if times else None

    def start(self, now: float, *, started_at: float | None = None) -> list[Outgoing]:
        """Announce the round. ``started_at`` (a restarted service resuming its round) keeps the
        original deadlines, so that the re-signed announce is byte-identical to the first one."""
        self._now = self._resend.now = now
        c = self.config
        params = RoundParams(
            qi_names=c.qi,
            confidential_names=c.confidential,
            k=c.k,
            method=c.grouping,
            register_deadline=(now if started_at is None else started_at) + c.register_window,
            step_timeout=c.step_timeout,
            audit_deadline_after_release=c.audit_window,
            collector_kx=self._kx.public,
            min_permutation_distance=c.min_permutation_distance,
            random_records=c.random_records,
            alpha=c.alpha,
            manifest=c.manifest(),
        )
        self._params = params
        announce = Announce(self.round_id, self.public_key, params)
        self._announce_out = Outgoing(topics.ANNOUNCE, codec.encode(announce, self._identity), retain=True)
        self._deadline = params.register_deadline
        # Re-published during registration: a retained message's delivery can be lost like any other,
        # and only subjects still waiting for a round subscribe to the announce topic.
        self._resend.arm("announce", self._announce_out, now)
        self._registration_started = self._last_registration_at = now
        self._enter(CollectorState.REGISTRATION)
        return [self._announce_out]

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        out: list[Outgoing] = []
        kind = ""
        try:
            decoded = self._decode_cache.decode(payload, self._limits)
            message = decoded.message
            kind = message.TAG
            if self._of_another_round(message):
                raise RemoteProtocolError("wrong_round", "message of another round", ignore=True)
            if self.state == CollectorState.CREATED:
                raise RemoteProtocolError("early", "round not started", ignore=True)
            # Any signed message of the round, even a duplicate, shows that the transport carries.
            out = self._hear(now)
            handler = TRANSITIONS[self.state].get(type(message))
            if handler is None:
                raise RemoteProtocolError("unexpected", f"{message.TAG} in state {self.state}", ignore=True)
            expected = (
                topics.subject_up(self.round_id, message.sender)
                if message.TAG in ("register", "verdict", "fetch", "reveal")
                else topics.subject_group(self.round_id, message.sender)
            )
            # A submission or a batch before the last goes to one member (SPEC §5 topics): on the
            # sender's own topic towards her.
            direct = message.TAG in ("submit", "batch") and topic.startswith(expected[:-len("group")] + "to/")
            if topic != expected and not direct:
                raise RemoteProtocolError("topic_mismatch", f"{message.TAG} not on its sender's topic")
            out.extend(handler(self, message, decoded, now))
        except RemoteProtocolError as exc:
            self.rejections.append(Rejection(now, topic, exc.reason, exc.detail, exc.ignore, kind=kind))
        return out

    def on_timer(self, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        out = self._resend.due(now)
        if not self._transport_up:
            return out  # no deadline passes while the transport is down
        if self._deadline is not None and now >= self._deadline:
            if self.state == CollectorState.REGISTRATION:
                self._deadline = None
                out.extend(self._close_registration(now))
            elif self.state == CollectorState.AUDITING:
                if self._audit_outage(now):
                    self._deadline = now + self.config.step_timeout / 2
                else:
                    out.extend(self._finish(now))
            else:
                self._deadline = None
        if self.state == CollectorState.SHARING:
            touched: list[GroupState] = []
            self._relay_turn += 1
            for label in fair_order(self._group_timers.pop_due(now), self._relay_turn):
                group = self._groups[label]
                if not group.active:
                    continue
                if now >= group.deadline:
                    out.extend(self._group_timeout(group, now))
                elif now >= self._relay_due(group):
                    out.extend(self._relay(group, now))
                self._track(group)
                touched.append(group)
            out.extend(self._progress(touched, now))
        return out

    # ------------------------------------------------------------------ helpers
    def _event(self, event: CollectorEvent) -> None:
        self._events.append(event)

    def _enter(self, state: CollectorState) -> None:
        previous = self.state
        if previous in self._phase_started:
            self._phase_times[previous] = self._now - self._phase_started[previous]
        self.state = state
        self._phase_started[state] = self._now
        self._event(PhaseChanged(self._now, state))

    def _of_another_round(self, message: Message) -> bool:
        """SPEC §7.2 step 7: the message names another round (a replay of an earlier one, or garbage)."""
        return message.round_id != self.round_id

    def _sign(self, message: Message) -> bytes:
        data: bytes = codec.encode(message, self._identity)
        return data

    def _sign_many(self, messages: list[Message]) -> list[bytes]:
        """`_sign` of every message, in order, shared out over the `WorkPool` in chunks."""
        sign = functools.partial(codec.encode, signing_key=self._identity)
        chunks = [self._pool.submit(sign, messages[i:i + SIGN_CHUNK]) for i in range(0, len(messages), SIGN_CHUNK)]
        return [data for chunk in chunks for data in chunk.result()]

    # ------------------------------------------------------------------ registration
    def _on_register(self, message: Register, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        digest = decoded.digest
        if len(message.qi) != len(self.config.qi):
            raise RemoteProtocolError("bad_field", f"{len(message.qi)} QI values, expected {len(self.config.qi)}")
        if not all(math.isfinite(v) for v in message.qi):
            raise RemoteProtocolError("bad_field", "non-finite QI value")
        known = self._registrations.get(message.sender)
        if known is not None:
            if known.digest != digest:
                raise RemoteProtocolError("conflicting_registration", "a second, different registration")
            return [known.ack]  # the ack was lost: send it again
        ack = RegisterAck(self.round_id, self.public_key, message.sender, digest)
        out = Outgoing(topics.inbox(self.round_id, message.sender), self._sign(ack))
        self._registrations[message.sender] = Registration(message.sender, message.qi, digest, out)
        self._last_registration_at = now
        self._event(RegistrationAccepted(now, topics.sid_of(message.sender), message.sender, digest))
        expected = self.config.expected_subjects
        if expected and len(self._registrations) >= expected:
            # Everyone expected is here: no need to wait for the rest of the window.
            self._deadline = None
            return [out, *self._close_registration(now)]
        return [out]

    def _on_late_register(self, message: Register, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        digest = decoded.digest
        known = self._registrations.get(message.sender)
        if known is not None and known.digest == digest:
            return [known.ack]
        raise RemoteProtocolError("late", "registration after the deadline", ignore=True)

    def _close_registration(self, now: float) -> list[Outgoing]:
        self._resend.cancel("announce", acknowledged=False)
        n = len(self._registrations)
        if n < self.config.k:
            self._event(RoundAborted(now, "too_few_subjects", n))
            self._enter(CollectorState.ABORTED)
            return [self._withdraw_announce()]
        self._order = sorted(self._registrations)
        leaves = [merkle.roster_leaf(key, self._registrations[key].qi) for key in self._order]
        self._tree = merkle.MerkleTree(leaves)
        self._qi_matrix = np.array([self._registrations[key].qi for key in self._order], dtype=np.float64)
        labels, self._centroids, n_groups = self._form_groups(self._qi_matrix)
        out: list[Outgoing] = []
        roster = Roster(self.round_id, self.public_key, n, self._tree.root, n_groups)
        self._roster_out = Outgoing(topics.roster(self.round_id), self._sign(roster), retain=True)
        out.append(self._roster_out)
        members_of: dict[int, list[int]] = {}
        for index, label in enumerate(labels.tolist()):
            members_of.setdefault(int(label), []).append(index)
        for label, indices in members_of.items():
            keys = tuple(sorted(self._order[i] for i in indices))
            state = GroupState(label, keys, tuple(indices), now + self.config.step_timeout)
            self._groups[label] = state
            for key in keys:
                self._group_of[key] = label
        # Every assign signed at once, in the pool when there is one: at 10^5 subjects signing them
        # one by one took the collector's thread seconds while every subject waited for hers.
        indices = [i for g in self._groups.values() if len(g.members) >= self.config.k for i in g.indices]
        signed = dict(zip(indices, self._sign_many([self._assign_message(self._order[i], i) for i in indices]),
                          strict=True))
        # Group after group: its members' assigns, then its shuffle_start. A group starts its run while
        # the later groups' messages are still being sent (at 10^5 subjects sending them all takes
        # seconds, and every run waited for the last assign when the shuffle_starts came after them).
        for group in list(self._groups.values()):
            if len(group.members) < self.config.k:
                # SafePub: a class below k is suppressed, never merged. Its members get no assign (they
                # refuse a group below k) but the closing notice, in their inbox, re-sent until the release.
                members = group.members
                closing = self._exclude(group, tuple((m, "suppressed_class") for m in members), now)
                out.extend(closing)
                for member in members:
                    for message in closing:
                        notice = Outgoing(topics.inbox(self.round_id, member), message.payload)
                        # Re-sent until the release (a member who met it before her assign ignored it).
                        self._resend.arm(("suppressed", member), notice, now)
                        out.append(notice)
            else:
                for key_index in group.indices:
                    out.extend(self._send_assign(self._order[key_index], key_index, now, signed[key_index]))
                out.extend(self._start_run(group, (), now))
        self._event(GroupsFormed(now, n, len(self._groups)))
        self._enter(CollectorState.SHARING)
        # Every assign and shuffle_start leaves at once: no acknowledgement can come back before the
        # subjects have worked through that queue, so their first re-send waits that much longer.
        # The registration was the swarm's answer to one message each (the announce): the burst of
        # len(out) / n messages each is taken to need as long per message.
        self._resend.postpone((self._last_registration_at - self._registration_started) * len(out) / n)
        return out

    def _assign_message(self, key: bytes, key_index: int) -> Assign:
        assert self._tree is not None
        label = self._group_of[key]
        group = self._groups[label]
        centroid = tuple(float(v) for v in self._centroid_of(group))
        return Assign(self.round_id, self.public_key, key, key_index, self._tree.proof(key_index),
                      self._tree.root, label, group.members, centroid)

    def _send_assign(self, key: bytes, key_index: int, now: float, signed: bytes | None = None) -> list[Outgoing]:
        """Her assign (``signed``: its envelope, already signed by `_sign_many`), re-sent until acknowledged."""
        if signed is None:
            signed = self._sign(self._assign_message(key, key_index))
        out = Outgoing(topics.inbox(self.round_id, key), signed)
        self._assign_msgs[key] = out
        self._resend.arm(("assign", key), out, now)
        return [out]

    def _form_groups(self, qi: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """(group label of every roster entry, released QI values of every group, number of groups).

        MDAV: its groups and centroids, exactly as centralized MDAV. SafePub: the classes of the
        announced bins, released with the bins' midpoints (data-independent, as the theorem requires)."""
        if self.config.grouping == "safepub":
            classes = classes_of(qi, self.config.safepub_bins)
            return classes.labels, classes.midpoints, classes.n_classes
        grouping = mdav(qi, self.config.k)
        return grouping.groups, np.asarray(grouping.centroids, dtype=np.float64), grouping.n_groups

    def _centroid_of(self, group: GroupState) -> np.ndarray:
        assert self._qi_matrix is not None
        if group.original or self.config.grouping == "safepub":
            # Untouched MDAV group: use MDAV's own centroid so the release equals centralized MDAV exactly.
            return np.asarray(self._centroids[group.label], dtype=np.float64)
        return np.asarray(self._qi_matrix[list(group.indices)].mean(axis=0), dtype=np.float64)

    # ------------------------------------------------------------------ shuffle coordination
    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        message = group.new_run(self.round_id, self.public_key, excluded, now + self.config.step_timeout)
        payload = self._sign(message)
        # To each member's inbox: a member subscribes to the group's topic only when her assign
        # arrives, which can be after this. On the group's topic too when someone was excluded: the
        # excluded learn it there (they no longer get it in their inbox).
        out: tuple[Outgoing, ...] = tuple(Outgoing(topics.inbox(self.round_id, member), payload)
                                          for member in group.members)
        if excluded:
            out = (Outgoing(topics.group_control(self.round_id, group.label), payload), *out)
        group.data.relay.append((payload, None))
        group.heard_at = max(group.heard_at, now)  # a new run is not mute before its members could answer
        self._track(group)
        self._resend.arm(("shuffle_start", group.label), out, now)
        self._event(RunStarted(now, group.label, group.run, len(group.members)))
        return list(out)

    def _on_group_message(self, message: GroupMessage, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        label = self._group_of.get(message.sender)
        group = self._groups.get(label) if label is not None else None
        if group is None:
            raise RemoteProtocolError("not_a_member", f"{message.TAG} from a subject in no group")
        if group.active and message.sender in group.members:
            if now - group.heard_at >= self.config.step_timeout / 2:
                # The group was mute (its members cut off, perhaps the rest were not): back now,
                # it gets a fresh step before anyone in it is taken for silent.
                self._grant(group, now)
            group.heard_at = now
        if isinstance(message, Reveal) and group.opened and message.run == group.run \
                and message.sender in group.members and group.label in self._done_out:
            return self._answer_late_reveal(group, message.sender)
        assert self._tree is not None
        try:
            group.observe(message, decoded.envelope, now, self.config.step_timeout, self._tree.root)
        except RemoteProtocolError as exc:
            out = self._on_deviation(group, message.sender, exc, now)
            if out is None:
                raise
            self.rejections.append(Rejection(now, "", exc.reason, exc.detail, exc.ignore, message.sender,
                                             message.TAG))
            return out
        self._resend.news(now)  # a fresh member message: the subjects are being served (see retry.py)
        if isinstance(message, RunKeys):
            self._resend.cancel(("assign", message.sender))
            if group.all_keys():
                self._resend.cancel(("shuffle_start", group.label))
        self._track(group)
        return self._progress([group], now)

    def _on_deviation(self, group: GroupState, sender: bytes, exc: RemoteProtocolError,
                      now: float) -> list[Outgoing] | None:
        """A member message that proves its sender deviated: exclude her (SPEC §4 share.6). None: the
        rejection is only recorded."""
        if sender not in group.members or not group.active or sender in self._excluded:
            return None
        if exc.reason == "view_mismatch" and not group.reveal_sent:
            # The collector told every member the same: she states a view nobody was given.
            return self._exclude(group, ((sender, "blamed_split_view"),), now)
        if exc.reason == "unjustified_blame":
            # After reveal_open no run may follow: she is recorded as excluded, the group goes on.
            self._excluded[sender] = "blamed_unsolicited"
            self._event(MemberExcluded(now, group.label, "blamed_unsolicited", topics.sid_of(sender)))
            return []
        return None

    def _track(self, group: GroupState) -> None:
        """Update the indexes after anything happened to ``group``."""
        label = group.label
        if group.active:
            self._active.add(label)
            if group.ready:
                self._unready.discard(label)
            else:
                self._unready.add(label)
            self._group_timers.set(label, min(group.deadline, self._relay_due(group)))
        else:
            self._active.discard(label)
            self._unready.discard(label)
            self._group_timers.discard(label)

    def _progress(self, touched: list[GroupState], now: float) -> list[Outgoing]:
        """Act on the groups that just changed, then on the round."""
        out: list[Outgoing] = []
        for group in touched:
            if not group.active:
                continue
            if group.blame_complete():
                out.extend(self._resolve_blame(group, now))
            elif not group.reveal_sent and group.unjustified_blamers():
                # Blamed although every member voted go on the final batch: excluded, and the run
                # starts again (nobody has revealed yet).
                blamers = group.unjustified_blamers()
                self._event(BlameResolved(now, group.label, group.run, len(blamers), "blame without a no-go vote"))
                out.extend(self._exclude(group, tuple((m, "blamed_unsolicited") for m in blamers), now))
            elif group.reveals_complete():
                out.extend(self._open_group(group, now))
        if not self._reveal_opened:
            if self._active and not self._unready:
                # Barrier: no group reveals before every group has voted go, so a group that falls
                # below k later can still merge with a group whose records are not yet opened.
                self._reveal_opened = True
                for label in sorted(self._active):
                    out.extend(self._send_reveal_open(self._groups[label], now))
                self._event(RevealOpened(now, len(self._active)))
        else:
            for group in touched:
                if group.active and group.ready and not group.reveal_sent:
                    out.extend(self._send_reveal_open(group, now))
        if self.state == CollectorState.SHARING and self._groups and not self._active:
            out.extend(self._publish_release(now))
        return out

    def _send_reveal_open(self, group: GroupState, now: float) -> list[Outgoing]:
        message = group.reveal_open_message(self.round_id, self.public_key)
        msg = Outgoing(topics.group_control(self.round_id, group.label), self._sign(message))
        self._resend.arm(("reveal_open", group.label), msg, now)
        group.data.relay.append((msg.payload, None))
        group.deadline = now + self.config.step_timeout
        group.next_relay = None
        self._track(group)
        return [msg]

    def _open_group(self, group: GroupState, now: float) -> list[Outgoing]:
        """Every reveal is in: the group is over (``group_done``); its records open in the pool, and
        are taken at the release (`_take_openings`), so that the cores the pool has open them while
        this node reads the other groups' reveals."""
        self._opening[group.label] = group.start_opening(self.round_id, self._kx, len(self.config.confidential),
                                                         self._pool)
        self._track(group)
        self._resend.cancel(("reveal_open", group.label))
        message = group.done_message(self.round_id, self.public_key)
        out = Outgoing(topics.group_control(self.round_id, group.label), self._sign(message))
        self._done_out[group.label] = out
        return [out]

    def _take_openings(self, now: float) -> None:
        for label in sorted(self._opening):
            group = self._groups[label]
            records = group.finish_opening(self._opening[label].result())
            if len(records) >= self.config.k:
                self._records[label] = records
            else:
                # Garbage inner layers left fewer than k records: the group is suppressed, never released
                # below k, and never re-run (its secrets are out). SPEC §4 share.7.
                self._event(GroupSuppressed(now, label, len(records), "below_k_after_open"))
            self._event(GroupOpened(now, label, group.run, len(records), group.undecryptable))
        self._opening.clear()

    def _answer_late_reveal(self, group: GroupState, member: bytes) -> list[Outgoing]:
        """A member of an opened group re-sends her reveal: its acknowledgement, ``group_done``, was
        lost (an outage can lose anything). Re-send it, and the release to her inbox once there is
        one (the retained release reached her as little as the group_done did)."""
        out = [self._done_out[group.label]]
        if self._release_out is not None:
            out.append(Outgoing(topics.inbox(self.round_id, member), self._release_out.payload))
        return out

    def _resolve_blame(self, group: GroupState, now: float) -> list[Outgoing]:
        result = group.blame(self.round_id)
        self._event(BlameResolved(now, group.label, group.run, len(result.culprits), result.detail))
        return self._exclude(group, result.culprits, now)

    def _relay_due(self, group: GroupState) -> float:
        """When a run without news is relayed: half a step timeout after its last fresh message,
        then every retry interval until its deadline."""
        if group.next_relay is not None:
            return group.next_relay
        return group.deadline - self.config.step_timeout / 2

    def _relay(self, group: GroupState, now: float) -> list[Outgoing]:
        """Re-publish a stalled run's messages on its control topic (see `collector_groups`)."""
        silent = group.silent_members()
        if not silent:
            # Not stalled: ready and waiting at the reveal barrier for other groups. Nothing to relay
            # before the deadline, which then just moves on.
            group.next_relay = group.deadline
            return []
        # During an outage relays are of no use to anyone; a few keep going in case it is partial.
        pause = self.config.step_timeout / 4 if group.suspended else self.config.retry_interval
        group.next_relay = now + max(self.config.retry_interval, pause)
        self._event(RunRelayed(now, group.label, group.run, len(group.data.relay)))
        topic = topics.group_control(self.round_id, group.label)
        # A message meant for one member is relayed to her inbox only (it is O(k) bytes long).
        out = [Outgoing(topic if target is None else topics.inbox(self.round_id, target), payload)
               for payload, target in group.data.relay]
        # A member who never got her assign does not know her group's topic yet, and may lack the
        # roster it is checked against.
        for member in silent:
            if self._resend.pending(("assign", member)) and self._roster_out is not None:
                out.append(Outgoing(topics.inbox(self.round_id, member), self._roster_out.payload))
                out.append(self._assign_msgs[member])
        return out

    def _group_timeout(self, group: GroupState, now: float) -> list[Outgoing]:
        silent = group.silent_members()
        if not silent:
            group.deadline = now + self.config.step_timeout
            return []
        if self._outage_suspected(group, now):
            group.deadline = now + self.config.step_timeout / 2
            return []
        return self._exclude(group, tuple((m, "silent") for m in silent), now)

    def _suppress(self, group: GroupState, culprits: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        """A group that lost members after its reveal_open: some members may have revealed, so it is
        never re-run nor merged (a second opening of overlapping members would give away the
        missing member's record); without every inner secret nothing of it can be opened either.
        Its other members are excluded as ``suppressed`` (SPEC §4 share.7)."""
        named = dict(culprits)
        everyone = culprits + tuple((m, "suppressed") for m in group.members if m not in named)
        for key, reason in everyone:
            self._excluded[key] = reason
            self._resend.cancel(("assign", key), acknowledged=False)
            self._event(MemberExcluded(now, group.label, reason, topics.sid_of(key)))
        group.dissolve()
        self._track(group)
        self._event(GroupSuppressed(now, group.label, 0, "member_lost_after_reveal_open"))
        return self._start_run_close(group, everyone, now)

    # ------------------------------------------------------------------ outages
    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        """The driver's word on this node's own connection to the broker (optional Node input).

        Down: no deadline passes (registration, group steps, audit) until it is back up. Up: every
        waiting deadline is moved to at least one step timeout from now (registration's also by the
        time lost), the retained bulletins are published again (a broker restarted without
        persistence lost them) and every pending re-send leaves at once.
        """
        self._now = self._resend.now = now
        if up == self._transport_up:
            return []
        self._transport_up = up
        self._event(TransportChanged(now, up))
        if not up:
            if self._outage_since is None:
                self._outage_since = now
            return []
        out: list[Outgoing] = []
        if self.state not in (CollectorState.CREATED, CollectorState.ABORTED):
            out.extend(b for b in (self._roster_out, self._release_out) if b is not None)
            self._resend.expedite(now)
            out.extend(self._resend.due(now))
        self._end_outage(now)
        return out

    def _hear(self, now: float) -> list[Outgoing]:
        """A message of this round from a subject arrived: an outage under way is over."""
        self._heard_at = now
        if self._outage_since is not None and self._transport_up:
            self._end_outage(now)
        return []

    def _end_outage(self, now: float) -> None:
        """Give everyone a fresh step after an outage: nobody is excluded for the time it took."""
        since = self._outage_since
        if since is None:
            return
        self._outage_since = None
        lasted = now - since
        step = self.config.step_timeout
        if self._deadline is not None:
            if self.state == CollectorState.REGISTRATION:
                self._deadline = max(self._deadline + lasted, now + step)
            elif self.state == CollectorState.AUDITING:
                self._deadline = max(self._deadline, now + step)
        for label in list(self._active):
            self._grant(self._groups[label], now)
        self._event(OutageEnded(now, lasted))

    def _grant(self, group: GroupState, now: float) -> None:
        group.deadline = max(group.deadline, now + self.config.step_timeout)
        group.next_relay = None
        group.suspended = False
        self._track(group)

    def _outage_suspected(self, group: GroupState, now: float) -> bool:
        """At the deadline of ``group``: is its silence a transport outage rather than silent members?

        Live members of a stalled run always re-send something (at least every quarter step), so a
        group from which nothing at all arrived for half a step is *mute*: all its members vanished,
        or the transport does not carry. When at least half of the active groups are mute at once
        (a broker outage: all of them), it is the transport, for up to `OUTAGE_LIMIT` seconds.
        """
        half = self.config.step_timeout / 2
        quiet = now - group.heard_at
        # The limit counts from the start of the outage under way, if any: a run started during it
        # (after exclusions) does not restart the clock.
        since = group.heard_at if self._outage_since is None else min(group.heard_at, self._outage_since)
        if quiet < half or now - since >= self._outage_limit:
            return False
        mute = sum(1 for label in self._active if now - self._groups[label].heard_at >= half)
        if 2 * mute < len(self._active):
            return False
        if self._outage_since is None and (self._heard_at is None or now - self._heard_at >= half):
            # Nothing from anyone: the first message to arrive ends it for every group (`_hear`).
            self._outage_since = self._heard_at if self._heard_at is not None else group.heard_at
        if not group.suspended:
            group.suspended = True
            self._event(OutageSuspected(now, str(self.state), group.label, quiet))
        return True

    def _audit_outage(self, now: float) -> bool:
        """At the audit deadline: verdicts are missing and no subject was heard for half a step."""
        if not self._awaiting_verdicts:
            return False
        heard = self._heard_at if self._heard_at is not None else self._phase_started.get(CollectorState.AUDITING, now)
        quiet = now - heard
        if quiet < self.config.step_timeout / 2 or quiet >= self._outage_limit:
            return False
        if self._outage_since is None:
            self._outage_since = heard
            self._event(OutageSuspected(now, str(self.state), -1, quiet))
        return True

    def _exclude(self, group: GroupState, culprits: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if group.reveal_sent:
            return self._suppress(group, culprits, now)
        for key, reason in culprits:
            self._excluded[key] = reason
            self._resend.cancel(("assign", key), acknowledged=False)
            self._event(MemberExcluded(now, group.label, reason, topics.sid_of(key)))
        remaining = tuple(m for m in group.members if m not in dict(culprits))
        group.set_members(remaining, self._index_of)
        if len(remaining) >= self.config.k:
            return self._start_run(group, culprits, now)
        # SafePub suppresses a class below k instead of merging it (a merge would release its records
        # under another class's generalization).
        mergeable = remaining and self.config.grouping == "mdav"
        target = merge_target(group, self._groups.values(), self._centroid_of) if mergeable else None
        if target is None:
            # No group left whose records are still sealed (or SafePub): these members cannot be protected.
            reason = "below_k_no_partner" if self.config.grouping == "mdav" else "suppressed_class"
            for key in remaining:
                self._excluded[key] = reason
            group.dissolve()
            self._track(group)
            self._event(GroupDissolved(now, group.label, len(remaining)))
            return self._start_run_close(group, culprits + tuple((m, reason) for m in remaining), now)
        moved = remaining
        target.set_members(tuple(sorted(target.members + moved)), self._index_of)
        group.dissolve()
        self._track(group)
        self._event(GroupMerged(now, group.label, target.label, len(moved)))
        out = self._start_run_close(group, culprits + tuple((m, "merged") for m in moved), now, also_to=moved)
        for key in moved:
            self._group_of[key] = target.label
        # Every member of the merged group gets a new assign: a run's members must be a subset of
        # the members her latest assign names (SPEC §4 share.1).
        for key in target.members:
            out.extend(self._send_assign(key, self._index_of(key), now))
        out.extend(self._start_run(target, (), now))
        return out

    def _start_run_close(
        self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float, also_to: tuple[bytes, ...] = ()
    ) -> list[Outgoing]:
        """Tell a dissolved group's members (final ShuffleStart without them) and stop re-sending for it.
        ``also_to``: moved members get it on their inbox too (their new assign may overtake it and take
        them off the group's topic): whom it excluded tells them whose view disagreed (SPEC §4 share.2)."""
        self._resend.cancel(("shuffle_start", group.label), acknowledged=False)
        self._resend.cancel(("reveal_open", group.label), acknowledged=False)
        payload = self._sign(group.closing_message(self.round_id, self.public_key, excluded, now))
        return [Outgoing(topics.group_control(self.round_id, group.label), payload),
                *(Outgoing(topics.inbox(self.round_id, key), payload) for key in also_to)]

    def _index_of(self, key: bytes) -> int:
        # Roster order is sorted, so a binary search finds the index.
        return bisect.bisect_left(self._order, key)

    # ------------------------------------------------------------------ release and audit
    def _publish_release(self, now: float) -> list[Outgoing]:
        assert self._tree is not None
        self._take_openings(now)
        ids: list[int] = []
        sizes: list[int] = []
        blocks: list[np.ndarray] = []
        for label in sorted(self._records):
            records = self._records[label]
            if len(records) < self.config.k:
                continue  # never a group below k (SPEC §4 release)
            group = self._groups[label]
            centroid = self._centroid_of(group)
            conf = np.array(sorted(records), dtype=np.float64)  # sorted: no order information survives
            block = np.hstack([np.tile(centroid, (conf.shape[0], 1)), conf])
            blocks.append(block)
            ids.append(label)
            sizes.append(conf.shape[0])
        matrix = np.vstack(blocks) if blocks else np.zeros((0, len(self.config.columns)))
        self._release_matrix = matrix
        self._release_sizes = tuple(sizes)
        self._release_ids = tuple(ids)
        rows = matrix.astype("<f8").tobytes()
        release = Release(self.round_id, self.public_key, self.config.columns, tuple(ids), tuple(sizes),
                          rows, merkle.rows_root(rows, len(self.config.columns)), self._tree.root)
        self._release_out = Outgoing(topics.release(self.round_id), self._sign(release), retain=True)
        self._release_digest = codec.payload_digest_of(self._release_out.payload)
        self._resend.clear()
        self._awaiting_verdicts = {key for key in self._registrations
                                   if key not in self._excluded and key not in self._verdicts}
        self._deadline = now + self.config.audit_window
        self._event(ReleasePublished(now, int(matrix.shape[0]), len(ids)))
        self._enter(CollectorState.AUDITING)
        return [self._release_out]

    def _on_verdict(self, message: Verdict, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        digest = decoded.digest
        if message.sender not in self._registrations:
            raise RemoteProtocolError("not_registered", "verdict from a subject not in the roster")
        known = self._verdicts.get(message.sender)
        if known is not None and known != message:
            raise RemoteProtocolError("conflicting_verdict", "a second, different verdict")
        if known is None:
            self._verdicts[message.sender] = message
            self._event(VerdictAccepted(now, topics.sid_of(message.sender), message.sender, digest, message.accept,
                                        message.reason))
        ack = VerdictAck(self.round_id, self.public_key, message.sender, digest)
        out = [Outgoing(topics.inbox(self.round_id, message.sender), self._sign(ack))]
        self._awaiting_verdicts.discard(message.sender)
        if self.state == CollectorState.AUDITING and not self._awaiting_verdicts:
            out.extend(self._finish(now))
        return out

    def _binds_release(self, verdict: Verdict) -> bool:
        """A verdict judges one release of one roster (SPEC §7.3): an accept bound to another release
        or roster (the subject was shown something else) is no accept of this one."""
        return verdict.release_digest == self._release_digest and self._tree is not None \
            and verdict.roster_root == self._tree.root

    def _finish(self, now: float) -> list[Outgoing]:
        self._deadline = None
        self._enter(CollectorState.DONE)
        accepted = sum(1 for v in self._verdicts.values() if v.accept and self._binds_release(v))
        self._event(RoundDone(now, len(self._verdicts), accepted))
        return [self._withdraw_announce()]

    def _withdraw_announce(self) -> Outgoing:
        """Clear the retained announce (MQTT: an empty retained message), so that nobody who connects
        later takes this finished round for an open one."""
        return Outgoing(topics.ANNOUNCE, b"", retain=True)

    def _on_fetch(self, message: Fetch, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.sender not in self._registrations:
            raise RemoteProtocolError("not_registered", "fetch from a subject not in the roster")
        # Bulletins (retained for everyone) are re-sent to the asker's inbox: a retained delivery can
        # be lost too (a broker drops QoS 1 messages to a slow subscriber).
        bulletin = {"release": self._release_out, "roster": self._roster_out}.get(message.what)
        if bulletin is not None:
            return [Outgoing(topics.inbox(self.round_id, message.sender), bulletin.payload)]
        if message.what == "assign" and message.sender in self._assign_msgs:
            return [self._assign_msgs[message.sender]]
        raise RemoteProtocolError("early", f"nothing to send for {message.what!r} yet", ignore=True)

    # ------------------------------------------------------------------ results
    def outcome(self) -> RoundOutcome:
        verdicts = [
            {"sid": topics.sid_of(key), "accept": v.accept and self._binds_release(v),
             "reason": v.reason if not v.accept or self._binds_release(v) else "other_release"}
            for key, v in sorted(self._verdicts.items())
        ]
        excluded: list[dict[str, object]] = [
            {"sid": topics.sid_of(k), "reason": r} for k, r in sorted(self._excluded.items())
        ]
        rejections: dict[str, int] = {}
        for rej in self.rejections:
            rejections[rej.reason] = rejections.get(rej.reason, 0) + 1
        empty = np.zeros((0, len(self.config.columns)))
        matrix = self._release_matrix if self._release_matrix is not None else empty
        times = dict(self._phase_times)
        return RoundOutcome(
            completed=self.state == CollectorState.DONE,
            phase=self.state,
            columns=self.config.columns,
            rows=matrix,
            group_sizes=self._release_sizes,
            verdicts=verdicts,
            excluded=excluded,
            manifest=dict(self.config.manifest()),
            phase_times=times,
            registered=len(self._registrations),
            round_id=self.round_id.hex(),
            rejections=rejections,
            group_ids=self._release_ids,
        )


#: state -> message class -> handler: the single source of dispatch and of the spec's table. A message
#: whose class the current state does not list is recorded as IGNORE ``unexpected`` (in ``created``,
#: before the round is announced, as IGNORE ``early``).
TRANSITIONS: dict[CollectorState, dict[type[Message], Handler[CollectorNode, codec.Decoded]]] = {
    CollectorState.CREATED: table(),
    CollectorState.REGISTRATION: table(on(Register, CollectorNode._on_register), on(Fetch, CollectorNode._on_fetch)),
    CollectorState.SHARING: table(
        on(Register, CollectorNode._on_late_register),
        on(Fetch, CollectorNode._on_fetch),
        on(RunKeys, CollectorNode._on_group_message),
        on(Submit, CollectorNode._on_group_message),
        on(Batch, CollectorNode._on_group_message),
        on(Vote, CollectorNode._on_group_message),
        on(Reveal, CollectorNode._on_group_message),
        on(Blame, CollectorNode._on_group_message),
        on(Verdict, CollectorNode._on_verdict),
    ),
    CollectorState.AUDITING: table(
        on(Register, CollectorNode._on_late_register),
        on(Fetch, CollectorNode._on_fetch),
        on(Reveal, CollectorNode._on_group_message),
        on(Verdict, CollectorNode._on_verdict),
    ),
    CollectorState.DONE: table(on(Fetch, CollectorNode._on_fetch), on(Verdict, CollectorNode._on_verdict)),
    CollectorState.ABORTED: table(),
}
