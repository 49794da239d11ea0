"""Protocol v2 defences (issue 12; SPEC §3 threat table): each deviation is a small named subclass of
the real node, put into an otherwise honest round on the in-memory bus, over several seeds.

Collector deviations fail because honest subjects refuse and complain; member deviations are
attributed to their author, and no honest member is excluded. The deviation library
(`coutil.adversary`) will replace these classes with first-class strategies.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any, ClassVar

import numpy as np
import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol import codec, crypto, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.collector_groups import GroupState
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import GroupOpened, RunRefused
from coutil.protocol.messages import Announce, Batch, Blame, Message, RunKeys, Submit, Verdict, Vote
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.shuffle import NO_BATCH
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.protocol.subject_core import SubjectRun
from coutil.round.simulation import synthetic_dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)
SEEDS = [3, 8, 13]


@dataclasses.dataclass
class Round:
    collector: CollectorNode
    subjects: list[SubjectNode]
    bus: MemoryBus
    conf: np.ndarray

    @property
    def culprit(self) -> SubjectNode:
        return self.subjects[0]

    def excluded(self) -> dict[str, str]:
        return {str(e["sid"]): str(e["reason"]) for e in self.collector.outcome().excluded}

    def verdicts(self) -> dict[str, dict[str, object]]:
        return {str(v["sid"]): v for v in self.collector.outcome().verdicts}

    def released(self) -> Counter[tuple[float, ...]]:
        rows = self.collector.outcome().rows
        return Counter(tuple(r) for r in rows[:, len(CONFIG.qi):].tolist())

    def events(self, cls: type) -> list[Any]:
        return [e for _, e in self.bus.events or () if isinstance(e, cls)]

    def member_messages(self, tag: str) -> list[Message]:
        out = []
        for publication in self.bus.publications or ():
            if publication.sender != "collector" and publication.payload:
                message = codec.decode(publication.payload).message
                if tag == message.TAG:
                    out.append(message)
        return out


def run_round(subject_class: type[SubjectNode] = SubjectNode, collector_class: type[CollectorNode] = CollectorNode,
              *, n: int = 21, seed: int = 3, culprits: int = 1) -> Round:
    """One round: subjects 0..culprits-1 of ``subject_class``, the rest honest; the collector of
    ``collector_class``. Runs until the collector and every subject are finished (or time out)."""
    data = synthetic_dataset(n, CONFIG, seed)
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    root = SeededRandom(seed)
    rng = root.fork("collector")
    collector = collector_class(CONFIG, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                                round_id=root.fork("round").bytes(16))
    caches = SharedCaches()
    subjects = [(subject_class if i < culprits else SubjectNode)(
        collector_key=collector.public_key, qi=qi[i], confidential=conf[i], rng=root.fork(f"subject-{i}"),
        caches=caches, retry_interval=1.0) for i in range(n)]
    bus = MemoryBus(seed=seed, record_publications=True, record_events=True)
    bus.add_node("collector", collector)
    for subject in subjects:
        bus.add_node(subject.sid, subject)
    bus.run_until(until=3000.0, predicate=lambda: collector.finished and all(s.finished for s in subjects))
    return Round(collector, subjects, bus, conf)


def group_of(r: Round, subject: SubjectNode) -> list[SubjectNode]:
    return [s for s in r.subjects if s._group == subject._group]


def assert_only_culprit_excluded(r: Round, reason: str) -> None:
    outcome = r.collector.outcome()
    assert outcome.completed, outcome.phase
    assert r.excluded() == {r.culprit.sid: reason}
    honest = Counter(tuple(r.conf[i].tolist()) for i in range(1, len(r.subjects)))
    assert r.released() == honest  # every honest record, never the culprit's
    verdicts = r.verdicts()
    for subject in r.subjects[1:]:
        assert verdicts[subject.sid]["accept"] is True, verdicts[subject.sid]


# ---------------------------------------------------------------------------------------------- members
class Copycat(SubjectNode):
    """Reads the broker (subjects may read every topic) and submits an exact copy of a fellow member's
    submission (onion and commitment) in run 0, then mixes and votes like an honest member."""

    stolen: Submit | None = None

    def _compute_subscriptions(self) -> frozenset[str]:
        subs = super()._compute_subscriptions()
        return subs | {topics.all_subject_to(self._round_id)} if self._round_id is not None else subs

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out = super().receive(topic, payload, now)
        run = self._run
        if self.stolen is None and run is not None and run.number == 0 and payload:
            message = codec.decode(payload).message
            if isinstance(message, Submit) and message.run == 0 and message.group == self._group \
                    and message.sender != self.public_key:
                self.stolen = message
                out.extend(self._advance(now))
        return out

    def _advance(self, now: float) -> list[Outgoing]:
        run = self._run
        if run is not None and run.number == 0 and run.my_sealed is None and self.stolen is None:
            return []  # wait for someone's onion to copy
        return super()._advance(now)

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Submit) and message.run == 0 and self.stolen is not None:
            message = dataclasses.replace(message, onion=self.stolen.onion,
                                          inner_commitment=self.stolen.inner_commitment)
            assert self._run is not None
            self._run.submissions[self.public_key] = message.onion  # she mixes what she published
        return super()._emit(topic, message)


class UnsolicitedBlamer(SubjectNode):
    """Publishes a blame in run 0 as soon as she has submitted, without any no-go vote; otherwise
    honest (mixes, votes go)."""

    blamed: ClassVar[bool] = False

    def _advance(self, now: float) -> list[Outgoing]:
        out = super()._advance(now)
        run = self._run
        if run is not None and run.number == 0 and run.my_sealed is not None and not getattr(self, "_sent", False):
            self._sent = True
            assert self._round_id is not None and self._group is not None
            out.append(self._publish_group(Blame(self._round_id, self.public_key, self._group, 0,
                                                 run.outer.secret, (), run.my_salt, (), NO_BATCH, b"")))
        return out


class ItemDropper(SubjectNode):
    """As a mixer in run 0, drops one item and puts a copy of another in its place (the batch keeps
    its size, so only re-execution can tell)."""

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        out = super()._mix(run, step, inputs, now)
        if run.number != 0 or step not in run.batches:
            return out
        items = list(run.batches[step])
        items[0] = items[1]
        run.batches[step] = tuple(items)
        assert self._round_id is not None and self._group is not None
        batch = Batch(self._round_id, self.public_key, self._group, run.number, step, tuple(items))
        msg = self._publish_to(run.members[step], batch) if step < len(run.members) else self._publish_group(batch)
        run.my_batch = msg
        self._resend.arm(("batch", run.number), msg, now)
        return [msg]


class ShortBatch(SubjectNode):
    """As a mixer in run 0, publishes her batch with one item fewer (receivers reject it)."""

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Batch) and message.run == 0:
            message = dataclasses.replace(message, items=message.items[1:])
        return super()._emit(topic, message)


class GarbageInner(SubjectNode):
    """Seals her record to a key that is not the collector's: her innermost layer is garbage to it,
    yet her inner ciphertext is in the final batch, so she votes go and reveals."""

    def _on_announce(self, message: Announce, digest: bytes, now: float) -> list[Outgoing]:
        out = super()._on_announce(message, digest, now)
        if self._params is not None:
            self._params = dataclasses.replace(self._params, collector_kx=crypto.KxKey.generate(self._rng).public)
        return out


class LyingView(SubjectNode):
    """States another run membership in her run_keys of run 0 than the collector gave anyone."""

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, RunKeys) and message.run == 0:
            message = dataclasses.replace(message, members_digest=bytes(32))
        return super()._emit(topic, message)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_member_stating_a_false_view_is_excluded_and_nobody_complains(seed: int) -> None:
    r = run_round(LyingView, seed=seed)
    assert_only_culprit_excluded(r, "blamed_split_view")


@pytest.mark.parametrize("seed", SEEDS)
def test_copycat_is_excluded_as_the_author_of_the_copy(seed: int) -> None:
    r = run_round(Copycat, seed=seed)
    assert r.culprit.stolen is not None  # she did copy someone's submission
    assert_only_culprit_excluded(r, "blamed_copy")


@pytest.mark.parametrize("seed", SEEDS)
def test_unsolicited_blame_excludes_its_sender_and_honest_members_keep_going(seed: int) -> None:
    r = run_round(UnsolicitedBlamer, seed=seed)
    assert_only_culprit_excluded(r, "blamed_unsolicited")
    # No honest member blamed: nobody stopped mixing because of her.
    blamers = {m.sender for m in r.member_messages("blame")}
    assert blamers == {r.culprit.public_key}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mixer_dropping_an_item_is_blamed_for_tampering(seed: int) -> None:
    assert_only_culprit_excluded(run_round(ItemDropper, seed=seed), "blamed_tamper")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_short_batch_is_rejected_and_its_mixer_excluded_as_silent(seed: int) -> None:
    assert_only_culprit_excluded(run_round(ShortBatch, seed=seed), "silent")


@pytest.mark.parametrize("seed", SEEDS)
def test_garbage_inner_layer_never_yields_a_group_below_k(seed: int) -> None:
    r = run_round(GarbageInner, seed=seed)
    outcome = r.collector.outcome()
    assert outcome.completed
    assert all(size >= CONFIG.k for size in outcome.group_sizes)  # never released below k
    opened = [e for e in r.events(GroupOpened) if e.undecryptable]
    assert len(opened) == 1 and opened[0].undecryptable == 1
    group = group_of(r, r.culprit)
    verdicts = r.verdicts()
    excluded = {str(e["sid"]): str(e["reason"]) for e in outcome.excluded}
    for subject in r.subjects[1:]:
        if subject in group:
            # The group is suppressed by a signed closing statement (members `suppressed`): its honest
            # members revealed and are not in the release, and say so (as the release or the statement
            # reaches them first).
            assert verdicts[subject.sid]["reason"] in ("not_included", "excluded_after_reveal")
            assert excluded.get(subject.sid) == "suppressed"
        else:
            assert verdicts[subject.sid]["accept"] is True, verdicts[subject.sid]
    # Nobody saw a k-anonymity failure: no group below k was published.
    assert not [v for v in verdicts.values() if v["reason"] == "not_k_anonymous"]


# -------------------------------------------------------------------------------------------- collector
class RerunAfterOpen(CollectorNode):
    """Opens a group, then claims one of its members was silent and runs the group again without her,
    to subtract the two record sets (issue 12)."""

    victim: bytes | None = None
    rerun_label: int | None = None

    def _open_group(self, group: GroupState, now: float) -> list[Outgoing]:
        out = super()._open_group(group, now)
        if self.rerun_label is None and len(group.members) > 0:
            self.rerun_label = group.label
            self.victim = group.members[-1]
            group.active, group.opened = True, False
            group.set_members(tuple(m for m in group.members if m != self.victim), self._index_of)
            out.extend(self._start_run(group, ((self.victim, "silent"),), now))
        return out


class BelowKRun(CollectorNode):
    """Starts run 0 of the first group with only k - 1 of its members."""

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if group.label == 0 and group.run == -1:
            dropped = group.members[CONFIG.k - 1:]
            group.members = group.members[:CONFIG.k - 1]
            excluded = tuple((m, "silent") for m in dropped)
        return super()._start_run(group, excluded, now)


class ForeignMemberRun(CollectorNode):
    """Starts run 0 of group 0 with a member of group 1 added (members not named by their assign)."""

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if group.label == 0 and group.run == -1:
            group.members = tuple(sorted(group.members + self._groups[1].members[:1]))
        return super()._start_run(group, excluded, now)


class SplitMembership(CollectorNode):
    """Shows one member of the largest group a run without its last member (a subset, at least k) and
    everyone else the whole group: a split view of the run. It does not blame its victim."""

    target: bytes | None = None

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        out = super()._start_run(group, excluded, now)
        if group.run == 0 and len(group.members) > CONFIG.k and self.target is None:
            self.target = group.members[0]
            real = codec.decode(out[-1].payload).message
            fake = dataclasses.replace(real, members=group.members[:-1])
            inbox = topics.inbox(self.round_id, self.target)
            out = [o for o in out if o.topic != inbox] + [Outgoing(inbox, self._sign(fake))]
            self._resend.arm(("shuffle_start", group.label), tuple(out), now)  # and keep re-sending it
        return out

    def _on_deviation(self, group: GroupState, sender: bytes, exc: Any, now: float) -> list[Outgoing] | None:
        return None


class ForgedReleaseRoot(CollectorNode):
    """Publishes a release naming another roster root than the one it published."""

    def _publish_release(self, now: float) -> list[Outgoing]:
        super()._publish_release(now)
        assert self._release_out is not None
        release = codec.decode(self._release_out.payload).message
        forged = dataclasses.replace(release, roster_root=bytes(32))
        self._release_out = Outgoing(self._release_out.topic, self._sign(forged), retain=True)
        self._release_digest = codec.payload_digest_of(self._release_out.payload)
        return [self._release_out]


def _refusals(r: Round) -> dict[str, str]:
    return {e.sid: e.reason for e in r.events(RunRefused)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the deviant's dissolved group has no centroid
@pytest.mark.parametrize("seed", SEEDS)
def test_rerun_after_reveal_is_refused_and_reported(seed: int) -> None:
    r = run_round(collector_class=RerunAfterOpen, seed=seed)
    c = r.collector
    assert isinstance(c, RerunAfterOpen) and c.rerun_label is not None
    # The group was opened once only: no second record set to subtract.
    assert len([e for e in r.events(GroupOpened) if e.group == c.rerun_label]) == 1
    assert not [m for m in r.member_messages("reveal") if m.group == c.rerun_label and m.run > 0]
    assert not [m for m in r.member_messages("run_keys") if m.group == c.rerun_label and m.run > 0]
    members = [s for s in r.subjects if s._group == c.rerun_label]
    refusals = _refusals(r)
    verdicts = r.verdicts()
    for subject in members:
        expected = "excluded_after_reveal" if subject.public_key == c.victim else "rerun_after_reveal"
        assert refusals.get(subject.sid) == expected
        assert verdicts[subject.sid]["accept"] is False and verdicts[subject.sid]["reason"] == expected


@pytest.mark.parametrize("seed", SEEDS)
def test_a_run_below_k_is_refused(seed: int) -> None:
    r = run_round(collector_class=BelowKRun, seed=seed)
    in_run = [s for s in r.subjects if s._group == 0 and s.sid in _refusals(r)]
    assert in_run and all(_refusals(r)[s.sid] == "run_below_k" for s in in_run)
    # None of them ever sent keys (nor anything else) in a run below k.
    senders = {m.sender for m in r.member_messages("run_keys") if m.group == 0 and m.run == 0}
    assert not senders & {s.public_key for s in in_run}
    verdicts = r.verdicts()
    assert all(verdicts[s.sid]["reason"] == "run_below_k" for s in in_run)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_run_with_members_outside_the_assigned_group_is_refused(seed: int) -> None:
    r = run_round(collector_class=ForeignMemberRun, seed=seed)
    refusals = _refusals(r)
    group0 = [s for s in r.subjects if s._group == 0]
    assert group0 and all(refusals.get(s.sid) == "run_not_in_group" for s in group0)
    senders = {m.sender for m in r.member_messages("run_keys") if m.group == 0 and m.run == 0}
    assert not senders & {s.public_key for s in group0}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_split_view_of_a_run_is_reported(seed: int) -> None:
    r = run_round(collector_class=SplitMembership, n=22, seed=seed)
    c = r.collector
    assert isinstance(c, SplitMembership) and c.target is not None
    target = next(s for s in r.subjects if s.public_key == c.target)
    assert r.verdicts()[target.sid]["reason"] == "split_view"
    # Nothing of the split run was opened.
    assert not [m for m in r.member_messages("reveal") if m.group == target._group and m.run == 0]


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_a_release_naming_another_roster_is_a_complaint_and_binds_the_verdict(seed: int) -> None:
    r = run_round(collector_class=ForgedReleaseRoot, seed=seed)
    verdicts = r.verdicts()
    assert verdicts and all(v["reason"] == "roster_mismatch" and v["accept"] is False for v in verdicts.values())
    for subject in r.subjects:
        assert subject.verdict is not None and subject._roster_root is not None
        assert subject.verdict.roster_root == subject._roster_root  # the roster she saw, not the release's


# ---------------------------------------------------------------------------------------------- verdicts
def test_a_verdict_carries_accept_reason_and_bindings_only() -> None:
    names = [f.name for f in dataclasses.fields(Verdict)]
    assert names == ["round_id", "sender", "accept", "reason", "release_digest", "roster_root"]
    r = run_round(n=12, seed=4)
    outcome = r.collector.outcome()
    assert outcome.completed and all(set(v) == {"sid", "accept", "reason"} for v in outcome.verdicts)
    for subject in r.subjects:
        # d and the plausibility stay on her device.
        assert subject.audit is not None and subject.verdict is not None
        assert subject.verdict.release_digest == codec.payload_digest_of(r.collector._release_out.payload)  # type: ignore[union-attr]
    assert all(v["accept"] for v in outcome.verdicts)


# ---------------------------------------------------------------------------------------------- dispatch
class CountingVotes(SubjectNode):
    """Overrides a handler: the transition table must dispatch to the override."""

    seen: ClassVar[list[str]] = []

    def _on_vote(self, message: Vote, digest: bytes, now: float) -> list[Outgoing]:
        CountingVotes.seen.append(self.sid)
        return super()._on_vote(message, digest, now)


def test_a_subclass_override_of_a_handler_is_dispatched() -> None:
    CountingVotes.seen.clear()
    r = run_round(CountingVotes, n=9, seed=5, culprits=9)
    assert r.collector.outcome().completed
    assert set(CountingVotes.seen) == {s.sid for s in r.subjects}
