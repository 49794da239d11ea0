"""Deviating collectors: each a `CollectorNode` that overrides one narrow hook, and records what it
learned (every group it opened: members and records), from which `CollectorStrategy.attributions`
infers which records it can attribute to their owner.

- ``rerun-subtract``: opens a group, claims a member silent, re-runs the rest to subtract the two
  openings (`_open_group`);
- ``split-view-roster``: shows the victim's group another roster (root, size, proofs) than everyone
  else (`_close_registration`);
- ``split-view-release``: sends the victim's group another release (one group left out) than everyone
  else (`_publish_release`);
- ``drop-subject``: excludes the live victim as silent once her run has all keys (`_progress`);
- ``isolate-victim``: puts the victim in a group (``via = "assign"``, `_form_groups`) or a run
  (``via = "run"``, `_start_run`) of members of its choosing (``members``: the nearest honest ones
  outside her group, or its own Sybils);
- ``fabricate-members``: registers ``count`` identities of its own (Sybils, default k - 1) with the
  victim's QIs and runs them as members; ``isolate = true`` also forms the group {victim + Sybils}
  (`_on_register`, message routing);
- ``publish-below-k``: publishes its first group with k - 1 rows (`_publish_release`);
- ``route-merge``: merges a group fallen below k into the ``rank``-th nearest group still sealed, not the
  nearest (`_merge_target`);
- ``erase-complaints``: shows the victim a split view of her group's first run, then names every member
  its later runs keep as excluded, to clear the complaints (`_start_run`);
- ``split-assign`` (`coutil.adversary.private_run`): keeps the victim apart, with identities of its
  own, for a run of her own.
- ``cover-run`` (`coutil.adversary.cover_run`): runs the victim's group with outsiders, then covers her
  refusal with an assign it signs her and never sends (found by an attacker of the auditor).

Every strategy also takes ``hide_complaints`` (default false): it acknowledges every verdict, as
the subject expects, but leaves each complaint, and each verdict bound to another release or roster
than the published ones, out of its record (`_on_verdict`): its report, and the transcript an
auditor checks, show those subjects as silent. What catches it is the subjects' evidence
(`coutil.round.evidence`): her verdict and the collector's signed acknowledgement of it.

Every strategy also takes ``withhold_evidence`` (default false): the transcript it publishes holds no signed
shuffle_start and no run evidence (an older coutil's format), so that its exclusions would be its unsigned word;
its signed announce commits to them (`TRANSCRIPT_COMMITMENT`, which every subject requires), so the auditor fails
it (`exclusion_evidence`, `blame_evidence`).

Every strategy also takes ``unsigned_transcript`` (default false): it publishes its transcript unsigned (an older
coutil's format), so that two different copies of it would prove nothing; its announce commits to a signed one
(`TRANSCRIPT_COMMITMENT`), so the auditor fails it (`transcript_signature`). And ``two_transcripts`` (default
false): it hands a second auditor another transcript of the finished round, signed as the first, with every
complaint left out (a run directory's ``transcript.second.json``): each copy alone may pass, the two together
convict it (`coutil verify DIR --other-transcript FILE`, `transcript_signature`).

The victim is a row of the data set (``victim``, default 0): the factory (`coutil.round.nodes`)
tells the strategy her round key (``victim_key``), as a collector that knows whom it targets would
recognise her registration.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from coutil.protocol import codec, merkle, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.collector_groups import GroupMessage, GroupState, Record, open_item, still_sealed
from coutil.protocol.events import VerdictAccepted
from coutil.protocol.messages import Assign, Fetch, Register, Release, Roster, ShuffleStart, Verdict
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.shuffle import collector_aad, inner_aad
from coutil.protocol.states import CollectorState
from coutil.protocol.subject import SubjectNode

__all__ = [
    "CollectorStrategy", "DropSubject", "EraseComplaints", "FabricateMembers", "IsolateVictim", "Opening",
    "PublishBelowK",
    "RerunSubtract", "RouteMerge", "SplitViewRelease", "SplitViewRoster", "arrival_delay",
]



@dataclass(frozen=True)
class Opening:
    """One group opening as the collector saw it: who was in the run, and the records it got."""

    group: int
    run: int
    members: tuple[bytes, ...]
    records: tuple[Record, ...]


def arrival_delay(collector: CollectorNode, subject: bytes) -> float:
    """When ``subject`` starts in a simulated round (`CollectorStrategy.arrival_delay`; 0 for an honest one)."""
    return collector.arrival_delay(subject) if isinstance(collector, CollectorStrategy) else 0.0


class CollectorStrategy(CollectorNode):
    """Base of the collector strategies: a name, parameters, the victim, and its observations."""

    NAME: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, object]] = {}
    #: Parameter name -> the values it may take (when not any value of its type).
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: Whether the strategy targets a victim (the ``victim`` parameter: a row of the data set).
    NEEDS_VICTIM: ClassVar[bool] = False

    deviated: bool = False
    victim_key: bytes | None = None
    #: Subjects whose acknowledged verdict it left out of its record (``hide_complaints``).
    hidden: tuple[bytes, ...] = ()

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls.PARAMS = {**cls.PARAMS, "hide_complaints": False, "withhold_evidence": False,
                      "unsigned_transcript": False, "two_transcripts": False}

    def configure(self, params: Mapping[str, object]) -> None:
        self.params: dict[str, object] = {**self.PARAMS, **params}
        self.openings: list[Opening] = []
        #: Identities it controls (Sybils) and their records.
        self.own_records: dict[bytes, Record] = {}

    def param_int(self, name: str) -> int:
        value = self.params[name]
        assert isinstance(value, int)
        return value

    def arrival_delay(self, subject: bytes) -> float:
        """When ``subject`` starts in a simulated round, after the others (seconds): 0 but for a strategy that
        needs a victim alone for a while (``split-roster-early``: subjects answer an announce over time). The
        in-memory drivers (`coutil simulate`, `coutil experiment`) apply it; over MQTT subjects start when
        they start."""
        return 0.0

    def publishes_evidence(self) -> bool:
        # ``withhold_evidence``: the transcript it publishes holds no shuffle_start and no run evidence, as an older
        # coutil's would, so that its exclusions (a framed member's `blamed_*` above all) are its unsigned word.
        return not self.params.get("withhold_evidence")

    def sign_transcript(self, statement: bytes) -> bytes:
        # ``unsigned_transcript``: no signature, so that two different copies would prove nothing.
        return b"" if self.params.get("unsigned_transcript") else super().sign_transcript(statement)

    def shows_two_transcripts(self) -> bool:
        return bool(self.params.get("two_transcripts"))

    # -------------------------------------------------------------- hiding complaints
    def _on_verdict(self, message: Verdict, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        out = super()._on_verdict(message, decoded, now)
        if self.params.get("hide_complaints") and (not message.accept or not self._binds_release(message)):
            # Acknowledged (she stops re-sending, content), then dropped from what it records and reports.
            sender = message.sender
            self._verdicts.pop(sender, None)
            self._events = [e for e in self._events if not (isinstance(e, VerdictAccepted) and e.subject == sender)]
            if sender not in self.hidden:
                self.hidden = (*self.hidden, sender)
            self.deviated = True
        return out

    # -------------------------------------------------------------- observations
    def _open_group(self, group: GroupState, now: float) -> list[Outgoing]:
        self.openings.append(Opening(group.label, group.run, group.members, tuple(self._peek_records(group))))
        return super()._open_group(group, now)

    def _peek_records(self, group: GroupState) -> list[Record]:
        """The records the collector can open from a group's final batch and the revealed secrets
        (what `GroupState.open_records` will release, seen before it)."""
        final = group.final_batch
        if final is None:
            return []
        secrets = tuple(group.data.reveal_keys[m] for m in group.members if m in group.data.reveal_keys)
        aad_inner, aad_record = inner_aad(self.round_id, group.label, group.run), collector_aad(self.round_id)
        width = len(self.config.confidential)
        opened = (open_item(secrets, self._kx, aad_inner, aad_record, width, item) for item in final)
        return [record for record in opened if record is not None]

    def attributions(self) -> dict[bytes, Record]:
        """Records it can attribute to their owner from its openings: a group whose members are all
        its own but one (its own records taken out, one is left), or two openings whose member sets
        differ by one member (subtraction)."""
        found: dict[bytes, Record] = {}
        for o in self.openings:
            others = [m for m in o.members if m not in self.own_records]
            rest = Counter(o.records) - Counter(self.own_records[m] for m in o.members if m in self.own_records)
            if len(others) == 1 and sum(rest.values()) == 1:
                found[others[0]] = next(iter(rest))
        for a, b in itertools.permutations(self.openings, 2):
            missing = set(a.members) - set(b.members)
            if set(b.members) < set(a.members) and len(missing) == 1:
                rest = Counter(a.records) - Counter(b.records)
                if sum(rest.values()) == 1:
                    found[missing.pop()] = next(iter(rest))
        return found

    def _victim_run_keyed(self, touched: list[GroupState]) -> GroupState | None:
        """The victim's group once her run has every member's keys (hers too), the first time only: when the
        strategies that act on her run do (it then counts as deviated)."""
        if self.deviated or self.victim_key is None:
            return None
        for group in touched:
            if self.victim_key in group.members and group.active and not group.reveal_sent and group.all_keys():
                self.deviated = True
                return group
        return None

    def _victim_label(self) -> int | None:
        return self._group_of.get(self.victim_key) if self.victim_key is not None else None

    def _victim_above_k(self) -> int | None:
        """The label of a group of more than k members with the victim in it (for a deviation that leaves
        one member out of a run): hers if it has, else the first such group, whose first member then
        becomes the victim; None if every group has exactly k."""
        label = self._victim_label()
        k = self.config.k
        if label is not None and len(self._groups[label].members) > k:
            return label
        for other in sorted(self._groups):
            if len(self._groups[other].members) > k:
                self.victim_key = self._groups[other].members[0]
                return other
        return None


# ---------------------------------------------------------------------------------------------- re-run
class RerunSubtract(CollectorStrategy):
    """Opens a group, then claims one of its members was silent and runs the group again without
    her, to subtract the two record sets (issue 12). Honest members refuse any run after their reveal."""

    NAME = "rerun-subtract"
    rerun_label: int | None = None
    dropped: bytes | None = None
    _rerun_centroid: np.ndarray | None = None

    def _open_group(self, group: GroupState, now: float) -> list[Outgoing]:
        out = super()._open_group(group, now)
        if self.rerun_label is None and len(group.members) > 1:
            self.rerun_label, self.dropped, self.deviated = group.label, group.members[-1], True
            self._rerun_centroid = self._centroid_of(group)
            group.active, group.opened = True, False
            group.set_members(tuple(m for m in group.members if m != self.dropped), self._index_of)
            out.extend(self._start_run(group, ((self.dropped, "silent"),), now))
        return out

    def _centroid_of(self, group: GroupState) -> np.ndarray:
        if group.label == self.rerun_label and self._rerun_centroid is not None:
            return self._rerun_centroid  # its first opening is released under its own centroid
        return super()._centroid_of(group)


# ---------------------------------------------------------------------------------------------- split views
class SplitViewRoster(CollectorStrategy):
    """Shows the victim's group a roster of its own (another subject left out: another root and
    size, proofs to match) and everyone else the real one, each on their inbox (a collector running
    the broker can show subscribers different retained rosters). It accepts both views."""

    NAME = "split-view-roster"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}
    NEEDS_VICTIM = True
    shown: frozenset[bytes] = frozenset()
    _fake_tree: merkle.MerkleTree | None = None
    _fake_roster: bytes = b""

    def _close_registration(self, now: float) -> list[Outgoing]:
        out = super()._close_registration(now)
        label = self._victim_label()
        if self.state != CollectorState.SHARING or label is None or self._roster_out is None:
            return out
        self.shown = frozenset(self._groups[label].members)
        hidden = next((k for k in self._order if k not in self.shown), None)
        if hidden is None:
            return out
        order = [k for k in self._order if k != hidden]
        tree = merkle.MerkleTree([merkle.roster_leaf(k, self._registrations[k].commitment) for k in order])
        real = codec.decode(self._roster_out.payload).message
        assert isinstance(real, Roster)
        self._fake_tree = tree
        self._fake_roster = self._sign(dataclasses.replace(real, n=len(order), merkle_root=tree.root))
        replaced: dict[bytes, Outgoing] = {}
        for key in self.shown:
            old = self._assign_msgs[key]
            assign = codec.decode(old.payload).message
            assert isinstance(assign, Assign)
            index = order.index(key)
            new = Outgoing(old.topic, self._sign(dataclasses.replace(
                assign, leaf_index=index, proof=tree.proof(index), merkle_root=tree.root,
                fellows=self._fellows(key, assign.members, tree, order))))
            replaced[old.payload] = self._assign_msgs[key] = new
            self._resend.arm(("assign", key), new, now)
        self.deviated = True
        rosters = [Outgoing(topics.inbox(self.round_id, k), self._fake_roster if k in self.shown
                            else self._roster_out.payload) for k in self._order]
        kept = [replaced.get(o.payload, o) for o in out if o.topic != self._roster_out.topic]
        return rosters + kept

    def _on_fetch(self, message: Fetch, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.what == "roster" and message.sender in self.shown:
            return [Outgoing(topics.inbox(self.round_id, message.sender), self._fake_roster)]
        return super()._on_fetch(message, decoded, now)

    def _on_group_message(self, message: GroupMessage, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.sender not in self.shown or self._fake_tree is None:
            return super()._on_group_message(message, decoded, now)
        real, self._tree = self._tree, self._fake_tree  # the view it gave her group
        try:
            return super()._on_group_message(message, decoded, now)
        finally:
            self._tree = real


class SplitViewRelease(CollectorStrategy):
    """Sends the victim's group a release without one other group, everyone else the real one (each
    on their inbox), hoping to show the first release as accepted by all."""

    NAME = "split-view-release"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}
    NEEDS_VICTIM = True
    shown: frozenset[bytes] = frozenset()
    _fake: bytes = b""

    def _publish_release(self, now: float) -> list[Outgoing]:
        out = super()._publish_release(now)
        label = self._victim_label()
        real = self._release_out
        assert real is not None
        release = codec.decode(real.payload).message
        assert isinstance(release, Release)
        others = [i for i, g in enumerate(release.group_ids) if g != label]
        if label is None or not others:
            return out
        drop = others[-1]
        width = len(release.columns)
        rows = np.frombuffer(release.rows, dtype="<f8").reshape(-1, width)
        start = sum(release.group_sizes[:drop])
        kept = np.delete(rows, range(start, start + release.group_sizes[drop]), axis=0).astype("<f8").tobytes()
        fake = dataclasses.replace(
            release, group_ids=release.group_ids[:drop] + release.group_ids[drop + 1:],
            group_sizes=release.group_sizes[:drop] + release.group_sizes[drop + 1:], rows=kept,
            rows_root=merkle.rows_root(kept, width))
        self._fake = self._sign(fake)
        self.shown = frozenset(k for k, g in self._group_of.items() if g == label)
        self.deviated = True
        return [Outgoing(topics.inbox(self.round_id, k), self._fake if k in self.shown else real.payload)
                for k in self._order]

    def _on_fetch(self, message: Fetch, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        if message.what == "release" and message.sender in self.shown:
            return [Outgoing(topics.inbox(self.round_id, message.sender), self._fake)]
        return super()._on_fetch(message, decoded, now)


# ---------------------------------------------------------------------------------------------- exclusions
class DropSubject(CollectorStrategy):
    """Claims a live member silent, or a deviator: once the victim's run 0 has every member's keys (hers
    too), she is excluded as ``reason`` (``silent``, or a blame such as ``blamed_tamper``: a false blame,
    which the run's signed messages do not prove) and the group runs again without her."""

    NAME = "drop-subject"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "reason": "silent"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"reason": (
        "silent", "blamed_tamper", "blamed_malformed", "blamed_false_complaint", "blamed_copy", "blamed_unsolicited",
        "blamed_split_view", "blamed_equivocation", "blamed_bad_key")}
    NEEDS_VICTIM = True

    def _progress(self, touched: list[GroupState], now: float) -> list[Outgoing]:
        group = self._victim_run_keyed(touched)
        if group is None or self.victim_key is None:
            return super()._progress(touched, now)
        return self._exclude(group, ((self.victim_key, str(self.params["reason"])),), now) \
            + super()._progress(touched, now)


class LureRun(CollectorStrategy):
    """Frames a live member as a deviator with a signed message of her own (found by an attacker on the auditor):
    once the victim's run 0 has every member's keys, it shows her alone, on her inbox, a shuffle_start of her
    group's next run with the same members. She answers it with her run_keys for that run, which its own code
    takes for a message of a run it never started: she is excluded ``blamed_equivocation``, her answer the proof
    an auditor's replay accepts. Her real group's next run, which excludes her, is a second shuffle_start of that
    run: she holds both, a proof of equivocation (`SubjectNode.equivocation_evidence`)."""

    NAME = "lure-run"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}
    NEEDS_VICTIM = True

    def _progress(self, touched: list[GroupState], now: float) -> list[Outgoing]:
        group = self._victim_run_keyed(touched)
        if group is None or self.victim_key is None:
            return super()._progress(touched, now)
        lure = ShuffleStart(self.round_id, self.public_key, group.label, group.run + 1, group.members, (),
                            now + self.config.step_timeout)
        shown = Outgoing(topics.inbox(self.round_id, self.victim_key), self._sign(lure))
        return [shown, *super()._progress(touched, now)]


class RouteMerge(CollectorStrategy):
    """Merges a group fallen below k into the ``rank``-th nearest group still sealed (2: the second nearest;
    0: the farthest) instead of the nearest, e.g. a group of members colluding with it, who then take their
    own records out of its release: the movers'. With ``drop`` (the default) it makes the victim's group fall
    below k itself, excluding her group-mates `silent` once her run has every key; without, it waits for a
    group to fall below k (dropouts). Honest in everything else: every statement it signs is consistent with
    the merge it made."""

    NAME = "route-merge"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "rank": 0, "drop": True}
    NEEDS_VICTIM = True

    def _progress(self, touched: list[GroupState], now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for group in touched:
            if self.params["drop"] and not self.deviated and self.victim_key in group.members and group.active \
                    and not group.reveal_sent and group.all_keys():
                mates = tuple((member, "silent") for member in group.members if member != self.victim_key)
                out.extend(self._exclude(group, mates, now))
        return out + super()._progress(touched, now)

    def _merge_target(self, group: GroupState) -> GroupState | None:
        nearest = super()._merge_target(group)
        if nearest is None:
            return None
        here = self._centroid_of(group)
        sealed = sorted((float(np.sum((self._centroid_of(other) - here) ** 2)), other.label)
                        for other in still_sealed(group, self._groups.values()))
        rank = self.param_int("rank")
        _, label = sealed[-1] if rank <= 0 else sealed[min(rank, len(sealed)) - 1]
        self.deviated = self.deviated or label != nearest.label
        return self._groups[label]


class EraseComplaints(CollectorStrategy):
    """Shows the victim a first run of her group without its last member (a split view she complains
    of) and, in every later run of her group, a signed statement that names every member it keeps as
    excluded ``silent``, for the complaints about the split to be dropped (a member's complaint about a
    fellow member is dropped when the collector excludes that member: it was her view that lied)."""

    NAME = "erase-complaints"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}
    NEEDS_VICTIM = True

    _label: int | None = None

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self._label is None and not self.deviated:
            self._label = self._victim_above_k()
        if group.label != self._label or self.victim_key is None:
            return super()._start_run(group, excluded, now)
        if group.run == -1 and len(group.members) > self.config.k:
            out = super()._start_run(group, excluded, now)
            start = codec.decode(out[-1].payload).message
            assert isinstance(start, ShuffleStart)
            fake = self._sign(dataclasses.replace(start, members=start.members[:-1]))
            inbox = topics.inbox(self.round_id, self.victim_key)
            out = [o for o in out if o.topic != inbox] + [Outgoing(inbox, fake)]
            self._resend.arm(("shuffle_start", group.label), tuple(out), now)
            self.deviated = True
            return out
        if group.run >= 0 and self.deviated:
            stated = {key for key, _ in excluded}
            excluded = (*excluded, *((m, "silent") for m in group.members if m not in stated))
        return super()._start_run(group, excluded, now)


class PublishBelowK(CollectorStrategy):
    """Publishes its first released group with k - 1 rows only (a group below k)."""

    NAME = "publish-below-k"

    def _publish_release(self, now: float) -> list[Outgoing]:
        closings = super()._publish_release(now)[:-1]  # the statements of groups suppressed after opening
        assert self._release_out is not None and self._release_matrix is not None
        release = codec.decode(self._release_out.payload).message
        assert isinstance(release, Release)
        if not release.group_sizes:
            return [*closings, self._release_out]
        k = self.config.k
        cut = release.group_sizes[0] - (k - 1)
        matrix = np.delete(self._release_matrix, range(k - 1, k - 1 + cut), axis=0)
        sizes = (k - 1, *release.group_sizes[1:])
        rows = matrix.astype("<f8").tobytes()
        forged = dataclasses.replace(release, group_sizes=sizes, rows=rows,
                                     rows_root=merkle.rows_root(rows, len(release.columns)))
        self._release_out = Outgoing(self._release_out.topic, self._sign(forged), retain=True)
        self._release_digest = codec.payload_digest_of(self._release_out.payload)
        self._release_matrix, self._release_sizes = matrix, sizes
        self.deviated = True
        return [*closings, self._release_out]


# ---------------------------------------------------------------------------------------------- Sybils
class FabricateMembers(CollectorStrategy):
    """Registers ``count`` identities of its own (Sybils; 0: k - 1) with the victim's QIs as soon as
    she registers, and runs them as honest-looking members (real `SubjectNode`s it hosts: it hands
    them its own messages and every member message it reads; theirs go out on their own topics).
    ``isolate = true`` also forms the group {victim + Sybils} itself (isolate-victim on top).
    Its own records taken out, a group of the victim and its Sybils leaves her record alone."""

    NAME = "fabricate-members"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "count": 0, "isolate": False}
    NEEDS_VICTIM = True

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self.sybils: list[SubjectNode] = []

    def _sybil_count(self) -> int:
        return self.param_int("count") or self.config.k - 1

    def _isolates(self) -> bool:
        return bool(self.params["isolate"])

    def _chosen(self, qi: np.ndarray, labels: np.ndarray, victim: int) -> list[int]:
        """The members it puts beside the victim (roster indices): its Sybils."""
        return [i for i, key in enumerate(self._order) if key in self.own_records][: self.config.k - 1]

    # -------------------------------------------------------------- registering the Sybils
    def _on_register(self, message: Register, decoded: codec.Decoded, now: float) -> list[Outgoing]:
        spawn: list[Outgoing] = []
        if message.sender == self.victim_key and not self.sybils and self._sybil_count() > 0 \
                and message.sender not in self._registrations:
            spawn = self._spawn(message.qi, now)
        return super()._on_register(message, decoded, now) + spawn

    def _spawn(self, qi: tuple[float, ...], now: float) -> list[Outgoing]:
        count = self._sybil_count()
        if self.config.expected_subjects:
            # Registration closes at the expected count: make room for its own identities.
            self.config = dataclasses.replace(self.config, expected_subjects=self.config.expected_subjects + count)
        rng = SeededRandom(self._rng.bytes(32))
        width = len(self.config.confidential)
        out: list[Outgoing] = []
        for i in range(count):
            out.extend(self._host_sybil(qi, tuple(float(i + 1) for _ in range(width)), rng.fork(str(i)), now))
        self.deviated = True
        return out

    def _host_sybil(self, qi: tuple[float, ...], record: tuple[float, ...], rng: SeededRandom,
                    now: float) -> list[Outgoing]:
        """One identity of its own, a subject node with ``record`` at ``qi`` that it hosts, answering the announce."""
        assert self._announce_out is not None
        sybil = SubjectNode(collector_key=self.public_key, qi=qi, confidential=record, rng=rng,
                            retry_interval=self.config.retry_interval)
        sybil.start(now)
        self.sybils.append(sybil)
        self.own_records[sybil.public_key] = record
        return sybil.receive(topics.ANNOUNCE, self._announce_out.payload, now)

    # -------------------------------------------------------------- hosting them
    def _deliver(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out: list[Outgoing] = []
        for sybil in self.sybils:
            if any(topics.matches(f, topic) for f in sybil.subscriptions()):
                out.extend(sybil.receive(topic, payload, now))
        return out

    def _route(self, out: list[Outgoing], now: float) -> list[Outgoing]:
        """Its own messages reach its Sybils at once (it does not read its own topics); what the
        Sybils send goes out on their topics, and comes back to it like any member message."""
        if not self.sybils:
            return out
        extra: list[Outgoing] = []
        for message in out:
            if message.payload and "/s/" not in message.topic:
                extra.extend(self._deliver(message.topic, message.payload, now))
        return out + extra

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out = super().receive(topic, payload, now)
        return self._route(out, now) + self._deliver(topic, payload, now)

    def next_timer(self) -> float | None:
        times = [t for t in (super().next_timer(), *(s.next_timer() for s in self.sybils)) if t is not None]
        return min(times) if times else None

    def on_timer(self, now: float) -> list[Outgoing]:
        out = self._route(super().on_timer(now), now)
        for sybil in self.sybils:
            due = sybil.next_timer()
            if due is not None and due <= now:
                out.extend(sybil.on_timer(now))
        return out

    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        return self._route(super().on_transport(up, now), now)

    # -------------------------------------------------------------- forming the victim's group
    def _form_groups(self, qi: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        labels, centroids, n_groups = super()._form_groups(qi)
        if not self._isolates() or self.victim_key not in self._registrations:
            return labels, centroids, n_groups
        victim = self._order.index(self.victim_key)
        chosen = self._chosen(qi, labels, victim)
        if len(chosen) < self.config.k - 1:
            return labels, centroids, n_groups
        self.deviated = True
        return regroup(qi, labels, [victim, *chosen], self.config.k)


class IsolateVictim(FabricateMembers):
    """Puts the victim in a group (``via = "assign"``: the grouping itself) or a run (``via = "run"``:
    the shuffle_start only) whose other members it chooses: ``members = "honest"``, the k - 1
    registrations nearest to her outside her MDAV group; ``members = "sybils"``, k - 1 identities of
    its own (fabricate-members with this on top)."""

    NAME = "isolate-victim"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "members": "honest", "via": "assign"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"members": ("honest", "sybils"), "via": ("assign", "run")}

    def _sybil_count(self) -> int:
        return self.config.k - 1 if self.params["members"] == "sybils" else 0

    def _isolates(self) -> bool:
        return self.params["via"] == "assign"

    def _chosen(self, qi: np.ndarray, labels: np.ndarray, victim: int) -> list[int]:
        if self.params["members"] == "sybils":
            return super()._chosen(qi, labels, victim)
        outside = [i for i in range(len(self._order)) if labels[i] != labels[victim]
                   and self._order[i] not in self.own_records]
        outside.sort(key=lambda i: float(np.sum((qi[i] - qi[victim]) ** 2)))
        return outside[: self.config.k - 1]

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self.params["via"] == "run" and not self.deviated and self.victim_key in group.members \
                and group.run == -1 and self._qi_matrix is not None:
            victim = self._order.index(self.victim_key)
            labels = np.array([self._group_of[k] for k in self._order])
            chosen = self._chosen(self._qi_matrix, labels, victim)
            group.members = tuple(sorted([self.victim_key, *(self._order[i] for i in chosen)]))
            self.deviated = True
        return super()._start_run(group, excluded, now)


def regroup(qi: np.ndarray, labels: np.ndarray, isolated: list[int], k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Labels with ``isolated`` (roster indices) forming a group of their own; every other group left
    below k merges into the nearest one (by centroid); labels renumbered 0..m-1, centroids the means."""
    labels = labels.astype(np.int64).copy()
    alone = int(labels.max()) + 1
    leftover = int(labels.max()) + 2
    own_label = int(labels[isolated[0]])
    labels[labels == own_label] = leftover  # her former group-mates, for now a group of their own
    labels[isolated] = alone
    while True:
        sizes = Counter(int(v) for v in labels)
        small = [g for g, size in sizes.items() if size < k and g != alone]
        if not small:
            break
        g = small[0]
        here = qi[labels == g].mean(axis=0)
        others = [h for h in sizes if h not in (g, alone)]
        if not others:
            labels[labels == g] = alone
            continue
        nearest = min(others, key=lambda h: float(np.sum((qi[labels == h].mean(axis=0) - here) ** 2)))
        labels[labels == g] = nearest
    renumber = {old: new for new, old in enumerate(sorted(set(int(v) for v in labels)))}
    labels = np.array([renumber[int(v)] for v in labels], dtype=np.int64)
    centroids = np.array([qi[labels == g].mean(axis=0) for g in range(len(renumber))], dtype=np.float64)
    return labels, centroids, len(renumber)
