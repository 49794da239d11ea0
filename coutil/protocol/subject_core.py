"""The subject's state, and her part in her group's shuffle runs (sans-IO).

`SubjectCore` holds everything a subject knows in a round and takes her part in her group's
accountable shuffle: she checks each run against her assign (members, k, no run after her reveal),
publishes her run keys, builds and submits her onion, peels and permutes her step, votes on the
final batch, reveals her inner secret at reveal_open, and blames on a no-go. The run's sub-steps are
tracked in `SubjectRun`. `SubjectNode` (`coutil.protocol.subject`) builds on it: the Node interface, the
transition table, registration, the release and her audit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, topics
from coutil.protocol.events import (
    BlameSent,
    NoGoVoted,
    RosterMissing,
    RunRefused,
    SplitViewSeen,
    SubjectEvent,
    SubjectExcluded,
    SubjectRunStarted,
    SubjectStateChanged,
    UnpeelableItem,
)
from coutil.protocol.messages import (
    COLLECTOR_TAGS,
    Assign,
    Batch,
    Blame,
    Fetch,
    GroupDone,
    Message,
    Reveal,
    RevealOpen,
    RoundParams,
    RunKeys,
    ShuffleStart,
    Submit,
    Verdict,
    Vote,
)
from coutil.protocol.node import Outgoing, RandomSource, Rejection, RejectionLog, shuffle_in_place
from coutil.protocol.retry import NewsClock, Resender
from coutil.protocol.shuffle import (
    NO_BATCH,
    batch_digest,
    check_run_keys,
    collector_aad,
    inner_aad,
    inner_commitment,
    keys_digest,
    members_digest,
    outer_aad,
)
from coutil.protocol.states import SubjectState
from coutil.protocol.subject_audit import SharedCaches, SubjectVerdict
from coutil.protocol.subject_run import SubjectRun, keep_first

__all__ = ["MIN_K", "SubjectCore", "SubjectRun"]

#: A subject's default floor on k (SPEC §4 announce): k = 1 releases her record as it is, so she does
#: not take part below 2 whatever the collector announces (a simulation whose experimenter chose
#: k = 1 builds its subjects with ``min_k=1``).
MIN_K = 2

class SubjectCore:
    """A subject's state and her group's runs; `SubjectNode` is the subject."""

    #: Publish run_keys retained (SPEC §6, late subscribers); False: as a v2 peer that does not (§13).
    RETAIN_KEYS: ClassVar[bool] = True

    def __init__(
        self,
        *,
        collector_key: bytes,
        qi: Sequence[float],
        confidential: Sequence[float],
        rng: RandomSource,
        caches: SharedCaches | None = None,
        limits: codec.Limits | None = None,
        retry_interval: float = 2.0,
        news: NewsClock | None = None,
        min_k: int = MIN_K,
    ) -> None:
        self._collector_key = bytes(collector_key)
        self._qi = tuple(float(v) for v in qi)
        self._confidential = tuple(float(v) for v in confidential)
        self._rng = rng
        self._caches = caches if caches is not None else SharedCaches()
        self._caches.expect(self._qi + self._confidential)
        self._limits = limits if limits is not None else codec.Limits()
        self._identity = crypto.SigningKey.generate(rng)
        self.public_key = self._identity.public
        self.sid = topics.sid_of(self.public_key)
        #: MQTT client id: the sid, so a broker ACL can confine her to her own topics.
        self.client_id = self.sid
        self.state = SubjectState.AWAIT_ANNOUNCE
        self.rejections = RejectionLog()
        self.verdict: Verdict | None = None
        self.audit: SubjectVerdict | None = None
        self._events: list[SubjectEvent] = []
        # ``news``: shared by the subjects one process hosts (their messages wait in the same queues).
        self._resend = Resender(retry_interval, news=news)
        self._round_id: bytes | None = None
        self._params: RoundParams | None = None
        #: The payload digest of the announce she took part on: bound into every run's membership digest
        #: (SPEC §8.4), so that members shown different announces (another k) do not run together.
        self._announce_digest = b""
        #: The smallest k she takes part with (her own floor, SPEC §4 announce): a collector may announce
        #: a k of its choosing, even to her alone (a split announce), but never below this.
        self._min_k = min_k
        self._register_digest: bytes | None = None
        self._roster_root: bytes | None = None
        #: The exact envelopes of the announce she took part on and of the first collector message of her round
        #: stating a roster root (with that root): with a second one stating another root they prove that the
        #: collector key equivocated (`equivocation_evidence`, SPEC §3 "split roster").
        self._announce_envelope = b""
        self._root_envelope = b""
        self._first_root: bytes | None = None
        self._root_is_bulletin = False
        #: The first roster of her round, exact envelope: her receipt (`roster_receipt`).
        self._receipt_envelope: bytes | None = None
        self._equivocation: tuple[bytes, bytes, bytes] | None = None
        #: The latest shuffle_start naming her, (group, run, envelope): `SubjectNode._note_start`.
        self._start_kept: tuple[int, int, bytes] | None = None
        #: The root of the roster broadcast on its retained bulletin topic (an answer on her inbox is only a
        #: hint): her reveal waits until it is the root she took part on (SPEC §7.3 roster, "split roster").
        self._bulletin_root: bytes | None = None
        self._roster_size: int | None = None
        self._roster_groups = 0
        #: An assign that arrived before the roster (checked once the roster is here).
        self._pending_assign: tuple[Assign, bytes] | None = None
        self._group: int | None = None
        self._left_groups: set[int] = set()
        #: Every (group, members) assign she took: one of them again, not her current one, is a re-delivered
        #: copy from before a merge (SPEC §7.3 assign, IGNORE `stale_run`).
        self._assigns_taken: set[tuple[int, tuple[bytes, ...]]] = set()
        self._members: tuple[bytes, ...] = ()
        self._run: SubjectRun | None = None
        #: Her group topic holds her retained run_keys (SPEC §6): cleared once the keys were used.
        self._keys_retained = False
        #: Members of her group as her latest verified assign names them: every run's members must be a
        #: subset of these, and at least k (SPEC §4 share.1).
        self._assigned: tuple[bytes, ...] = ()
        #: (group, run) in which she revealed her inner secret: she never takes part in a later run.
        self._revealed: tuple[int, int] | None = None
        #: A shuffle_start her assign does not cover, kept while she asks for her current assign.
        self._pending_start: ShuffleStart | None = None
        #: Complaints her verdict reports (SPEC §7.3 verdict reasons), first one first.
        self.complaints: list[str] = []
        #: Split views seen, by the member whose run_keys or vote disagreed with her view (dropped when
        #: the collector excludes that member: a lying member, not a lying collector).
        self._view_complaints: dict[bytes, str] = {}
        self._verdict_digest: bytes | None = None
        #: Her verdict's exact envelope, and the collector's acknowledgement of it once received: her
        #: evidence that the collector recorded it (`verdict_evidence`, SPEC §3 "hide complaints").
        self._verdict_envelope: bytes | None = None
        self._verdict_ack_envelope: bytes | None = None
        self._receiving = b""  # the envelope being handled (a handler that keeps exact bytes reads it)
        self._receiving_topic = ""  # and the topic it came on
        self._release_wait_until: float | None = None
        self._now = 0.0
        self._subscriptions_key: object = None
        self._subscriptions: frozenset[str] = frozenset()
        self._member_topics: dict[bytes, str] = {}
        self._direct_topics: dict[bytes, str] = {}

    # ------------------------------------------------------------------ helpers
    def _event(self, event: SubjectEvent) -> None:
        self._events.append(event)

    def _set_state(self, state: SubjectState) -> None:
        if state != self.state:
            self.state = state
            self._event(SubjectStateChanged(self._now, self.sid, state))

    def _member_topic(self, member: bytes) -> str:
        """A member's own group topic (memoized: checked on every group message)."""
        topic = self._member_topics.get(member)
        if topic is None:
            assert self._round_id is not None
            topic = self._member_topics[member] = topics.subject_group(self._round_id, member)
        return topic

    def _direct_topic(self, member: bytes) -> str:
        """The topic on which ``member`` sends a message meant for me alone (memoized)."""
        topic = self._direct_topics.get(member)
        if topic is None:
            assert self._round_id is not None
            topic = self._direct_topics[member] = topics.subject_to(self._round_id, member, self.public_key)
        return topic

    def _check_origin(self, message: Message, topic: str) -> None:
        if message.TAG in COLLECTOR_TAGS:
            if message.sender != self._collector_key:
                raise RemoteProtocolError("unknown_collector", f"{message.TAG} not signed by the collector")
        else:
            # Subject messages must come from a current group member, on that member's own topic.
            if message.sender not in self._members:
                raise RemoteProtocolError("not_a_member", f"{message.TAG} from a non-member")
            if self._round_id is None or topic == self._member_topic(message.sender) \
                    or topic == self._group_control_topic():
                return
            # On her own topic towards me (or relayed on my inbox): only what is meant for me alone,
            # a submission if I mix first, the batch of the step before mine. Anything else there
            # would be a view of the run the other members and the collector do not share (SPEC §5).
            if topic != self._direct_topic(message.sender) and topic != topics.inbox(self._round_id, self.public_key):
                raise RemoteProtocolError("topic_mismatch", f"{message.TAG} on a topic not its sender's")
            if not self._meant_for_me_alone(message):
                raise RemoteProtocolError("topic_mismatch", f"{message.TAG} on a topic for one member")

    def _group_control_topic(self) -> str | None:
        if self._round_id is None or self._group is None:
            return None
        return topics.group_control(self._round_id, self._group)

    def _meant_for_me_alone(self, message: Message) -> bool:
        if self._run is None or not isinstance(message, Submit | Batch) or message.run != self._run.number:
            # Another run's submission or batch (a relay of a stalled one): the run checks IGNORE it.
            return isinstance(message, Submit | Batch)
        members = self._run.members
        if isinstance(message, Submit):
            return members[0] == self.public_key
        return 1 <= message.step < len(members) and members[message.step] == self.public_key

    def _emit(self, topic: str, message: Message) -> Outgoing:
        """Sign ``message`` for ``topic``: every group message she sends passes here (one place for a
        deviating subclass to alter what she sends)."""
        return Outgoing(topic, self._caches.encode(message, self._identity))

    def _publish_group(self, message: Message) -> Outgoing:
        assert self._round_id is not None
        return self._emit(topics.subject_group(self._round_id, self.public_key), message)

    def _clear_retained_keys(self) -> list[Outgoing]:
        """An empty retained message on her group topic (MQTT: clears the retained one), once every
        member holds her keys or the round is over for her: the broker keeps none of her keys.
        QoS 0: a lost clear leaves one stale run_keys, which anyone who gets it ignores."""
        if not self._keys_retained or self._round_id is None:
            return []
        self._keys_retained = False
        return [Outgoing(topics.subject_group(self._round_id, self.public_key), b"", retain=True, qos=0)]

    def _publish_to(self, member: bytes, message: Message) -> Outgoing:
        """To one fellow member (and the collector, which reads every member topic)."""
        assert self._round_id is not None
        return self._emit(topics.subject_to(self._round_id, self.public_key, member), message)

    def _complain(self, reason: str) -> None:
        if reason not in self.complaints:
            self.complaints.append(reason)

    def _refuse(self, group: int, run: int, reason: str, now: float) -> list[Outgoing]:
        """Take no part in this run (SPEC §4 share.1): record it, complain in the verdict, and wait
        for the release (or fetch it) to audit it like everyone else."""
        assert self._params is not None
        self._complain(reason)
        self._event(RunRefused(now, self.sid, group, run, reason))
        self._pending_start = None
        self._resend.clear()
        self._set_state(SubjectState.AWAIT_RELEASE)
        self._release_wait_until = now + self._params.step_timeout
        return []

    def _ask_for_roster(self, now: float) -> list[Outgoing]:
        """Fetch the roster (the collector broadcasts it again on its bulletin topic), unless asked already."""
        if self._resend.pending(("fetch", "roster")):
            return []
        self._event(RosterMissing(now, self.sid))
        return self._send_fetch("roster", now)

    def _send_fetch(self, what: str, now: float) -> list[Outgoing]:
        assert self._round_id is not None
        fetch = Fetch(self._round_id, self.public_key, what)
        out = Outgoing(topics.subject_up(self._round_id, self.public_key), self._caches.encode(fetch, self._identity))
        self._resend.arm(("fetch", what), out, now)
        return [out]

    # ------------------------------------------------------------------ shuffle
    def _on_suppressed(self, message: ShuffleStart, digest: bytes, now: float) -> list[Outgoing]:
        """Before any group: a SafePub class below k is suppressed, and its members get no assign (they
        would refuse a group below k) but this notice, naming them with reason ``suppressed_class``."""
        if dict(message.excluded).get(self.public_key) != "suppressed_class" or self.public_key in message.members:
            raise RemoteProtocolError("unexpected", "shuffle_start before her group", ignore=True)
        self._resend.clear()
        self._set_state(SubjectState.EXCLUDED)
        self._event(SubjectExcluded(now, self.sid, "suppressed_class"))
        return []

    def _on_shuffle_start(self, message: ShuffleStart, digest: bytes, now: float) -> list[Outgoing]:
        assert self._round_id is not None
        if message.group != self._group:
            if message.group in self._left_groups:
                # The closing start of a group she was merged out of (its assign can overtake it):
                # whom it excluded still tells her whose view was the lie.
                for key, _ in message.excluded:
                    self._view_complaints.pop(key, None)
            raise RemoteProtocolError("wrong_group", "shuffle_start of another group", ignore=True)
        if self._run is not None and message.run <= self._run.number:
            raise RemoteProtocolError("stale_run", f"run {message.run} not newer", ignore=True)
        if (self._run is None and self._left_groups and self.public_key not in message.members
                and self.public_key not in dict(message.excluded)):
            # Merged into this group, no run of it yet: a run that neither names her nor excludes her is one
            # from before the merge (re-delivered); a run after it names her, or states why not.
            raise RemoteProtocolError("stale_run", f"run {message.run} from before I was merged in", ignore=True)
        assert self._params is not None
        if self.state == SubjectState.AWAIT_RELEASE and self._revealed is None:
            raise RemoteProtocolError("unexpected", "shuffle_start while awaiting the release", ignore=True)
        if self._revealed is not None:
            # After her reveal no run of hers may follow (SPEC §4 share.7): a run with her in it could
            # open her record a second time beside other members, one without her is an exclusion
            # after the collector held her secret. Either way she complains.
            reason = "rerun_after_reveal" if self.public_key in message.members else "excluded_after_reveal"
            return self._refuse(message.group, message.run, reason, now)
        # A member excluded by the collector was the one whose view disagreed: not a split view (only one
        # who really left the run: a statement that names a member it keeps clears nothing).
        for key, _ in message.excluded:
            if key not in message.members:
                self._view_complaints.pop(key, None)
        if self.public_key not in message.members:
            reasons = dict(message.excluded)
            if reasons.get(self.public_key) == "merged":
                return []  # a new Assign for the merged group follows
            if self._view_complaints:
                # Excluded after she saw a split view: she still audits the release and reports it.
                return self._refuse(message.group, message.run, next(iter(self._view_complaints.values())), now)
            pending = self._pending_start  # excluded for not answering a run no assign of hers covered (§4 share.1 (c))
            if pending is not None and pending.group == message.group:
                return self._refuse(pending.group, pending.run, "run_not_in_group", now)
            self._resend.clear()
            self._run = None
            self._set_state(SubjectState.EXCLUDED)
            self._event(SubjectExcluded(now, self.sid, reasons.get(self.public_key, "unknown")))
            return []
        if list(message.members) != sorted(message.members) or len(set(message.members)) != len(message.members):
            raise RemoteProtocolError("bad_shuffle_start", "members not in canonical order")
        if len(message.members) < self._params.k:
            return self._refuse(message.group, message.run, "run_below_k", now)
        if not set(message.members) <= set(self._assigned):
            # Members my assign does not name: a merge whose new assign I have not received yet, or a
            # collector deviating. Ask for my current assign and wait for one that covers the run (a copy of the
            # one I hold is no answer: a broker can replay it); a start that then excludes me is refused below.
            self._pending_start = message
            if self._resend.pending(("fetch", "assign")):
                return []
            return self._send_fetch("assign", now)
        if any(key in message.members for key, _ in message.excluded):
            # A signed statement that excludes a member the run keeps: it would clear the complaints
            # about her view (below) while she stays (SPEC §4 share.1 (d)). Whether a run leaves out a
            # member without a statement she cannot tell (runs and assigns overtake one another); an
            # auditor can (`coutil verify`), and her released group shows it (`group_not_as_run`).
            return self._refuse(message.group, message.run, "run_not_as_stated", now)
        self._pending_start = None
        self._resend.clear()
        self._members = message.members
        self._run = SubjectRun(message.run, message.members, crypto.KxKey.generate(self._rng),
                         crypto.KxKey.generate(self._rng),
                         members_digest(self._announce_digest, message.group, message.run, message.members))
        keys = RunKeys(self._round_id, self.public_key, message.group, message.run,
                       self._run.outer.public, self._run.inner.public, self._view_root(), self._run.members_digest)
        self._run.keys[self.public_key] = (self._run.outer.public, self._run.inner.public)
        # Retained: a fellow member whose subscription to this topic reaches the broker after this
        # publish (another connection, slower to handle its assign) gets it on subscribing, instead
        # of waiting a retransmission timeout for the re-send (SPEC §6).
        out = replace(self._publish_group(keys), retain=self.RETAIN_KEYS)
        self._keys_retained = self.RETAIN_KEYS
        self._resend.arm(("keys", message.run), out, now)
        self._event(SubjectRunStarted(now, self.sid, message.group, message.run))
        return [out, *self._advance(now)]

    def _current_run(self, group: int, run: int) -> SubjectRun:
        if group != self._group:
            raise RemoteProtocolError("wrong_group", "message for another group", ignore=True)
        current = self._run
        if current is None or run > current.number:
            raise RemoteProtocolError("early", f"run {run} not started here yet", ignore=True)
        if run < current.number:
            raise RemoteProtocolError("stale_run", f"run {run} is over", ignore=True)
        return current

    def _view_root(self) -> bytes:
        return self._roster_root if self._roster_root is not None else bytes(32)

    def _check_view(self, run: SubjectRun, message: RunKeys | Vote, now: float) -> None:
        """A member's stated view of the roster and of the run must be mine (SPEC §7.3): otherwise
        one of us was shown another view. Her message is not used, and the verdict reports it
        unless the collector excludes her (then she was the one lying)."""
        other_keys = False
        if isinstance(message, Vote):
            mine = self._run_keys_digest(run)
            if mine is None:  # votes follow every member's onion, built with all keys: mine are late
                raise RemoteProtocolError("early", "vote before every member's run_keys", ignore=True)
            other_keys = message.keys_digest != mine
        if message.roster_root != self._view_root() or message.members_digest != run.members_digest or other_keys:
            self._view_complaints.setdefault(message.sender, "split_view")
            self._event(SplitViewSeen(now, self.sid, message.group, message.run, topics.sid_of(message.sender)))
            raise RemoteProtocolError("view_mismatch", f"{message.TAG} states another roster, membership or keys")

    def _on_run_keys(self, message: RunKeys, digest: bytes, now: float) -> list[Outgoing]:
        run = self._current_run(message.group, message.run)
        if message.sender not in run.members:
            raise RemoteProtocolError("not_a_member", "run_keys from outside this run")
        check_run_keys(message.outer_kx, message.inner_kx)
        self._check_view(run, message, now)
        keep_first(run.keys, message.sender, (message.outer_kx, message.inner_kx),
                    "run_keys already received", "two different run_keys from one member")
        return self._advance(now)

    def _on_submit(self, message: Submit, digest: bytes, now: float) -> list[Outgoing]:
        run = self._current_run(message.group, message.run)
        keep_first(run.submissions, message.sender, message.onion,
                    "submission already received", "two different submissions from one member")
        if run.members[0] == self.public_key:  # her input as mixer 1 (a copy elsewhere is no input of hers)
            run.taken[(0, message.sender)] = self._receiving
        return self._advance(now)

    def _on_batch(self, message: Batch, digest: bytes, now: float) -> list[Outgoing]:
        run = self._current_run(message.group, message.run)
        if not 1 <= message.step <= len(run.members) or run.members[message.step - 1] != message.sender:
            raise RemoteProtocolError("wrong_mixer", f"batch step {message.step} from the wrong member")
        if len(message.items) != len(run.members):
            raise RemoteProtocolError("bad_batch", "batch size differs from the group size")
        g = len(run.members)
        held = run.batches.get(message.step)
        if message.step == g and held is not None and held != message.items and (g, message.sender) in run.taken \
                and run.second_final is None and not run.revealed and not run.blamed:
            # The final mixer signed two final batches: the one she took and this one, which the collector relays
            # (a broker showed it one and the members the other, found by an attacker: the whole round stalled).
            # Both signed: her proof of the mixer's equivocation, which her blame carries (SPEC §8.4).
            run.second_final = self._receiving
            self.rejections.append(Rejection(now, self._group_control_topic() or "", "equivocation",
                                             "two different final batches from the final mixer", False,
                                             message.sender, message.TAG))
            return self._start_blame(run, now)
        keep_first(run.batches, message.step, message.items,
                    "batch already received", "two different batches for one step")
        if message.step in (run.members.index(self.public_key), len(run.members)):  # her input, the final batch
            run.taken[(message.step, message.sender)] = self._receiving
        return self._advance(now)

    def _on_vote(self, message: Vote, digest: bytes, now: float) -> list[Outgoing]:
        run = self._current_run(message.group, message.run)
        self._check_view(run, message, now)
        keep_first(run.votes, message.sender, message,
                    "vote already received", "two different votes from one member")
        if not message.go and run.no_go_vote is None:
            run.no_go_vote = self._receiving
        if message.sender == run.members[-1]:
            run.final_mixer_vote = self._receiving
        return self._advance(now)

    def _on_reveal_open(self, message: RevealOpen, digest: bytes, now: float) -> list[Outgoing]:
        run = self._current_run(message.group, message.run)
        if run.final_digest is not None and message.final_digest != run.final_digest:
            raise RemoteProtocolError("bad_reveal_open", "reveal_open names another final batch")
        # Before her final batch: kept with the digest it names, compared when the batch comes (below).
        run.reveal_open = True
        run.reveal_open_digest = message.final_digest
        return self._advance(now)

    def _on_blame(self, message: Blame, digest: bytes, now: float) -> list[Outgoing]:
        # Recorded only: she blames when she sees a no-go vote (or finds a fault herself), never
        # because someone else blamed. An unjustified blame does not stop her (SPEC §4 share.6).
        run = self._current_run(message.group, message.run)
        if message.sender not in run.blames:
            run.blames[message.sender] = message
        return []

    def _on_group_done(self, message: GroupDone, digest: bytes, now: float) -> list[Outgoing]:
        if message.group != self._group:
            raise RemoteProtocolError("wrong_group", "group_done of another group", ignore=True)
        if self._run is not None and message.run != self._run.number:
            raise RemoteProtocolError("stale_run", "group_done of another run", ignore=True)
        self._resend.clear()
        if self.state == SubjectState.SHARING:
            self._set_state(SubjectState.AWAIT_RELEASE)
            assert self._params is not None
            self._release_wait_until = now + self._params.step_timeout
        return []

    def _advance(self, now: float) -> list[Outgoing]:
        """Take every shuffle step that the received messages now allow."""
        run = self._run
        if run is None or self._round_id is None or self._group is None or self._params is None:
            return []
        self._resend.news(now)  # called on every fresh message of the run: it is moving (see retry.py)
        out: list[Outgoing] = []
        members = run.members
        g = len(members)
        me = self.public_key
        position = members.index(me)
        rid, group = self._round_id, self._group
        # 1. All keys known: build and submit my onion, once she holds her roster's root from its retained
        # topic (SPEC §4 group): a roster shown on her inbox alone may hold identities of the collector's
        # beside her (a run of her own, "split roster"); broadcast, it would be shown to everyone.
        if run.my_sealed is None and len(run.keys) == g and self._bulletin_root != self._roster_root:
            out.extend(self._ask_for_roster(now))
        elif run.my_sealed is None and len(run.keys) == g:
            record = crypto.encode_record(self._confidential)
            innermost = crypto.seal(self._params.collector_kx, record, collector_aad(rid), self._rng)
            inner_publics = [run.keys[m][1] for m in members]
            run.my_sealed = crypto.seal_to_all(inner_publics, innermost, inner_aad(rid, group, run.number), self._rng)
            outer_publics = [run.keys[m][0] for m in members]
            onion = crypto.build_onion(
                run.my_sealed, outer_publics, lambda j: outer_aad(rid, group, run.number, j), self._rng
            )
            run.my_salt = self._rng.bytes(32)
            run.submissions[me] = onion
            # To the first mixer alone (the collector reads it too): nobody else needs it.
            msg = self._publish_to(members[0], Submit(rid, me, group, run.number, onion,
                                                      inner_commitment(run.my_sealed, run.my_salt)))
            run.my_submit = msg
            if position == 0:
                run.taken[(0, me)] = msg.payload  # she mixes it with the others: her blame carries it with theirs
            self._resend.arm(("submit", run.number), msg, now)
            out.append(msg)
        # 2. My turn to mix: peel my layer from the previous step's items and permute.
        step = position + 1
        if run.my_sealed is not None and step not in run.batches and not run.blamed:
            if step == 1:
                inputs: tuple[bytes, ...] | None = (
                    tuple(run.submissions[m] for m in members) if len(run.submissions) == g else None
                )
            else:
                inputs = run.batches.get(step - 1)
            if inputs is not None:
                out.extend(self._mix(run, step, inputs, now))
        # The final batch (everyone gets it) acknowledges my keys, submission and batch; the next
        # mixer's batch, if it reaches me, my batch. The final batch itself is re-sent until
        # reveal_open: the collector needs it to open the records.
        # reveal_open acknowledges the final batch: the collector holds it and every member voted go on it.
        # (A reveal_open only once it names her final batch: an early one naming another stops nothing.)
        opened_on_mine = run.reveal_open and run.final_digest is not None and run.reveal_open_digest == run.final_digest
        if (step < g and (step + 1 in run.batches or g in run.batches)) or opened_on_mine:
            self._resend.cancel(("batch", run.number))
        # Any batch acknowledges my keys and submission: mixer 1 peeled every member's submission,
        # and every member built hers with all members' keys. Mixer 1 learns it from the submissions.
        if run.batches or (position == 0 and len(run.submissions) == g):
            self._resend.cancel(("submit", run.number))
            self._resend.cancel(("keys", run.number))
            out.extend(self._clear_retained_keys())
        # 3. Final batch: vote.
        final = run.batches.get(g)
        if final is not None and run.my_vote is None and run.my_sealed is not None and not run.blamed:
            run.final_digest = batch_digest(final)
            if run.reveal_open and run.reveal_open_digest != run.final_digest:
                # A reveal_open that came first named another final batch (SPEC §7.2): not a go to reveal.
                run.reveal_open = False
                self.rejections.append(Rejection(now, self._group_control_topic() or "", "bad_reveal_open",
                                                 "an earlier reveal_open named another final batch", False,
                                                 self._collector_key, "reveal_open"))
            go = final.count(run.my_sealed) == 1 and len(set(final)) == g
            run.my_vote = go
            vote = self._vote(run, go, run.final_digest)
            run.votes[me] = vote
            msg = self._publish_group(vote)
            self._resend.arm(("vote", run.number), msg, now)
            out.append(msg)
            if not run.votes[me].go:  # (the vote as published: a strategy may have turned it)
                run.no_go_vote = run.no_go_vote or msg.payload
            if not go:
                self._event(NoGoVoted(now, self.sid, group, run.number))
        # 4. A no-go anywhere, or the final mixer's vote on another final batch than hers: blame. All go and
        # reveal_open: reveal my inner secret.
        if (any(not v.go for v in run.votes.values()) or (run.final_mixer_contradicted() and not run.revealed)) \
                and not run.blamed:
            out.extend(self._start_blame(run, now))
        elif not run.revealed and not run.blamed and run.my_vote and len(run.votes) == g \
                and all(v.go and v.final_digest == run.final_digest for v in run.votes.values()):
            if not run.reveal_open:
                # Every member voted go: the group waits at the reveal barrier, for the other groups,
                # and my vote and final batch wait with it; re-sent only at the cap meanwhile.
                self._resend.relax(("vote", run.number))
                self._resend.relax(("batch", run.number))
                return out
            run.revealed = True
            self._revealed = (group, run.number)
            run.taken.clear()  # no blame follows her reveal: the envelopes it would carry are not needed
            # To the collector alone (her up topic): only it opens anything, and no member needs it.
            msg = self._emit(topics.subject_up(rid, me), Reveal(rid, me, group, run.number, run.inner.secret))
            self._resend.cancel(("vote", run.number))
            self._resend.arm(("reveal", run.number), msg, now)
            out.append(msg)
        return out

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        assert self._round_id is not None and self._group is not None
        aad = outer_aad(self._round_id, self._group, run.number, step)
        try:
            peeled = [crypto.peel(run.outer, item, aad) for item in inputs]
        except crypto.CryptoError:
            # An item I cannot peel: halt the run with a no-go; blame will show whose onion it was.
            self._event(UnpeelableItem(now, self.sid, self._group, run.number, step))
            return self._halt(run, now)
        order = list(range(len(peeled)))
        shuffle_in_place(order, self._rng)
        run.my_permutation = tuple(order)
        items = tuple(peeled[i] for i in run.my_permutation)
        run.batches[step] = items
        batch = Batch(self._round_id, self.public_key, self._group, run.number, step, items)
        # To the next mixer alone; the final batch to everyone (all vote on it). O(k) bytes per member.
        msg = self._publish_to(run.members[step], batch) if step < len(run.members) else self._publish_group(batch)
        run.my_batch = msg
        self._resend.arm(("batch", run.number), msg, now)
        return [msg]

    def _halt(self, run: SubjectRun, now: float) -> list[Outgoing]:
        """Halt the run before its final batch: a no-go vote on `NO_BATCH`, and her blame."""
        run.my_vote = False
        vote = self._vote(run, False, NO_BATCH)
        run.votes[self.public_key] = vote
        msg = self._publish_group(vote)
        run.no_go_vote = run.no_go_vote or msg.payload
        self._resend.arm(("vote", run.number), msg, now)
        return [msg, *self._start_blame(run, now)]

    def _vote(self, run: SubjectRun, go: bool, final_digest: bytes) -> Vote:
        assert self._round_id is not None and self._group is not None
        keys = self._run_keys_digest(run)
        assert keys is not None  # she votes once her onion is built, which took every member's keys
        return Vote(self._round_id, self.public_key, self._group, run.number, go, final_digest, self._view_root(),
                    run.members_digest, keys)

    def _run_keys_digest(self, run: SubjectRun) -> bytes | None:
        """`keys_digest` over the run's keys she holds; None until she holds every member's."""
        if run.keys_digest is None and len(run.keys) == len(run.members):
            assert self._round_id is not None and self._group is not None
            run.keys_digest = keys_digest(self._round_id, self._group, run.number, run.members, run.keys)
        return run.keys_digest

    def _start_blame(self, run: SubjectRun, now: float) -> list[Outgoing]:
        assert self._round_id is not None and self._group is not None
        run.blamed = True
        self._resend.cancel_where(lambda key: isinstance(key, tuple) and key[0] in ("batch", "vote", "reveal"))
        # She blames on a no-go vote she took, on her own, on the final mixer's two final batches (no vote), or on
        # the final mixer's vote naming another final batch than the one she took.
        answered = run.no_go_vote if run.no_go_vote is not None else \
            b"" if run.second_final is not None else run.final_mixer_vote
        assert answered is not None
        mixed = run.batches.get(run.members.index(self.public_key) + 1) if run.my_batch is not None else None
        blame = Blame(self._round_id, self.public_key, self._group, run.number, run.outer.secret, run.my_permutation,
                      run.my_salt, run.taken_envelopes(),
                      NO_BATCH if mixed is None else batch_digest(mixed), answered)
        msg = self._publish_group(blame)
        self._resend.arm(("blame", run.number), msg, now)
        self._event(BlameSent(now, self.sid, self._group, run.number))
        # Her submission and batch again, the same bytes where they went: re-execution needs every member's
        # submission and every batch a blame states, and the collector may lack hers (lost, or hidden by a
        # broker); a member whose own is still missing at the deadline is the one excluded (`silent`), never
        # the no-go voters (SPEC §4 share.6).
        out = [msg]
        for key, again in (("blame_submit", run.my_submit), ("blame_batch", run.my_batch)):
            if again is not None:
                self._resend.arm((key, run.number), again, now)
                out.append(again)
        return out
