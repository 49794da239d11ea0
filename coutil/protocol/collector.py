"""The collector's state machine (sans-IO).

The collector announces the round, accepts registrations, fixes the roster (a Merkle tree over
the registrations sorted by subject key) and the groups (MDAV on the QIs, exactly as centralized
MDAV would form them), coordinates every group's shuffle (deadlines, exclusions, merges, blame),
opens the confidential records once every member of a group has voted go, and publishes and
signs the release. It learns the QIs (as in centralized k-anonymity) but, unless all other members
of a group collude with it, not which confidential record belongs to whom.

Top-level states and the messages each accepts are in `TRANSITIONS`; the state and the coordination of the
groups' runs are in `CollectorCore` (`coutil.protocol.collector_core`), each group's runs in `GroupState`.
"""

from __future__ import annotations

import math

import numpy as np

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, merkle, topics
from coutil.protocol.collector_core import OUTAGE_LIMIT, CollectorCore, Registration
from coutil.protocol.collector_groups import GroupState
from coutil.protocol.collector_release import (
    RoundOutcome,
    excluded_rows,
    form_groups,
    members_by_label,
    rejection_counts,
    release_rows,
    verdict_rows,
)
from coutil.protocol.config import MAX_QI_MAGNITUDE
from coutil.protocol.dispatch import Handler, on, table
from coutil.protocol.events import (
    CollectorEvent,
    GroupsFormed,
    OutageEnded,
    OutageSuspected,
    RegistrationAccepted,
    ReleasePublished,
    RoundAborted,
    RoundDone,
    TransportChanged,
    VerdictAccepted,
)
from coutil.protocol.messages import (
    VERDICT_REASONS,
    Announce,
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
from coutil.protocol.node import Outgoing, Rejection
from coutil.protocol.schedule import fair_order
from coutil.protocol.states import CollectorState

#: Roster broadcasts one subject's fetches may trigger per step timeout (`CollectorNode._may_broadcast_roster`):
#: three lost deliveries of it in a row are rare; a fourth fetch within the step gets it on her inbox only.
ROSTER_BROADCASTS_PER_ASKER = 3

__all__ = ["OUTAGE_LIMIT", "ROSTER_BROADCASTS_PER_ASKER", "STATE_EDGES", "TRANSITIONS", "CollectorNode",
           "CollectorState"]


#: Where each state may lead (for the spec's diagram; checked by the tests against the code paths).
STATE_EDGES: dict[CollectorState, tuple[CollectorState, ...]] = {
    CollectorState.CREATED: (CollectorState.REGISTRATION,),
    CollectorState.REGISTRATION: (CollectorState.SHARING, CollectorState.ABORTED),
    CollectorState.SHARING: (CollectorState.AUDITING, CollectorState.ABORTED),
    CollectorState.AUDITING: (CollectorState.DONE,),
    CollectorState.DONE: (),
    CollectorState.ABORTED: (),
}


class CollectorNode(CollectorCore):
    """The collector of one round. Implements `coutil.protocol.node.Node`."""

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
        if not self._outage.transport_up:
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
        self._announce_digest = codec.payload_digest_of(self._announce_out.payload, self._limits)
        self._deadline = params.register_deadline
        # Re-published during registration: a retained message's delivery can be lost like any other,
        # and only subjects still waiting for a round subscribe to the announce topic.
        self._resend.arm("announce", self._announce_out, now)
        self._registration_started = self._last_registration_at = now
        self._enter(CollectorState.REGISTRATION)
        return [self._announce_out]

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        if not payload and topics.is_subject_group(topic):
            return []  # a member cleared her retained run_keys (SPEC §6): not a message
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
            to = topics.addressed_to(self.round_id, message.sender, topic) if message.TAG in ("submit", "batch") \
                else None
            if topic != expected and to is None:
                raise RemoteProtocolError("topic_mismatch", f"{message.TAG} not on its sender's topic")
            self._addressed_to = to
            out.extend(handler(self, message, decoded, now))
        except RemoteProtocolError as exc:
            self.rejections.append(Rejection(now, topic, exc.reason, exc.detail, exc.ignore, kind=kind))
        return out

    def on_timer(self, now: float) -> list[Outgoing]:
        self._now = self._resend.now = now
        out = self._resend.due(now)
        if not self._outage.transport_up:
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
    def _of_another_round(self, message: Message) -> bool:
        """SPEC §7.2 step 7: the message names another round (a replay of an earlier one, or garbage)."""
        return message.round_id != self.round_id

    # ------------------------------------------------------------------ registration
    def _on_register(self, message: Register, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        digest = decoded.digest
        if len(message.qi) != len(self.config.qi):
            raise RemoteProtocolError("bad_field", f"{len(message.qi)} QI values, expected {len(self.config.qi)}")
        if not all(math.isfinite(v) and abs(v) <= MAX_QI_MAGNITUDE for v in message.qi):
            raise RemoteProtocolError("bad_field", f"a QI value that is not finite or beyond {MAX_QI_MAGNITUDE:g}")
        known = self._registrations.get(message.sender)
        if known is not None:
            if known.digest != digest:
                raise RemoteProtocolError("conflicting_registration", "a second, different registration")
            return [known.ack]  # the ack was lost: send it again
        ack = RegisterAck(self.round_id, self.public_key, message.sender, digest)
        out = Outgoing(topics.inbox(self.round_id, message.sender), self._sign(ack))
        self._registrations[message.sender] = Registration(message.sender, message.qi, digest, out,
                                                           merkle.qi_commitment(message.salt, message.qi))
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
        leaves = [merkle.roster_leaf(key, self._registrations[key].commitment) for key in self._order]
        self._tree = merkle.MerkleTree(leaves)
        self._qi_matrix = np.array([self._registrations[key].qi for key in self._order], dtype=np.float64)
        labels, self._centroids, n_groups = self._form_groups(self._qi_matrix)
        out: list[Outgoing] = []
        roster = Roster(self.round_id, self.public_key, n, self._tree.root, n_groups)
        self._roster_out = Outgoing(topics.roster(self.round_id), self._sign(roster), retain=True)
        out.append(self._roster_out)
        for label, indices in members_by_label(labels).items():
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

    def _form_groups(self, qi: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """`form_groups` of the roster's QIs (a deviating collector forms others)."""
        assert self._tree is not None
        return form_groups(qi, self.config, self._order, self._tree.root)

    # ------------------------------------------------------------------ outages
    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        """The driver's word on this node's own connection to the broker (optional Node input).

        Down: no deadline passes (registration, group steps, audit) until it is back up. Up: every
        waiting deadline is moved to at least one step timeout from now (registration's also by the
        time lost), the retained bulletins are published again (a broker restarted without
        persistence lost them) and every pending re-send leaves at once.
        """
        self._now = self._resend.now = now
        if not self._outage.transport(up, now):
            return []
        self._event(TransportChanged(now, up))
        if not up:
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
        if self._outage.hear(now):
            self._end_outage(now)
        return []

    def _end_outage(self, now: float) -> None:
        """Give everyone a fresh step after an outage: nobody is excluded for the time it took."""
        lasted = self._outage.end(now)
        if lasted is None:
            return
        step = self.config.step_timeout
        if self._deadline is not None:
            if self.state == CollectorState.REGISTRATION:
                self._deadline = max(self._deadline + lasted, now + step)
            elif self.state == CollectorState.AUDITING:
                self._deadline = max(self._deadline, now + step)
        for label in list(self._active):
            self._grant(self._groups[label], now)
        self._event(OutageEnded(now, lasted))

    def _audit_outage(self, now: float) -> bool:
        """At the audit deadline: verdicts are missing and no subject was heard for half a step."""
        if not self._awaiting_verdicts:
            return False
        first = self._outage.since is None
        quiet = self._outage.audit_quiet(now, self._phase_started.get(CollectorState.AUDITING, now),
                                         self.config.step_timeout / 2)
        if quiet is None:
            return False
        if first:
            self._event(OutageSuspected(now, str(self.state), -1, quiet))
        return True

    # ------------------------------------------------------------------ release and audit
    def _publish_release(self, now: float) -> list[Outgoing]:
        assert self._tree is not None
        closings = self._take_openings(now)
        released = release_rows(self._records, lambda label: self._centroid_of(self._groups[label]), self.config.k,
                                len(self.config.columns))
        matrix, ids = released.matrix, released.group_ids
        self._release_matrix, self._release_sizes, self._release_ids = matrix, released.sizes, ids
        rows = matrix.astype("<f8").tobytes()
        release = Release(self.round_id, self.public_key, self.config.columns, ids, released.sizes,
                          rows, merkle.rows_root(rows, len(self.config.columns)), self._tree.root)
        self._release_out = Outgoing(topics.release(self.round_id), self._sign(release), retain=True)
        self._release_digest = codec.payload_digest_of(self._release_out.payload)
        self._resend.clear()
        self._awaiting_verdicts = {key for key in self._registrations
                                   if key not in self._excluded and key not in self._verdicts}
        self._deadline = now + self.config.audit_window
        self._event(ReleasePublished(now, int(matrix.shape[0]), len(ids)))
        self._enter(CollectorState.AUDITING)
        return [*closings, self._release_out]

    def _on_verdict(self, message: Verdict, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        digest = decoded.digest
        if message.sender not in self._registrations:
            raise RemoteProtocolError("not_registered", "verdict from a subject not in the roster")
        if message.reason not in VERDICT_REASONS or message.accept != (message.reason == "ok"):
            raise RemoteProtocolError("bad_field", "a verdict reason that is not a reason code, or accept without ok")
        known = self._verdicts.get(message.sender)
        if known is not None and known != message:
            raise RemoteProtocolError("conflicting_verdict", "a second, different verdict")
        if known is None and self.state == CollectorState.DONE:
            # Its transcript is final once the round is done (SPEC §8.5): a verdict recorded now would make two honest
            # exports of the done round two different signed statements. Not acknowledged: it is no verdict of it.
            raise RemoteProtocolError("late", "a new verdict after the round is done", ignore=True)
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
        # Bulletins (retained for everyone) are re-sent to the asker's inbox: a retained delivery can be
        # lost too (a broker drops QoS 1 messages to a slow subscriber). The roster is also published again
        # on its own retained topic: her submission waits for the roster everyone is shown (SPEC §4 group).
        roster = self._roster_out
        if message.what == "roster" and roster is not None and self._may_broadcast_roster(message.sender, now):
            return [roster]
        asker = message.sender
        bulletin = {"release": self._release_out, "roster": self._roster_out}.get(message.what)
        if bulletin is not None:
            answer = Outgoing(topics.inbox(self.round_id, message.sender), bulletin.payload)
        elif message.what == "assign" and message.sender in self._assign_msgs:
            answer = self._assign_msgs[message.sender]
        else:
            raise RemoteProtocolError("early", f"nothing to send for {message.what!r} yet", ignore=True)
        # The same answer at most once per half retry interval (an honest subject asks again after a whole
        # one; a new answer, such as the assign of a merge, goes at once): a subject re-sending her signed
        # fetch in a loop would otherwise have the collector publish the whole release to her inbox as
        # often (84x her bytes at n = 200).
        last = self._fetch_answered.get((asker, message.what))
        if last is not None and last[1] == answer.payload and now - last[0] < self.config.retry_interval / 2:
            raise RemoteProtocolError("duplicate", f"{message.what!r} answered {now - last[0]:.3f} s ago",
                                      ignore=True)
        self._fetch_answered[(asker, message.what)] = (now, answer.payload)
        return [answer]

    def _may_broadcast_roster(self, asker: bytes, now: float) -> bool:
        """Whether her fetch publishes the roster again on its topic (to every subscriber): at most once per
        half retry interval whoever asks, and at most `ROSTER_BROADCASTS_PER_ASKER` times for one subject per
        step timeout (found by an attacker: one subject fetching in a loop had it reach everyone every half
        interval). Otherwise she gets it on her inbox, a hint, and asks again."""
        last = self._fetch_answered.get((b"", "roster"))
        if last is not None and now - last[0] < self.config.retry_interval / 2:
            return False
        since, count = self._roster_broadcasts.get(asker, (now, 0))
        if now - since >= self.config.step_timeout:
            since, count = now, 0  # a new step: a subject whose deliveries are lost for long asks again
        if count >= ROSTER_BROADCASTS_PER_ASKER:
            return False
        self._roster_broadcasts[asker] = (since, count + 1)
        assert self._roster_out is not None
        self._fetch_answered[(b"", "roster")] = (now, self._roster_out.payload)
        return True

    # ------------------------------------------------------------------ results
    def outcome(self) -> RoundOutcome:
        matrix = self._release_matrix
        return RoundOutcome(
            completed=self.state == CollectorState.DONE,
            phase=self.state,
            columns=self.config.columns,
            rows=matrix if matrix is not None else np.zeros((0, len(self.config.columns))),
            group_sizes=self._release_sizes,
            verdicts=verdict_rows(self._verdicts, self._binds_release),
            excluded=excluded_rows(self._excluded),
            manifest=dict(self.config.manifest()),
            phase_times=dict(self._phase_times),
            registered=len(self._registrations),
            round_id=self.round_id.hex(),
            rejections=rejection_counts(self.rejections),
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
