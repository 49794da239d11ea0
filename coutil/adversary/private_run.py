"""A deviating collector that keeps one subject apart for a run of her own (SPEC §3, "split assign").

- ``split-assign``: the victim (in an MDAV group of at least k + 1) gets an assign naming her real group
  label and her own valid inclusion proof, but as fellow members k - 1 identities the collector holds
  and never registered, then a shuffle_start of a run of that label only they and she are in. Her real
  group-mates get assigns and runs without her, with no statement excluding her. The collector opens
  her run (its own records taken out, hers is left), and publishes the honest MDAV release, her record
  in her real group, as if nothing had happened.

What stops it: her assign carries each fellow member's roster entry (leaf index, QI commitment,
inclusion proof; SPEC §8.3), and the identities it holds are on no roster: their entries (made up here)
do not lead to the root, so she refuses the group (`fellow_not_on_roster`) and complains in her verdict.
Her run of her own never opens; after three step timeouts the collector gives it up and releases the
rest as if nothing had happened. Before the fellow entries (found by an attacker) her record was opened
and attributed, detected only through the release: her group holding more records than her run had
members (`group_not_as_run`). With ``withhold = true`` it aborts the round instead of releasing: before,
her record was attributed unseen; now liveness only. With identities of its own *on* the roster it is
``fabricate-members`` (SPEC §3's Sybil limit).

- ``split-roster``: ``split-assign`` with a roster of her own (found by a reviewer of the fellow entries):
  her puppets are on the roster only she is shown, on her inbox, so her fellows verify. Before, her record
  was attributed (3 of 3 seeds), and withheld nobody noticed. What stops it: her submission waits for her roster
  broadcast on its retained bulletin topic, which a collector that does not run the broker cannot show her
  alone (SPEC §7.3 roster). With ``retained = false`` (the default) no roster is retained: the others' fetches
  have it broadcast, the real one, and she refuses (`roster_mismatch`); with ``retained = true`` the real one
  is retained as usual after hers went to her inbox, and she refuses at once. Her run never opens.

- ``split-roster-early`` (found by an attacker on the roster gate): the gate rests on a broadcast reaching every
  subscriber, and only those subscribed at the time get it. When the victim answers the announce before anyone
  else (the others arrive ``others_after`` seconds later, as subjects of a survey do), the collector keeps her
  registration out of the real roster, publishes a roster of her own (her leaf and k - 1 puppets) on the
  retained roster topic and clears it at once, and runs her alone with its puppets before the others arrive:
  her gate holds (she took her root from the bulletin), her record is attributed, and the others play an honest
  round that never saw her roster. Not prevented: the Sybil limit (puppets on the roster she is shown) in time
  (SPEC §3). Her complaint (`roster_mismatch`, the release names another roster) is refused
  (`not_registered`), but it is public: the real roster and release reach her later, two roster roots the
  collector signed for her round, which she keeps as a proof of equivocation (`coutil.round.evidence`). With
  ``release_first = true`` (found by a reviewer of that proof) the collector also finishes her round of her
  own before the others come: a release of her group alone on her inbox (her roster's root), her verdict
  acknowledged, so that she is done and stops listening before any other root is published: no proof,
  nothing public, her record attributed.

- ``split-announce`` (a collector that runs the broker, with the broker strategy of that name): the
  victim alone is shown an announce of the same round with another k (``k``, default 1), the others the
  real one; then ``split-assign`` with a run of that size: at k = 1 she is a group of one, with no
  identity of the collector's beside her, and her record is opened alone. What stops it: her own floor
  on k (SPEC §4 announce; `coutil.protocol.subject_core.MIN_K`): she does not take part below 2. Above
  it the run needs identities of the collector's on the roster (the Sybil limit), and every run's
  membership digest starts from the announce each member took part on, so a real member shown the other
  announce than the victim states another digest (SPEC §8.4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np

from coutil.adversary.collector import FabricateMembers, Opening
from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, merkle, topics
from coutil.protocol.collector_groups import GroupMessage, GroupState
from coutil.protocol.collector_release import release_rows
from coutil.protocol.events import RoundAborted
from coutil.protocol.messages import (
    Announce,
    Assign,
    Fetch,
    Register,
    RegisterAck,
    Release,
    Roster,
    Verdict,
    VerdictAck,
)
from coutil.protocol.node import SERIAL_POOL, Outgoing, SeededRandom
from coutil.protocol.states import CollectorState, SubjectState
from coutil.protocol.subject import SubjectNode

__all__ = ["SplitAnnounce", "SplitAssign", "SplitRoster", "SplitRosterEarly"]

#: The number of the victim's run of her own (any number her group's real runs never reach).
PRIVATE_RUN = 1000


class _Puppet(SubjectNode):
    """An identity the collector holds and never registered: an honest subject node that joins the
    group it is told, since no inclusion proof of it could verify."""

    def join(self, group: int, members: tuple[bytes, ...]) -> None:
        self._resend.clear()  # its registration: nobody is to answer it
        self._group = group
        self._members = self._assigned = members
        self.state = SubjectState.SHARING

    def see_roster(self, root: bytes, n: int) -> None:
        """The roster its collector shows the victim (``split-roster``): the one its run_keys state."""
        self._roster_root = self._bulletin_root = root
        self._roster_size = n


class SplitAssign(FabricateMembers):
    """Keeps the victim apart for a run of her own with identities of its own (module docstring)."""

    NAME = "split-assign"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "withhold": False}
    NEEDS_VICTIM = True
    #: A roster of her own that her run states (None: the real one).
    _own_tree: merkle.MerkleTree | None = None

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure({"count": 0, "isolate": False, **params})
        self.private: GroupState | None = None
        self._private_records: list[tuple[float, ...]] | None = None
        self._release_waiting = False
        #: When it stops waiting for her run of her own (she refused its assign: fellows not on the roster).
        self._give_up_at: float | None = None
        self._honest_assign: Outgoing | None = None
        self._apart: int | None = None  #: her group's label, once its mates' run left her out

    def _sybil_count(self) -> int:
        return 0  # nobody registered: its identities are in no roster

    def _private_run_size(self) -> int:
        """Her run's members: she and this many minus one identities of its own."""
        return self.config.k

    def _victims_announce_digest(self) -> bytes:
        """The announce she took part on (her run's membership digest starts from it, SPEC §8.4)."""
        return self.announce_digest

    # -------------------------------------------------------------- the split
    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self._apart is None and self.private is None and not self.deviated:
            self._apart = self._victim_above_k()
            self.deviated = self._apart is not None
        victim = self.victim_key
        if group.label == self._apart and group.run == -1 and victim in group.members:
            # Her group-mates' first run, without her and without a word about her.
            group.members = tuple(m for m in group.members if m != victim)
            group.indices = tuple(self._index_of(m) for m in group.members)
        return super()._start_run(group, excluded, now)

    def _new_puppets(self, qis: Sequence[tuple[float, ...]], now: float) -> list[_Puppet]:
        """Its puppets, one per QI vector: honest subject nodes with records it knows, told the announce (their
        registrations go nowhere)."""
        assert self._announce_out is not None
        rng = SeededRandom(self._rng.bytes(32))
        width = len(self.config.confidential)
        puppets: list[_Puppet] = []
        for i, qi in enumerate(qis):
            record = tuple(float(-1000 - i) for _ in range(width))
            puppet = _Puppet(collector_key=self.public_key, qi=qi, confidential=record, rng=rng.fork(str(i)),
                             retry_interval=self.config.retry_interval)
            puppet.start(now)
            puppet.receive(topics.ANNOUNCE, self._announce_out.payload, now)
            puppets.append(puppet)
            self.own_records[puppet.public_key] = record
        return puppets

    def _close_registration(self, now: float) -> list[Outgoing]:
        out = super()._close_registration(now)
        victim, label = self.victim_key, self._apart
        if victim is None or label is None:
            return out
        mates = self._groups[label].members
        k = self._private_run_size()
        # Her puppets, told the roster too.
        assert self._roster_out is not None
        puppets = self._new_puppets([self._registrations[victim].qi] * (k - 1), now)
        for puppet in puppets:
            puppet.receive(topics.roster(self.round_id), self._roster_out.payload, now)
        apart = tuple(sorted([victim, *(p.public_key for p in puppets)]))
        for puppet in puppets:
            puppet.join(label, apart)
        self.sybils.extend(puppets)
        # Assigns as each side is to see the group: the mates without her, she with its puppets.
        replaced: dict[bytes, Outgoing] = {}
        for key, members in [*((m, mates) for m in mates), (victim, apart)]:
            old = self._assign_msgs[key]
            assign = codec.decode(old.payload).message
            assert isinstance(assign, Assign)
            # Her puppets are on no roster: their entries can only be made up (she refuses them, SPEC §8.3).
            fellows = self._fellows(key, members) if key != victim else tuple(
                (0, bytes(32), ()) for m in members if m != key)
            new = Outgoing(old.topic, self._sign(dataclasses.replace(assign, members=members, fellows=fellows)))
            replaced[old.payload] = new
            self._resend.arm(("assign", key), new, now)
            if key == victim:
                self._honest_assign = old
            else:
                self._assign_msgs[key] = new
        # Her run of her own, under her group's label.
        private = GroupState(label, apart, (), now + self.config.step_timeout)
        private.run = PRIVATE_RUN - 1
        start = self._sign(private.new_run(self.round_id, self._victims_announce_digest(), self.public_key, (),
                                           now + self.config.step_timeout))
        self.private = private
        starts = [Outgoing(topics.inbox(self.round_id, key), start) for key in apart]
        self._resend.arm("private_start", tuple(starts), now)
        self.deviated = True
        return [*(replaced.get(o.payload, o) for o in out), *starts]

    # -------------------------------------------------------------- her run of her own
    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out = self._on_private(topic, payload, now)
        if out is not None:
            return self._route(out, now) + self._deliver(topic, payload, now)
        return super().receive(topic, payload, now)

    def _on_private(self, topic: str, payload: bytes, now: float) -> list[Outgoing] | None:
        private = self.private
        roster = self._own_tree if self._own_tree is not None else self._tree
        if private is None or not payload or roster is None:
            return None
        try:
            decoded = self._decode_cache.decode(payload, self._limits)
        except RemoteProtocolError:
            return None
        message = decoded.message
        if message.TAG not in ("run_keys", "submit", "batch", "vote", "reveal", "blame"):
            return None
        member_message: GroupMessage = message  # type: ignore[assignment]
        if member_message.sender not in private.members or member_message.run != private.run:
            return None
        to = topics.addressed_to(self.round_id, member_message.sender, topic)
        try:
            # The roster her run states: the real one, or one of her own (`split-roster`, `split-roster-early`).
            private.observe(member_message, decoded.envelope, now, self.config.step_timeout, roster.root, to)
        except RemoteProtocolError:
            return []
        if private.all_keys():
            self._resend.cancel("private_start")
            self._resend.cancel(("assign", self.victim_key))
        inboxes = [topics.inbox(self.round_id, key) for key in private.members]
        out: list[Outgoing] = []
        if private.ready and not private.reveal_sent:
            signed = self._sign(private.reveal_open_message(self.round_id, self.public_key))
            out.extend(Outgoing(inbox, signed) for inbox in inboxes)
        if private.reveals_complete() and self._private_records is None:
            pending = private.start_opening(self.round_id, self._kx, len(self.config.confidential), SERIAL_POOL)
            records = private.finish_opening(pending.result())
            self._private_records = records
            self.openings.append(Opening(private.label, private.run, private.members, tuple(records)))
            done = self._sign(private.done_message(self.round_id, self.public_key))
            out.extend(Outgoing(inbox, done) for inbox in inboxes)
            if self._release_waiting:
                out.extend(self._publish_release(now))
        return out

    # -------------------------------------------------------------- the release, as if nothing happened
    def _publish_release(self, now: float) -> list[Outgoing]:
        if self.private is not None and self._private_records is None:
            self._release_waiting = True
            if self._give_up_at is None:
                self._give_up_at = now + 3 * self.config.step_timeout
            return []
        if self.params.get("withhold") is True:
            # Everything opened, hers included: no release, so nothing to audit and nobody complains (SPEC §3).
            self._take_openings(now)
            self._resend.clear()
            self._event(RoundAborted(now, "withheld", len(self._registrations)))
            self._enter(CollectorState.ABORTED)
            return [self._withdraw_announce()]
        return super()._publish_release(now)

    def next_timer(self) -> float | None:
        times = [t for t in (super().next_timer(), self._give_up_at if self._release_waiting else None)
                 if t is not None]
        return min(times) if times else None

    def on_timer(self, now: float) -> list[Outgoing]:
        out = super().on_timer(now)
        if self._release_waiting and self._give_up_at is not None and now >= self._give_up_at:
            # Her run of her own never came (she refused it): the release without it, as if nothing happened.
            self.private, self._release_waiting = None, False
            self._resend.cancel("private_start")
            out.extend(self._route(self._publish_release(now), now))
        return out

    def _take_openings(self, now: float) -> list[Outgoing]:
        out = super()._take_openings(now)
        attributed = self.attributions().get(self.victim_key) if self.victim_key is not None else None
        label = self._apart
        if attributed is not None and label is not None and label in self._records:
            self._records[label] = sorted([*self._records[label], attributed])
        return out

    def _on_verdict(self, message: Verdict, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        out = super()._on_verdict(message, decoded, now)
        if message.sender == self.victim_key and self._honest_assign is not None:
            # Her latest assign, as recorded for an auditor, is the honest one (she takes no other now).
            self._assign_msgs[message.sender] = self._honest_assign
        return out


class SplitAnnounce(SplitAssign):
    """Shows the victim alone an announce with another k, then keeps her apart in a run of that size
    (module docstring). The second announce goes to its broker (``split-announce``) on her inbox, which
    she does not read yet; the broker hands it to her in place of the real one."""

    NAME = "split-announce"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "k": 1}

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self._other_announce_digest = b""

    def _private_run_size(self) -> int:
        return self.param_int("k")

    def _victim_above_k(self) -> int | None:
        # Only the subject shown the other announce: none other if she did not register.
        label = self._victim_label()
        if label is not None and len(self._groups[label].members) > self.config.k:
            return label
        return None

    def start(self, now: float, *, started_at: float | None = None) -> list[Outgoing]:
        out = super().start(now, started_at=started_at)
        if self.victim_key is None or self._announce_out is None:
            return out
        real = codec.decode(self._announce_out.payload).message
        assert isinstance(real, Announce)
        other = dataclasses.replace(real, params=dataclasses.replace(real.params, k=self.param_int("k")))
        signed = self._sign(other)
        self._other_announce_digest = codec.payload_digest_of(signed)
        # First, so that its broker holds it before the real announce reaches anyone.
        return [Outgoing(topics.inbox(self.round_id, self.victim_key), signed), *out]

    def _victims_announce_digest(self) -> bytes:
        return self._other_announce_digest or self.announce_digest


class SplitRoster(SplitAssign):
    """``split-assign`` with a roster of her own (found by a reviewer of the fellow entries): the victim alone
    is shown, on her inbox, the real roster's leaves plus one per puppet (their commitments its choice), and
    her assign over it, fellow entries that lead to its root; everyone else gets the real roster on their
    inbox, and on the bulletin only with ``retained = true`` (module docstring: what stops it)."""

    NAME = "split-roster"
    PARAMS: ClassVar[dict[str, object]] = {**SplitAssign.PARAMS, "retained": False}

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self._own_tree: merkle.MerkleTree | None = None
        self._own_roster = b""
        self._own_assign: Outgoing | None = None

    def _close_registration(self, now: float) -> list[Outgoing]:
        out = super()._close_registration(now)
        victim, private = self.victim_key, self.private
        if private is None or victim is None or self._roster_out is None:
            return out
        commitments = {key: self._registrations[key].commitment for key in self._order}
        commitments.update({p.public_key: bytes(32) for p in self.sybils})
        order = sorted(commitments)
        tree = merkle.MerkleTree([merkle.roster_leaf(key, commitments[key]) for key in order])
        real = codec.decode(self._roster_out.payload).message
        assert isinstance(real, Roster)
        self._own_tree = tree
        self._own_roster = self._sign(dataclasses.replace(real, n=len(order), merkle_root=tree.root))
        for puppet in self.sybils:
            if isinstance(puppet, _Puppet):
                puppet.see_roster(tree.root, len(order))
        old = self._assign_msgs[victim]
        assign = codec.decode(old.payload).message
        assert isinstance(assign, Assign)
        index = order.index(victim)
        fellows = tuple((order.index(m), commitments[m], tree.proof(order.index(m)))
                        for m in private.members if m != victim)
        own = Outgoing(old.topic, self._sign(dataclasses.replace(
            assign, leaf_index=index, proof=tree.proof(index), merkle_root=tree.root, members=private.members,
            fellows=fellows)))
        self._resend.arm(("assign", victim), own, now)
        self._own_assign = own
        rosters = [Outgoing(topics.inbox(self.round_id, key), self._own_roster if key == victim
                            else self._roster_out.payload) for key in self._order]
        kept: list[Outgoing] = []
        retained = self.params.get("retained") is True
        for o in out:
            if o.topic == self._roster_out.topic and not retained:
                continue  # no retained roster: a subscriber of the bulletin would see both
            hers = o.topic == old.topic and o.payload != old.payload and codec.decode(o.payload).message.TAG == "assign"
            kept.append(own if hers else o)
        return rosters + kept

    def _on_fetch(self, message: Fetch, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.sender == self.victim_key and self._own_assign is not None:
            if message.what == "roster":
                return [Outgoing(topics.inbox(self.round_id, message.sender), self._own_roster)]
            if message.what == "assign":
                return [self._own_assign]
        return super()._on_fetch(message, decoded, now)




class SplitRosterEarly(SplitAssign):
    """The victim, first to register, is shown a roster of her own on the retained roster topic while nobody
    else subscribes to it, then cleared, and run alone with puppets (module docstring, ``split-roster-early``)."""

    NAME = "split-roster-early"
    PARAMS: ClassVar[dict[str, object]] = {**SplitAssign.PARAMS, "others_after": 2.0, "release_first": False}
    #: Her group of her own: a label no real group reaches.
    LABEL = 500

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self._own_tree: merkle.MerkleTree | None = None
        self._own_roster = b""
        self._victim_ack: Outgoing | None = None
        self._victim_digest = b""
        self._own_centroid: tuple[float, ...] = ()
        self._her_release: Outgoing | None = None
        #: Her verdict on the release of her own (``release_first``), acknowledged and kept out of the record.
        self.victim_verdict: Verdict | None = None
        self._hold_until = 0.0

    def arrival_delay(self, subject: bytes) -> float:
        later = self.params.get("others_after", 0.0)
        assert isinstance(later, int | float)
        return 0.0 if subject == self.victim_key else float(later)

    def _on_register(self, message: Register, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        victim = self.victim_key
        if message.sender != victim:
            return super()._on_register(message, decoded, now)
        if self._victim_ack is not None:  # her re-sends: the same answer, her registration kept out
            if decoded.digest != self._victim_digest:
                raise RemoteProtocolError("conflicting_registration", "a second registration of hers")
            return [self._victim_ack]
        self._victim_digest = decoded.digest
        self._hold_until = now + 3 * self.config.step_timeout
        self._victim_ack = Outgoing(topics.inbox(self.round_id, victim),
                                    self._sign(RegisterAck(self.round_id, self.public_key, victim, decoded.digest)))
        # QIs near hers, not equal: nothing in a release for her would look odd.
        puppet_qis = [tuple(v + 0.5 * (i + 1) for v in message.qi) for i in range(self.config.k - 1)]
        self._own_centroid = tuple(float(v) for v in np.mean([message.qi, *puppet_qis], axis=0))
        puppets = self._new_puppets(puppet_qis, now)
        commitments = {victim: merkle.qi_commitment(message.salt, message.qi)}
        commitments.update({p.public_key: bytes(32) for p in puppets})
        order = sorted(commitments)
        tree = merkle.MerkleTree([merkle.roster_leaf(key, commitments[key]) for key in order])
        self._own_tree = tree
        self._own_roster = self._sign(Roster(self.round_id, self.public_key, len(order), tree.root, self.LABEL + 1))
        for puppet in puppets:
            puppet.join(self.LABEL, tuple(order))
            puppet.see_roster(tree.root, len(order))
        self.sybils.extend(puppets)
        index = order.index(victim)
        fellows = tuple((order.index(m), commitments[m], tree.proof(order.index(m))) for m in order if m != victim)
        assign = Outgoing(topics.inbox(self.round_id, victim), self._sign(Assign(
            self.round_id, self.public_key, victim, index, tree.proof(index), tree.root, self.LABEL, tuple(order),
            tuple(float(v) for v in message.qi), fellows)))
        self._resend.arm(("assign", victim), assign, now)
        private = GroupState(self.LABEL, tuple(order), (), now + self.config.step_timeout)
        private.run = PRIVATE_RUN - 1
        start = self._sign(private.new_run(self.round_id, self.announce_digest, self.public_key, (),
                                           now + self.config.step_timeout))
        self.private = private
        starts = tuple(Outgoing(topics.inbox(self.round_id, key), start) for key in order)
        self._resend.arm("private_start", starts, now)
        self.deviated = True
        return [self._victim_ack, *self._bulletin_for_her(), assign, *starts]

    def _close_registration(self, now: float) -> list[Outgoing]:
        if self.params.get("release_first") is True and self.private is not None and self.victim_verdict is None \
                and now < self._hold_until:
            # The real roster waits until she is done (not listening any more): at most three step timeouts.
            self._deadline = now + self.config.retry_interval
            return []
        return super()._close_registration(now)

    def _on_private(self, topic: str, payload: bytes, now: float) -> list[Outgoing] | None:
        if self._her_release is not None and self.victim_key is not None \
                and topic == topics.subject_up(self.round_id, self.victim_key):
            try:
                decoded = self._decode_cache.decode(payload, self._limits)
            except RemoteProtocolError:
                return None
            if isinstance(decoded.message, Verdict):
                # Her verdict on her own release, whatever the state of the real round: acknowledged, so she is
                # done, and kept out of the round's record.
                self.victim_verdict = decoded.message
                ack = VerdictAck(self.round_id, self.public_key, self.victim_key, decoded.digest)
                return [Outgoing(topics.inbox(self.round_id, self.victim_key), self._sign(ack))]
        out = super()._on_private(topic, payload, now)
        records = self._private_records
        if out is None or records is None or self._her_release is not None or self._own_tree is None \
                or self.params.get("release_first") is not True:
            return out
        # ``release_first``: her round of her own is finished before the others come, so that she stops listening
        # (her verdict acknowledged: done) before any other roster root is published. Her release holds her group
        # alone, its centroid the mean of her QIs and her puppets', its roster hers.
        released = release_rows({self.LABEL: records}, lambda _: np.array(self._own_centroid), self.config.k,
                                len(self.config.columns))
        rows = released.matrix.astype("<f8").tobytes()
        release = Release(self.round_id, self.public_key, self.config.columns, released.group_ids, released.sizes,
                          rows, merkle.rows_root(rows, len(self.config.columns)), self._own_tree.root)
        assert self.victim_key is not None
        self._her_release = Outgoing(topics.inbox(self.round_id, self.victim_key), self._sign(release))
        return [*out, self._her_release]

    def _bulletin_for_her(self) -> list[Outgoing]:
        """Her roster on the retained roster topic, cleared at once: only who subscribes now ever sees it."""
        topic = topics.roster(self.round_id)
        return [Outgoing(topic, self._own_roster, retain=True), Outgoing(topic, b"", retain=True)]

    def _on_fetch(self, message: Fetch, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.sender == self.victim_key:
            if message.what == "roster":
                return self._bulletin_for_her()
            raise RemoteProtocolError("early", "nothing for her", ignore=True)
        return super()._on_fetch(message, decoded, now)
