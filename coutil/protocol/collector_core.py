"""The collector's state, and its coordination of the groups' shuffle runs (sans-IO).

`CollectorCore` holds everything a round's collector knows and runs the SHARING phase group by
group: it starts each group's run, takes its members' messages (`GroupState.observe`), relays a
stalled run, excludes the silent and the culprits of a blame, merges or suppresses a group that
fell below k, opens a group's records once every member revealed, and holds a mute group's
deadline while its silence is taken for an outage. `CollectorNode` (`coutil.protocol.collector`)
builds on it: the Node interface, the transition table, the registration, the transport's word on
outages, the release and the verdicts.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, merkle, topics
from coutil.protocol.collector_groups import (
    GroupMessage,
    GroupState,
    Record,
    deviation_exclusion,
    is_unstarted,
    merge_target,
)
from coutil.protocol.collector_outage import OutageWatch
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import (
    BlameResolved,
    CollectorEvent,
    GroupDissolved,
    GroupMerged,
    GroupOpened,
    GroupSuppressed,
    MemberExcluded,
    OutageSuspected,
    PhaseChanged,
    RevealOpened,
    RunRelayed,
    RunStarted,
)
from coutil.protocol.messages import Assign, Blame, Message, Reveal, RunKeys, Verdict
from coutil.protocol.node import SERIAL_POOL, Outgoing, Pending, RandomSource, Rejection, RejectionLog, WorkPool
from coutil.protocol.retry import Resender
from coutil.protocol.schedule import TimerHeap
from coutil.protocol.shuffle import largest_run_members
from coutil.protocol.states import CollectorState

__all__ = ["OUTAGE_LIMIT", "CollectorCore", "Registration"]

#: Seconds of silence the collector takes for a transport outage at most (protocol/SPEC.md, section 4,
#: "Outages"): past this, the silent are excluded as if the transport were up. Not a round parameter
#: (the announce and the vectors stay as they are); `CollectorNode(outage_limit=...)` overrides it.
OUTAGE_LIMIT = 600.0
#: Messages per task when the collector signs many at once (`CollectorCore._sign_many`): enough tasks
#: to keep every process of a pool busy, few enough that handing them over costs little.
SIGN_CHUNK = 2000


@dataclass
class Registration:
    key: bytes
    qi: tuple[float, ...]
    digest: bytes
    ack: Outgoing
    #: `coutil.protocol.merkle.qi_commitment` of her salt and QIs: what her roster leaf holds of them.
    commitment: bytes = b""


class CollectorCore:
    """The collector's state and its groups' runs; `CollectorNode` is the collector."""

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
        self._limits = limits if limits is not None else codec.Limits(max_message_bytes=config.accepted_message_bytes)
        #: The most members a merged run may have: its blames must fit what every subject accepts (SPEC §4; the
        #: config bounds MDAV's own groups by its max_message_bytes too).
        self._max_members = largest_run_members(config.confidential)
        #: Shared with the subjects hosted in the same process, if any (see `codec.DecodeCache`).
        self._decode_cache = decode_cache if decode_cache is not None else codec.DecodeCache(capacity=1024)
        self._kx = crypto.KxKey.generate(rng)
        #: Where the groups' records are opened (see `WorkPool`); needed at the release.
        self._pool = pool
        self._opening: dict[int, Pending[list[Record | None]]] = {}
        self.state = CollectorState.CREATED
        self.rejections = RejectionLog()
        #: The sid the message being handled is addressed to (its topic towards one member), else None.
        self._addressed_to: str | None = None
        self._events: list[CollectorEvent] = []
        self._resend = Resender(config.retry_interval, config.step_timeout / 4)
        self._registrations: dict[bytes, Registration] = {}
        #: (subject, what) -> when her fetch was last answered, and with what (the same answer goes at most
        #: once per half retry interval).
        self._fetch_answered: dict[tuple[bytes, str], tuple[float, bytes]] = {}
        #: subject -> (since when, how many) roster broadcasts her fetches triggered in the current step
        #: timeout (each reaches every subscriber: capped).
        self._roster_broadcasts: dict[bytes, tuple[float, int]] = {}
        self._order: list[bytes] = []  # roster order (sorted keys)
        self._tree: merkle.MerkleTree | None = None
        self._qi_matrix: np.ndarray | None = None
        #: Released QI values of every group as formed at the roster (`_form_groups`).
        self._centroids: np.ndarray = np.zeros((0, len(config.qi)))
        self._groups: dict[int, GroupState] = {}
        self._group_of: dict[bytes, int] = {}
        #: The groups a member was moved out of by a merge (her re-sends there are IGNOREd, not proof).
        self._moved_from: dict[bytes, set[int]] = {}
        self._assign_msgs: dict[bytes, Outgoing] = {}
        self._excluded: dict[bytes, str] = {}
        #: (group, run) -> the signed envelopes that prove the run's `blamed_*` exclusions (`run_evidence`).
        self._run_evidence: dict[tuple[int, int], tuple[bytes, ...]] = {}
        #: (group, run) -> the `blamed_*` exclusions (member, reason) that its evidence is for.
        self._run_blames: dict[tuple[int, int], tuple[tuple[bytes, str], ...]] = {}
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
        #: Its payload digest (set with it): every run's membership digest starts from it (SPEC §8.4).
        self._announce_digest = b""
        self._now = 0.0
        self._outage = OutageWatch(outage_limit)
        #: When the announce left and the latest registration arrived (`_close_registration`).
        self._registration_started = 0.0
        self._last_registration_at = 0.0

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

    @property
    def announce_digest(self) -> bytes:
        """The payload digest of its announce (SPEC §8.4: every run's membership digest starts from it)."""
        if not self._announce_digest:
            raise RuntimeError("the round has not been announced")
        return self._announce_digest

    @property
    def roster_root(self) -> bytes:
        """The root of the roster it published (empty before the roster)."""
        return self._tree.root if self._tree is not None else b""

    def run_evidence(self) -> Mapping[tuple[int, int], tuple[bytes, ...]]:
        """Per (group, run) that ended in `blamed_*` exclusions, the exact envelopes of its messages as the
        collector held them when it excluded (its control messages and every member message it stored, in
        arrival order, then the rejected ones that proved a deviation): what an auditor replays to see that
        the signed statement's blames are proven (SPEC §8.5; `collector_groups.proven_exclusions`)."""
        return dict(self._run_evidence)

    def publishes_evidence(self) -> bool:
        """Whether the transcript it publishes holds every signed shuffle_start and the run evidence, as its signed
        announce commits to (`TRANSCRIPT_COMMITMENT`, SPEC §8.5): always, for an honest collector."""
        return True

    def sign_transcript(self, statement: bytes) -> bytes:
        """Its signature of a transcript's 32-byte statement (`coutil.round.transcript.transcript_statement`, SPEC
        §8.5), under the transcript domain: two different final transcripts it signed for one round prove that it
        showed auditors different rounds. A digest only: nothing else can be signed this way."""
        return crypto.sign_transcript(self._identity, statement)

    def shows_two_transcripts(self) -> bool:
        """Whether it hands a second auditor another transcript of the round (`two_transcripts`, a deviation of the
        library): never, for an honest collector."""
        return False

    def run_blames(self) -> Mapping[tuple[int, int], tuple[tuple[bytes, str], ...]]:
        """Per (group, run) of `run_evidence`, the `blamed_*` exclusions (member, reason) it ended with."""
        return dict(self._run_blames)

    def _sign(self, message: Message) -> bytes:
        data: bytes = codec.encode(message, self._identity)
        return data

    def _sign_many(self, messages: list[Message]) -> list[bytes]:
        """`_sign` of every message, in order, shared out over the `WorkPool` in chunks."""
        sign = functools.partial(codec.encode, signing_key=self._identity)
        chunks = [self._pool.submit(sign, messages[i:i + SIGN_CHUNK]) for i in range(0, len(messages), SIGN_CHUNK)]
        return [data for chunk in chunks for data in chunk.result()]

    def _index_of(self, key: bytes) -> int:
        # Roster order is sorted, so a binary search finds the index.
        return bisect.bisect_left(self._order, key)

    def _centroid_of(self, group: GroupState) -> np.ndarray:
        assert self._qi_matrix is not None
        if group.original or self.config.grouping == "safepub":
            # Untouched MDAV group: use MDAV's own centroid so the release equals centralized MDAV exactly.
            return np.asarray(self._centroids[group.label], dtype=np.float64)
        return np.asarray(self._qi_matrix[list(group.indices)].mean(axis=0), dtype=np.float64)

    def _merge_target(self, group: GroupState) -> GroupState | None:
        """Where the members of ``group``, fallen below k, go (SPEC §4): the nearest group still sealed whose
        merged run's messages fit (none: its members are excluded `below_k_no_partner`)."""
        return merge_target(group, self._groups.values(), self._centroid_of, self._max_members)

    def _assign_message(self, key: bytes, key_index: int) -> Assign:
        assert self._tree is not None
        label = self._group_of[key]
        group = self._groups[label]
        centroid = tuple(float(v) for v in self._centroid_of(group))
        return Assign(self.round_id, self.public_key, key, key_index, self._tree.proof(key_index),
                      self._tree.root, label, group.members, centroid, self._fellows(key, group.members))

    def _fellows(self, key: bytes, members: tuple[bytes, ...], tree: merkle.MerkleTree | None = None,
                 order: list[bytes] | None = None) -> tuple[tuple[int, bytes, tuple[bytes, ...]], ...]:
        """Every other member's roster entry (leaf index, QI commitment, inclusion proof) in ``tree`` over the
        keys ``order`` (default: the roster's), for her assign (SPEC §8.3)."""
        tree = tree if tree is not None else self._tree
        assert tree is not None
        fellows = []
        for member in members:
            if member == key:
                continue
            index = self._index_of(member) if order is None else order.index(member)
            fellows.append((index, self._registrations[member].commitment, tree.proof(index)))
        return tuple(fellows)

    def _send_assign(self, key: bytes, key_index: int, now: float, signed: bytes | None = None) -> list[Outgoing]:
        """Her assign (``signed``: its envelope, already signed by `_sign_many`), re-sent until acknowledged."""
        if signed is None:
            signed = self._sign(self._assign_message(key, key_index))
        out = Outgoing(topics.inbox(self.round_id, key), signed)
        self._assign_msgs[key] = out
        self._resend.arm(("assign", key), out, now)
        return [out]

    # ------------------------------------------------------------------ runs
    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        message = group.new_run(self.round_id, self.announce_digest, self.public_key, excluded,
                                now + self.config.step_timeout)
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
        if self._unstarted(group, message):
            # Members answer the shuffle_starts the collector sends: a signed message for a run it never
            # started her in (a copy published ahead, retained for late subscribers, would be a second
            # view of that run) is proof (SPEC §7.3 `blamed_equivocation`).
            self.rejections.append(Rejection(now, "", "unstarted_run", f"{message.TAG} for a run not started",
                                             False, message.sender, message.TAG))
            group.data.proofs.append(decoded.envelope)
            return self._exclude(group, ((message.sender, "blamed_equivocation"),), now)
        if isinstance(message, Blame) and self._late_equivocation(group, message, decoded.envelope, now):
            return []
        out = self._observe(group, message, decoded.envelope, now, self._addressed_to)
        if out is None and isinstance(message, Blame):
            # What she took (her input: a batch, or mixer 1's submissions; the final batch) and the no-go vote she
            # answers, as if they had come on their topics: one the collector lacked (lost, or hidden from it), a
            # second one of their signer (her equivocation), or one it holds.
            for carried, envelope in group.blame_carried(message):
                try:
                    out = self._observe(group, carried, envelope, now, None)
                except RemoteProtocolError as exc:
                    if not exc.ignore:
                        self.rejections.append(Rejection(now, "", exc.reason, exc.detail, False, carried.sender,
                                                         carried.TAG))
                if out is not None:
                    return out
        if out is not None:
            return out
        if isinstance(message, RunKeys) and not group.reveal_sent:
            # The last run_keys to reach the collector: votes it kept meanwhile are checked now.
            liars = group.votes_on_other_keys(self.round_id)
            if liars:
                for member in liars:
                    self.rejections.append(Rejection(now, "", "view_mismatch", "vote states other run keys", False,
                                                     member, "vote"))
                return self._exclude(group, tuple((m, "blamed_split_view") for m in liars), now)
        self._resend.news(now)  # a fresh member message: the subjects are being served (see retry.py)
        if isinstance(message, RunKeys):
            self._resend.cancel(("assign", message.sender))
            if group.all_keys():
                self._resend.cancel(("shuffle_start", group.label))
        self._track(group)
        return self._progress([group], now)

    def _observe(self, group: GroupState, message: GroupMessage, envelope: bytes, now: float,
                 to: str | None) -> list[Outgoing] | None:
        """`GroupState.observe`; a rejection that proves its sender deviated excludes her (what to send: the
        message is kept among the run's proofs), any other is raised. None: the message was taken."""
        assert self._tree is not None
        try:
            group.observe(message, envelope, now, self.config.step_timeout, self._tree.root, to)
        except RemoteProtocolError as exc:
            group.data.proofs.append(envelope)  # the evidence of her exclusion, if it is one
            out = self._on_deviation(group, message.sender, exc, now)
            if out is None:
                group.data.proofs.pop()
                raise
            self.rejections.append(Rejection(now, "", exc.reason, exc.detail, exc.ignore, message.sender,
                                             message.TAG))
            return out
        return None

    def _late_equivocation(self, group: GroupState, blame: Blame, envelope: bytes, now: float) -> bool:
        """A blame after the run's reveal_open carrying a no-go vote of a member whose go vote the collector keeps,
        or another final batch of the final mixer (`GroupState.late_equivocation`). No run follows a reveal_open:
        the blamer withholds her reveal and the group is suppressed at its deadline (liveness, as a broker dropping
        her reveal); the signer is then excluded `blamed_equivocation`, this blame her proof, and the blamer (unless
        she is the signer) is not excluded for it."""
        signed = group.late_equivocation(blame)
        if signed is None:
            return False
        self.rejections.append(Rejection(now, "", "equivocation", f"a second {signed.TAG} a blame carries", False,
                                         signed.sender, signed.TAG))
        if signed.sender not in group.data.late_equivocators:
            group.data.late_equivocators.append(signed.sender)
            group.data.proofs.append(envelope)
        if blame.sender not in group.data.late_blamers:
            group.data.late_blamers.append(blame.sender)
        return True

    def _unstarted(self, group: GroupState, message: GroupMessage) -> bool:
        """A member's message naming a later run of her group than the collector started, or a group she
        was never in (an old group she was moved from is a re-send: IGNORE ``wrong_group``)."""
        sender = message.sender
        if not group.active or group.reveal_sent or sender in self._excluded:
            return False
        return is_unstarted(group.label, group.run, group.members, message, self._moved_from.get(sender, ()))

    def _on_deviation(self, group: GroupState, sender: bytes, exc: RemoteProtocolError,
                      now: float) -> list[Outgoing] | None:
        """A member message that proves its sender deviated: exclude her (SPEC §4 share.6; the caller kept
        the message among the run's proofs). None: the rejection is only recorded."""
        if sender not in group.members or not group.active or sender in self._excluded:
            return None
        # A view nobody was given (the collector told every member the same, and every member's run_keys
        # reached it on her own topic, where all members read them), two different signed messages for one
        # slot of the run, or signed keys nobody can seal to: her own signature is the proof (SPEC §7.3).
        # Nobody has revealed: a new run without her.
        reason = deviation_exclusion(exc.reason, group.reveal_sent)
        if reason is not None:
            return self._exclude(group, ((sender, reason),), now)
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

    def _take_openings(self, now: float) -> list[Outgoing]:
        """The opened groups' records; a group with an item that did not open is suppressed, by a signed
        closing statement."""
        out: list[Outgoing] = []
        for label in sorted(self._opening):
            group = self._groups[label]
            opened = self._opening[label].result()
            records = group.finish_opening(opened)
            if len(records) == len(opened):  # every item of the final batch opened
                self._records[label] = records
            else:
                # Garbage inner layers (an item that did not open): the group is suppressed, never re-run (its
                # secrets are out), SPEC §4 share.7. Stated, signed, as a suppression after the reveal_open is:
                # an auditor cannot tell a record that did not open from one the collector dropped, nor can the
                # collector say whose it was (that would link items to members). Releasing the others (k or
                # more) left members neither released nor excluded, and one member's garbage convicted an honest
                # collector of dropping a record (found by an attacker on the auditor).
                stated = tuple((key, "suppressed") for key in group.members)
                for key, reason in stated:
                    self._excluded[key] = reason
                    self._event(MemberExcluded(now, label, reason, topics.sid_of(key)))
                self._event(GroupSuppressed(now, label, len(records), "undecryptable_item"))
                out.extend(self._start_run_close(group, stated, now))
            self._event(GroupOpened(now, label, group.run, len(records), group.undecryptable))
        self._opening.clear()
        return out

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

    # ------------------------------------------------------------------ stalls, deadlines, exclusions
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

    def _outage_suspected(self, group: GroupState, now: float) -> bool:
        """At the deadline of ``group``: is its silence a transport outage rather than silent members
        (`OutageWatch.group_is_cut_off`)? Up to `OUTAGE_LIMIT` seconds."""
        half = self.config.step_timeout / 2

        def mute_groups() -> int:
            return sum(1 for label in self._active if now - self._groups[label].heard_at >= half)

        if not self._outage.group_is_cut_off(group.heard_at, now, half, mute_groups, len(self._active)):
            return False
        if not group.suspended:
            group.suspended = True
            self._event(OutageSuspected(now, str(self.state), group.label, now - group.heard_at))
        return True

    def _grant(self, group: GroupState, now: float) -> None:
        group.deadline = max(group.deadline, now + self.config.step_timeout)
        group.next_relay = None
        group.suspended = False
        self._track(group)

    def _exclude(self, group: GroupState, culprits: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if group.reveal_sent:
            late = group.data.late_equivocators
            # A late equivocator is `blamed_equivocation` even when she also withholds her reveal (`silent`): her
            # signatures prove it (found by a reviewer: a member blaming with a no-go vote of her own beside her
            # kept go vote was both the equivocator and a late blamer, and left `suppressed` like her victims).
            culprits = tuple((m, "blamed_equivocation") if m in late and not reason.startswith("blamed_")
                             else (m, reason) for m, reason in culprits)
            named = dict(culprits)
            culprits += tuple((m, "blamed_equivocation") for m in late if m not in named)
            # A member who proved a fellow's late equivocation withholds her reveal for it: not silent (found by
            # the attackers of late-final and swap-vote, where she was excluded `silent` beside her proof).
            culprits = tuple((m, "suppressed") if reason == "silent" and m in group.data.late_blamers else (m, reason)
                             for m, reason in culprits)
        if any(reason.startswith("blamed_") for _, reason in culprits):
            # What proves them, kept before the next run starts afresh (SPEC §8.5 run evidence).
            d = group.data
            self._run_evidence[(group.label, group.run)] = (*(payload for payload, _ in d.relay), *d.proofs)
            self._run_blames[(group.label, group.run)] = tuple(c for c in culprits if c[1].startswith("blamed_"))
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
        target = self._merge_target(group) if mergeable else None
        if target is None:
            # No group left whose records are still sealed (or SafePub): these members cannot be protected.
            reason = "below_k_no_partner" if self.config.grouping == "mdav" else "suppressed_class"
            for key in remaining:
                self._excluded[key] = reason
                # Reported like every exclusion: the service stores exclusions from these events, and one known
                # only at the round's end was missing from a round a crash aborted (its transcript failed verify).
                self._event(MemberExcluded(now, group.label, reason, topics.sid_of(key)))
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
            self._moved_from.setdefault(key, set()).add(group.label)
        # Every member of the merged group gets a new assign: a run's members must be a subset of
        # the members her latest assign names (SPEC §4 share.1).
        for key in target.members:
            out.extend(self._send_assign(key, self._index_of(key), now))
        out.extend(self._start_run(target, (), now))
        return out

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

    # ------------------------------------------------------------------ what CollectorNode provides
    def _publish_release(self, now: float) -> list[Outgoing]:
        """Every group is over: publish the release (`CollectorNode`)."""
        raise NotImplementedError
