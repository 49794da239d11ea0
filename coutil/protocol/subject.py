"""The subject's state machine (sans-IO).

A subject holds her own record (QIs and confidential values) and a fresh per-round identity. She
registers her QIs, checks her roster entry and group, takes part in her group's accountable
shuffle, audits the release and publishes a signed verdict. Top-level states and the messages each
accepts are listed in `TRANSITIONS` (protocol/SPEC.md draws them). Her state and her part in the
shuffle runs are in `SubjectCore` (`coutil.protocol.subject_core`), a run's sub-steps in `SubjectRun`.
Any message not accepted in the current state is recorded as ignored.
"""

from __future__ import annotations

import hashlib

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, merkle, topics
from coutil.protocol.config import MAX_RANDOM_RECORDS, takes_part_under
from coutil.protocol.dispatch import Handler, on, table
from coutil.protocol.equivocation import stated_roster_root
from coutil.protocol.events import (
    SubjectEvent,
    SubjectGrouped,
    SubjectIncompatible,
    SubjectRegrouped,
    SubjectSampledOut,
    VerdictRecorded,
)
from coutil.protocol.messages import (
    Announce,
    Assign,
    Batch,
    Blame,
    GroupDone,
    Message,
    Register,
    RegisterAck,
    Release,
    RevealOpen,
    Roster,
    RoundParams,
    RunKeys,
    ShuffleStart,
    Submit,
    Verdict,
    VerdictAck,
    Vote,
)
from coutil.protocol.node import Outgoing, Rejection
from coutil.protocol.states import SubjectState
from coutil.protocol.subject_audit import audit_release
from coutil.protocol.subject_core import SubjectCore

__all__ = ["STATE_EDGES", "TRANSITIONS", "SubjectNode", "SubjectState"]

#: Domain separation of the subject's derivation of her roster salt (`SubjectNode._roster_salt`).
ROSTER_SALT_TAG = b"coutil/roster-salt/v1\x00"

#: Where each state may lead (for the spec's diagram; checked by the tests against the code paths).
STATE_EDGES: dict[SubjectState, tuple[SubjectState, ...]] = {
    SubjectState.AWAIT_ANNOUNCE: (SubjectState.REGISTERING, SubjectState.INCOMPATIBLE, SubjectState.SAMPLED_OUT),
    SubjectState.REGISTERING: (SubjectState.REGISTERED, SubjectState.SHARING, SubjectState.AWAIT_RELEASE,
                               SubjectState.VERDICT_SENT, SubjectState.EXCLUDED),
    SubjectState.REGISTERED: (SubjectState.SHARING, SubjectState.AWAIT_RELEASE, SubjectState.VERDICT_SENT,
                              SubjectState.EXCLUDED),
    SubjectState.SHARING: (SubjectState.AWAIT_RELEASE, SubjectState.VERDICT_SENT, SubjectState.EXCLUDED),
    SubjectState.AWAIT_RELEASE: (SubjectState.VERDICT_SENT,),
    SubjectState.VERDICT_SENT: (SubjectState.DONE,),
    SubjectState.EXCLUDED: (SubjectState.DONE,),
    SubjectState.DONE: (),
    SubjectState.INCOMPATIBLE: (),
    SubjectState.SAMPLED_OUT: (),
}


class SubjectNode(SubjectCore):
    """One subject taking part in one round. Implements `coutil.protocol.node.Node`."""

    # ------------------------------------------------------------------ Node interface
    @property
    def finished(self) -> bool:
        return self.state in (SubjectState.DONE, SubjectState.INCOMPATIBLE, SubjectState.SAMPLED_OUT)

    @property
    def group(self) -> int | None:
        """Her group's label once assigned (None before): what she needs to re-run her audit."""
        return self._group

    @property
    def round_id(self) -> bytes | None:
        """The round she joined (None before the announce)."""
        return self._round_id

    def subscriptions(self) -> frozenset[str]:
        # Drivers ask after every call: recomputed only when what it depends on changed.
        key = (self.state, self._round_id, self._group, self._members)
        if key != self._subscriptions_key:
            self._subscriptions_key = key
            self._subscriptions = self._compute_subscriptions()
        return self._subscriptions

    def _compute_subscriptions(self) -> frozenset[str]:
        # The announce topic only while waiting for a round: the collector re-publishes the announce
        # during registration, which subjects already registered need not hear again.
        subs = {topics.ANNOUNCE} if self.state == SubjectState.AWAIT_ANNOUNCE else set()
        if self._round_id is not None and self.state != SubjectState.DONE:
            rid = self._round_id
            subs.update({topics.inbox(rid, self.public_key), topics.roster(rid), topics.release(rid)})
            if self._group is not None and self.state == SubjectState.SHARING:
                subs.add(topics.group_control(rid, self._group))
                subs.add(topics.to_subject(rid, self.public_key))
                for member in self._members:
                    if member != self.public_key:
                        subs.add(self._member_topic(member))
        return frozenset(subs)

    def start(self, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        return []

    def next_timer(self) -> float | None:
        candidates = [t for t in (self._resend.next_due(), self._release_wait_until) if t is not None]
        return min(candidates) if candidates else None

    def on_timer(self, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        out = self._resend.due(now)
        if self._release_wait_until is not None and now >= self._release_wait_until:
            # The release (retained) did not arrive: ask the collector for it, and keep asking.
            self._release_wait_until = None
            out.extend(self._send_fetch("release", now))
        return out

    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        """Her connection to the broker went down or came back (see `coutil.protocol.node.TransportAware`).

        She has no deadline to suspend: she never gives up on her group or on the release, and keeps
        re-sending. Back up, everything she is waiting on an answer for leaves at once (what she sent
        into the outage may be lost: a restarted broker forgets), and so does a due release fetch.
        """
        self._now = self._resend.now = now
        if not up:
            return []
        self._resend.expedite(now)
        return self.on_timer(now)

    def verdict_evidence(self) -> tuple[bytes, bytes] | None:
        """Her signed verdict and the collector's signed ``verdict_ack`` of it (exact envelopes), once
        acknowledged: what she hands an auditor if the published transcript lacks her verdict
        (`coutil.round.evidence`). None before."""
        if self._verdict_envelope is None or self._verdict_ack_envelope is None:
            return None
        return self._verdict_envelope, self._verdict_ack_envelope

    def equivocation_evidence(self) -> tuple[bytes, bytes, bytes] | None:
        """Once her round's collector signed two different roster roots to her (two rosters, or a roster and
        an assign or a release stating another root): the announce she took part on and both messages (exact
        envelopes), a proof that the collector equivocated which any auditor checks without trusting her
        (`coutil.protocol.equivocation`, `coutil verify --evidence`). None otherwise."""
        return self._equivocation

    def roster_receipt(self) -> tuple[bytes, bytes] | None:
        """The announce she took part on and the first roster of that round she received, exact
        envelopes: what she brings an auditor after any round, whatever happened, so that receipts of subjects
        shown different roots convict the collector even when none of them saw both
        (`coutil.protocol.equivocation.RosterReceipt`). None before she holds one."""
        if self._receipt_envelope is None:
            return None
        return self._announce_envelope, self._receipt_envelope

    @property
    def resends(self) -> dict[str, int]:
        """Messages this node re-sent so far, by kind (``assign``, ``keys``, ``submit``, ...)."""
        return dict(self._resend.resent)

    def drain_events(self) -> list[SubjectEvent]:
        events, self._events = self._events, []
        return events

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        if not payload and topic == topics.ANNOUNCE:
            # The collector withdrew its announce (the round is over): nothing to join.
            self.rejections.append(Rejection(now, topic, "withdrawn", "announce withdrawn", True))
            return []
        if not payload and topics.is_subject_group(topic):
            return []  # a fellow member cleared her retained run_keys (SPEC §6): not a message
        sender: bytes | None = None
        kind = ""
        try:
            # Decoding and verifying is a pure function of the bytes: the nodes of one process share it.
            decoded = self._caches.decode(payload, self._limits)
            message = decoded.message
            sender, kind = message.sender, message.TAG
            if self._of_another_round(message):
                # SPEC §7.2 step 7, before any check of sender, topic or state: a replay of another
                # round (its announce, roster, member messages, release) is ignored as such.
                raise RemoteProtocolError("wrong_round", "message of another round", ignore=True)
            root = stated_roster_root(message)
            if root is not None and self._round_id is not None and sender == self._collector_key:
                # Of her round (checked above), in any state, taken or not. Before she joins a round a roster of
                # another round would pass the check above: it must not take the slot of her round's first root.
                self._note_root(root, payload, bulletin=not isinstance(message, Assign),
                                roster=isinstance(message, Roster))
            elif isinstance(message, ShuffleStart) and self._round_id is not None and sender == self._collector_key:
                self._note_start(message, payload)
            handler = TRANSITIONS[self.state].get(type(message))
            if handler is None:
                raise RemoteProtocolError("unexpected", f"{message.TAG} in state {self.state}", ignore=True)
            self._check_origin(message, topic)
            if sender == self.public_key:
                # Her own message echoed back (the first mixer's submission to herself, or a relay).
                raise RemoteProtocolError("own_message", f"{message.TAG} sent by me", ignore=True)
            self._receiving, self._receiving_topic = payload, topic
            return handler(self, message, decoded.digest, now)
        except RemoteProtocolError as exc:
            self.rejections.append(Rejection(now, topic, exc.reason, exc.detail, exc.ignore, sender, kind))
            if exc.reason == "duplicate" and kind in ("run_keys", "submit", "batch", "vote"):
                # A fellow member re-sent: she is stuck, perhaps without a message of mine (see retry.py).
                return self._resend.resend_now(now)
            return []

    # ------------------------------------------------------------------ helpers
    def _note_root(self, root: bytes, envelope: bytes, *, bulletin: bool, roster: bool) -> None:
        """A roster root her round's collector signed (in a roster, an assign, a release: `stated_roster_root`;
        ``bulletin``: not an assign). The first is kept with its envelope; one with another root is, with it and
        the announce she took part on, her proof that the collector equivocated (an honest collector has one
        roster per round, SPEC §4 group): `equivocation_evidence`. The first roster is her receipt
        (`roster_receipt`: nothing of her group, a few hundred bytes). A bulletin replaces a first assign of the
        same root: the roster envelope is shared by every subject a process hosts, an assign (a few kB) is hers
        alone, and an assign arrives first as often as not."""
        if roster and self._receipt_envelope is None:
            self._receipt_envelope = envelope
        if self._first_root is None or (root == self._first_root and bulletin and not self._root_is_bulletin):
            self._root_envelope, self._first_root, self._root_is_bulletin = envelope, root, bulletin
        elif self._equivocation is None and root != self._first_root:
            self._equivocation = (self._announce_envelope, self._root_envelope, envelope)

    def _note_start(self, start: ShuffleStart, envelope: bytes) -> None:
        """A shuffle_start her round's collector signed that names her (a member, or excluded). The latest is kept
        with its envelope; a different one for the same run completes a proof of equivocation: an honest collector
        signs one per run. It catches a run shown to her alone (she answers it, and the collector excludes her
        `blamed_equivocation` for answering a run it never started, with her answer as the proof an auditor
        replays) once the real one, which excludes her, reaches her (found by an attacker on the auditor)."""
        me = self.public_key
        if me not in start.members and all(key != me for key, _ in start.excluded):
            return
        kept = self._start_kept
        if kept is None or kept[0] != start.group or start.run > kept[1]:
            self._start_kept = (start.group, start.run, envelope)  # (a re-sent older run does not replace it)
        elif start.run == kept[1] and kept[2] != envelope and self._equivocation is None:
            self._equivocation = (self._announce_envelope, kept[2], envelope)

    def _of_another_round(self, message: Message) -> bool:
        """The message names another round than the one she joined (none yet: any round may be hers)."""
        return self._round_id is not None and message.round_id != self._round_id

    # ------------------------------------------------------------------ registration
    def _on_announce(self, message: Announce, digest: bytes, now: float) -> list[Outgoing]:
        params = message.params
        if len(params.qi_names) != len(self._qi) or len(params.confidential_names) != len(self._confidential):
            self._set_state(SubjectState.INCOMPATIBLE)
            self._event(SubjectIncompatible(now, "attribute_count"))
            return []
        if params.random_records > MAX_RANDOM_RECORDS or not 0.0 < params.alpha < 1.0:
            # An audit she cannot (or should not) run: she does not take part.
            self._set_state(SubjectState.INCOMPATIBLE)
            self._event(SubjectIncompatible(now, "audit_parameters"))
            return []
        if params.k < self._min_k:
            # Her own floor (a collector may show her alone another k than the others: a split announce).
            self._set_state(SubjectState.INCOMPATIBLE)
            self._event(SubjectIncompatible(now, "k_below_floor"))
            return []
        if not takes_part_under(params.manifest):
            # A collector that does not commit to publishing its run evidence, signed, could frame her as a deviator
            # with nothing for an auditor to check (SPEC §4 announce, §8.5): she does not take part.
            self._set_state(SubjectState.INCOMPATIBLE)
            self._event(SubjectIncompatible(now, "no_transcript_commitment"))
            return []
        if crypto.is_small_order(params.collector_kx):
            # Nothing could be sealed to it (SPEC §8): she does not take part.
            self._set_state(SubjectState.INCOMPATIBLE)
            self._event(SubjectIncompatible(now, "collector_key"))
            return []
        if now > params.register_deadline:
            raise RemoteProtocolError("late", "announce seen after its registration deadline", ignore=True)
        if params.method == "safepub" and not self._sampled(params):
            # Her own coin, never shown to anyone: the collector cannot tell her from a non-respondent.
            self._set_state(SubjectState.SAMPLED_OUT)
            self._event(SubjectSampledOut(now, self.sid))
            return []
        self._round_id = message.round_id
        self._params = params
        self._announce_digest = digest
        self._announce_envelope = self._receiving
        self._resend.limit_interval(params.step_timeout / 4)
        register = Register(message.round_id, self.public_key, self._qi, self._roster_salt(message.round_id))
        data = self._caches.encode(register, self._identity)
        self._register_digest = codec.payload_digest_of(data)
        out = Outgoing(topics.subject_up(message.round_id, self.public_key), data)
        self._resend.arm("register", out, now)
        self._set_state(SubjectState.REGISTERING)
        return [out]

    def _roster_salt(self, round_id: bytes) -> bytes:
        """The salt of her QI commitment (SPEC §8.3): any 32 bytes others cannot guess; derived from her
        round key's secret seed so that it needs no state and no draw from her random source."""
        return hashlib.sha256(ROSTER_SALT_TAG + self._identity.seed + bytes(round_id)).digest()

    def _sampled(self, params: RoundParams) -> bool:
        """A SafePub round's sampling: take part with the announced probability beta (drawn here)."""
        try:
            beta = float(dict(params.manifest).get("safepub_beta", "1.0"))
        except ValueError:
            beta = 0.0  # an announce she cannot read: she does not take part
        scale = 2**53
        return self._rng.below(scale) < beta * scale

    def _on_register_ack(self, message: RegisterAck, digest: bytes, now: float) -> list[Outgoing]:
        if message.subject != self.public_key or message.register_digest != self._register_digest:
            raise RemoteProtocolError("bad_ack", "register_ack for another registration")
        self._resend.cancel("register")
        self._set_state(SubjectState.REGISTERED)
        return []

    def _on_roster(self, message: Roster, digest: bytes, now: float) -> list[Outgoing]:
        if self._receiving_topic == topics.roster(message.round_id):
            return self._on_roster_bulletin(message, digest, now)
        # On her inbox (an answer to her fetch): a hint, enough to check her assign; her reveal waits for
        # the same root on the bulletin.
        if self._roster_root is not None and self._roster_root != message.merkle_root:
            self._complain("split_view")  # two signed rosters of one round, whatever the topics
            raise RemoteProtocolError("roster_changed", "a second, different roster for this round")
        return self._take_roster(message, now)

    def _on_roster_bulletin(self, message: Roster, digest: bytes, now: float) -> list[Outgoing]:
        """The roster broadcast to every subscriber (retained): a collector that does not run the broker
        cannot show her another one there without showing it to everyone (SPEC §7.3 roster)."""
        if self._bulletin_root is not None and self._bulletin_root != message.merkle_root:
            # Two signed rosters broadcast for one round: the collector equivocates.
            self._complain("split_view")
            raise RemoteProtocolError("roster_changed", "a second, different roster on the bulletin")
        first = self._bulletin_root is None
        self._bulletin_root = message.merkle_root
        if self._roster_root is not None and self._roster_root != message.merkle_root:
            # The roster shown on her inbox is not the one shown to everyone: a roster of her own (SPEC §3
            # "split roster"). She takes no part, whatever she was assigned, and complains.
            self._resend.cancel(("fetch", "roster"))
            return self._refuse(-1 if self._group is None else self._group,
                                -1 if self._run is None else self._run.number, "roster_mismatch", now)
        if self._roster_root is None:
            return self._take_roster(message, now)
        self._resend.cancel(("fetch", "roster"))
        # The same root she held: a reveal that waited for it may go now.
        return self._advance(now) if first and self.state == SubjectState.SHARING else []

    def _take_roster(self, message: Roster, now: float) -> list[Outgoing]:
        self._roster_root = message.merkle_root
        self._roster_size = message.n
        self._roster_groups = message.n_groups
        if self._bulletin_root == message.merkle_root:
            self._resend.cancel(("fetch", "roster"))  # (on her inbox only: she asks on until it is broadcast)
        pending, self._pending_assign = self._pending_assign, None
        if pending is not None:
            return self._on_assign(pending[0], pending[1], now)
        return []

    def _on_assign(self, message: Assign, digest: bytes, now: float) -> list[Outgoing]:
        assert self._params is not None
        if message.subject != self.public_key:
            raise RemoteProtocolError("bad_assign", "assign for another subject")
        if self._roster_root is not None and message.merkle_root != self._roster_root:
            raise RemoteProtocolError("root_mismatch", "assign's root differs from the published roster")
        if self._roster_size is None:
            # The proof can only be checked against the published roster (its size and root). Its
            # retained delivery may have been lost: keep this assign and ask the collector for it.
            self._pending_assign = (message, digest)
            return self._ask_for_roster(now)
        commitment = merkle.qi_commitment(self._roster_salt(message.round_id), self._qi)
        leaf = merkle.roster_leaf(self.public_key, commitment)
        if not merkle.verify_inclusion(leaf, message.leaf_index, self._roster_size, message.proof,
                                       message.merkle_root):
            raise RemoteProtocolError("bad_inclusion", "my registration is not in the roster as sent")
        if self.public_key not in message.members:
            raise RemoteProtocolError("bad_assign", "I am not a member of my own group")
        if list(message.members) != sorted(message.members) or len(set(message.members)) != len(message.members):
            raise RemoteProtocolError("bad_assign", "members not in canonical (sorted, distinct) order")
        if len(message.members) < self._params.k:
            raise RemoteProtocolError("bad_assign", "group smaller than k")
        fellows = [m for m in message.members if m != self.public_key]
        if len(message.fellows) != len(fellows) or not all(
                merkle.verify_inclusion(merkle.roster_leaf(key, entry[1]), entry[0], self._roster_size, entry[2],
                                        message.merkle_root)
                for key, entry in zip(fellows, message.fellows, strict=False)):
            # Identities that are not on the roster she was shown: a run of her own with the collector's
            # puppets (split-assign, SPEC §3). She takes no part in any run of this group, and complains in
            # her verdict on the release (signed, public), as after any refused run.
            if self.state == SubjectState.AWAIT_RELEASE or self._revealed is not None:
                raise RemoteProtocolError("fellow_not_on_roster", "a fellow member's roster entry does not verify")
            self._resend.cancel("register")
            self._resend.cancel(("fetch", "assign"))
            self._group = message.group
            return self._refuse(message.group, -1, "fellow_not_on_roster", now)
        # Assigns are re-sent until acknowledged, so an old copy can arrive after newer news: one for
        # my current group (whose runs' shuffle_start now define the members), or one for a group I
        # have left (a merged group is dissolved for good).
        if message.group == self._group and message.members == self._assigned:
            # Also while she holds a run it does not cover (`_pending_start`): a copy of the assign she holds is no
            # answer to her fetch, whenever it comes. A broker replays it at will: taken for the collector's answer
            # a re-send interval after her fetch, with the merge's new assign held back a few seconds (less than a
            # step), it had every target member of a merge refuse (`run_not_in_group`), be excluded `silent`, and
            # the merges it set off emptied the whole round (`answer-old-assign`, found by an attacker). She
            # fetches on; the run she waits for is refused only when a signed start excludes her (`_on_shuffle_start`).
            raise RemoteProtocolError("duplicate", "assign for my current group already applied", ignore=True)
        if message.group == self._group and (set(message.members) < set(self._assigned)
                                             or (message.group, message.members) in self._assigns_taken):
            # An assign she took before, or one with a subset of her members (a merge only adds members to a
            # group, beside those its runs excluded): re-delivered from before the last merge. Taking it
            # would shrink her view and exclude the members moved in (a replay, found by an attacker).
            raise RemoteProtocolError("stale_run", "assign of my group from before a merge", ignore=True)
        if message.group in self._left_groups:
            raise RemoteProtocolError("stale_run", f"assign for group {message.group}, which I left", ignore=True)
        if self.state == SubjectState.AWAIT_RELEASE and self._revealed is None:
            raise RemoteProtocolError("unexpected", "assign while awaiting the release", ignore=True)
        if self._revealed is not None:
            # A new group after my inner secret went out: a second opening of overlapping members.
            return self._refuse(message.group, -1, "regroup_after_reveal", now)
        self._resend.cancel("register")
        self._resend.cancel(("fetch", "assign"))
        if self._group is not None:
            self._event(SubjectRegrouped(now, self.sid, message.group))
            if message.group != self._group:
                self._left_groups.add(self._group)
                self._run = None
            self._resend.clear()
        self._group = message.group
        self._members = self._assigned = message.members
        self._assigns_taken.add((message.group, message.members))
        self._set_state(SubjectState.SHARING)
        self._event(SubjectGrouped(now, self.sid, message.group, len(message.members)))
        pending, self._pending_start = self._pending_start, None
        if pending is not None and pending.group == message.group:
            return self._on_shuffle_start(pending, b"", now)
        return []

    # ------------------------------------------------------------------ release and audit
    def _on_release(self, message: Release, digest: bytes, now: float) -> list[Outgoing]:
        assert self._params is not None and self._round_id is not None
        if self._group is None and not self.complaints:
            raise RemoteProtocolError("early", "release before my group assignment", ignore=True)
        self._resend.clear()
        self._release_wait_until = None
        result = None
        if self._group is not None:
            result = audit_release(
                message,
                digest,
                qi=self._qi,
                confidential=self._confidential,
                group=self._group,
                params=self._params,
                caches=self._caches,
            )
            self.audit = result
        # (No group: she refused before any assign, a roster of her own; her complaint is her verdict.)
        if self._pending_start is not None:
            # A run of her group that her assign never covered, still waiting for its assign (SPEC §4 share.1 (c)).
            self._complain("run_not_in_group")
        # The release must be of the roster she saw (SPEC §10); protocol complaints come first.
        if message.roster_root != self._roster_root or not self._consistent_with_roster(message, digest):
            self._complain("roster_mismatch")
        if self._revealed is not None and self._run is not None and self._group is not None \
                and self._caches.group_shape(message, digest).sizes.get(self._group, 0) > len(self._run.members):
            # Her group holds records of more members than the run she revealed in: records of
            # subjects who were never in it (one kept apart for a run of her own, SPEC §3).
            self._complain("group_not_as_run")
        complaints = [*self.complaints, *self._view_complaints.values()]
        accept = result is not None and result.accept and not complaints
        reason = complaints[0] if complaints or result is None else result.reason
        verdict = Verdict(self._round_id, self.public_key, accept, reason, digest, self._view_root())
        data = self._caches.encode(verdict, self._identity)
        self._verdict_digest = codec.payload_digest_of(data)
        self._verdict_envelope = data
        self.verdict = verdict
        out = Outgoing(topics.subject_up(self._round_id, self.public_key), data)
        self._resend.arm("verdict", out, now)
        self._set_state(SubjectState.VERDICT_SENT)
        self._event(VerdictRecorded(now, self.sid, accept, reason))
        return [out, *self._clear_retained_keys()]

    def _consistent_with_roster(self, release: Release, digest: bytes) -> bool:
        """What she can check of the release against the roster: no more rows than subjects, group
        numbers distinct and below the roster's count (`GroupShape.fits`)."""
        if self._roster_size is None:
            return False
        return self._caches.group_shape(release, digest).fits(self._roster_size, self._roster_groups)

    def _on_release_excluded(self, message: Release, digest: bytes, now: float) -> list[Outgoing]:
        self._set_state(SubjectState.DONE)
        return self._clear_retained_keys()

    def _on_verdict_ack(self, message: VerdictAck, digest: bytes, now: float) -> list[Outgoing]:
        if message.subject != self.public_key or message.verdict_digest != self._verdict_digest:
            raise RemoteProtocolError("bad_ack", "verdict_ack for another verdict")
        self._verdict_ack_envelope = self._receiving
        self._resend.clear()
        self._set_state(SubjectState.DONE)
        return []


#: state -> message class -> handler: the single source of dispatch and of the spec's table. A message
#: whose class the current state does not list is recorded as IGNORE ``unexpected``.
TRANSITIONS: dict[SubjectState, dict[type[Message], Handler[SubjectNode, bytes]]] = {
    SubjectState.AWAIT_ANNOUNCE: table(on(Announce, SubjectNode._on_announce)),
    # A release before any assign: her verdict, if she holds a complaint (two rosters), else IGNORE `early`.
    SubjectState.REGISTERING: table(
        on(RegisterAck, SubjectNode._on_register_ack),
        on(Roster, SubjectNode._on_roster),
        on(Assign, SubjectNode._on_assign),
        on(ShuffleStart, SubjectNode._on_suppressed),
        on(Release, SubjectNode._on_release),
    ),
    SubjectState.REGISTERED: table(
        on(Roster, SubjectNode._on_roster),
        on(Assign, SubjectNode._on_assign),
        on(ShuffleStart, SubjectNode._on_suppressed),
        on(Release, SubjectNode._on_release),
    ),
    SubjectState.SHARING: table(
        on(Roster, SubjectNode._on_roster),
        on(Assign, SubjectNode._on_assign),
        on(ShuffleStart, SubjectNode._on_shuffle_start),
        on(RunKeys, SubjectNode._on_run_keys),
        on(Submit, SubjectNode._on_submit),
        on(Batch, SubjectNode._on_batch),
        on(Vote, SubjectNode._on_vote),
        on(RevealOpen, SubjectNode._on_reveal_open),
        on(Blame, SubjectNode._on_blame),
        on(GroupDone, SubjectNode._on_group_done),
        on(Release, SubjectNode._on_release),
    ),
    SubjectState.AWAIT_RELEASE: table(
        on(Release, SubjectNode._on_release),
        on(GroupDone, SubjectNode._on_group_done),
        # Only to catch a collector re-running or regrouping her after her reveal (SPEC §4 share.7).
        on(ShuffleStart, SubjectNode._on_shuffle_start),
        on(Assign, SubjectNode._on_assign),
    ),
    SubjectState.VERDICT_SENT: table(on(VerdictAck, SubjectNode._on_verdict_ack)),
    SubjectState.DONE: table(),
    SubjectState.EXCLUDED: table(on(Release, SubjectNode._on_release_excluded)),
    SubjectState.INCOMPATIBLE: table(),
    SubjectState.SAMPLED_OUT: table(),
}
