"""Deviating subjects: each a `SubjectNode` that overrides one narrow hook.

| name | what she does | hook |
|---|---|---|
| ``silent`` | stops at ``phase`` (register, keys/sharing, submit, mix, vote, reveal, verdict) | outgoing filter |
| ``leave-after-grouping`` | leaves once grouped: sends nothing after her assign, finished | outgoing filter |
| ``free-rider`` | registers and publishes her run keys, never submits her record | outgoing filter |
| ``tamper`` | as a mixer in every run, alters one item of her batch | `_emit` |
| ``withhold`` | as a mixer in every run, drops one item (a copy of another keeps the size) | `_emit` |
| ``copycat`` | submits a copy of a fellow member's onion and commitment in every run | `_emit`, `receive` |
| ``false-complaint`` | votes no-go on a correct final batch in every run | `_emit` |
| ``wrong-digest`` | votes go naming a final batch nobody signed | `_emit` |
| ``two-finals`` | as final mixer, signs a second final batch for the fellow members (with ``split-final``) | `_mix` |
| ``resubmit`` | votes no-go, re-sends with her blame a second submission (new onion) | `_emit`, `_start_blame` |
| ``unsolicited-blame`` | publishes a blame in every run without any no-go vote | `_advance` |
| ``garbage-inner`` | seals her record to a key that is not the collector's, votes go | `_on_announce` |
| ``misreport-qi`` | registers her QIs shifted by ``shift`` | her record |
| ``misreport-confidential`` | submits her confidential values shifted by ``shift`` | her record |
| ``key-split`` | shows each fellow alone a second signed run_keys, first (``via``) | `_on_shuffle_start` |
| ``equivocate`` | as a mixer, signs an honest and a tampered batch, sent as ``via`` says | `_mix` |
| ``direct-no-go`` | votes go to the group, no-go (and blames) to one fellow member alone | `_advance` |
| ``keys-ahead`` | publishes, retained, run_keys for a run not started yet (``target``) | `_on_shuffle_start` |
| ``bad-key`` | publishes a run key of small order (``which``: inner or outer): no key agreement with it | `_emit` |
| ``early-no-go`` | votes no-go (and blames) once she holds the run keys, before any batch | `_advance` |
| ``late-no-go`` | votes go; at the reveal_open blames with a no-go of her own, never revealing | `_on_reveal_open` |

``deviated`` says whether the deviation took place (a mixer who was never asked to mix did not
tamper). Nothing here is a protocol change: the honest code runs around every hook.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from coutil.protocol import crypto, topics
from coutil.protocol.messages import Announce, Batch, Blame, Message, RevealOpen, RunKeys, ShuffleStart, Submit, Vote
from coutil.protocol.node import Outgoing
from coutil.protocol.shuffle import NO_BATCH, batch_digest, inner_commitment, members_digest, outer_aad
from coutil.protocol.states import SubjectState
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_core import SubjectRun

__all__ = [
    "BadKey", "Copycat", "DirectNoGo", "EarlyNoGo", "Equivocate", "FalseComplaint", "FreeRider", "GarbageInner",
    "HideSubmit", "KeySplit", "KeysAhead", "LateNoGo", "LeaveAfterGrouping", "MisreportConfidential", "MisreportQI",
    "Resubmit", "Silent", "SubjectStrategy", "Tamper", "TwoFinals", "UnsolicitedBlame", "Withhold", "WrongDigest",
]


class SubjectStrategy(SubjectNode):
    """Base of the subject strategies: a name, parameters with defaults, and ``deviated``."""

    NAME: ClassVar[str] = ""
    #: Parameter name -> default (its type is the type a round file must give).
    PARAMS: ClassVar[dict[str, object]] = {}
    #: Parameter name -> the values it may take (when not any value of its type).
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}

    deviated: bool = False
    params: dict[str, object]

    def configure(self, params: Mapping[str, object]) -> None:
        """Set the strategy's parameters (validated by `coutil.adversary.plan`)."""
        self.params = {**self.PARAMS, **params}
        #: The runs in which she deviated (a strategy deviates in every run she takes part in, so
        #: that two deviators in one group are both caught: a blame names the first deviation).
        self.deviated_runs: set[int] = set()

    def _deviate(self, run: int) -> bool:
        """Whether to deviate in ``run`` now (once per run); records it."""
        if run in self.deviated_runs:
            return False
        self.deviated_runs.add(run)
        self.deviated = True
        return True

    def param_float(self, name: str) -> float:
        value = self.params[name]
        assert isinstance(value, int | float)
        return float(value)

    def param_str(self, name: str) -> str:
        return str(self.params[name])

    def _turn_go_vote(self, message: Message, **fields: object) -> Message:
        """Her go vote of a run, once per run, with ``fields`` changed and kept as her vote (what she then acts
        on: ``go=False`` makes her blame, as a no-go voter must); any other message as it is."""
        run = self._run
        if not isinstance(message, Vote) or not message.go or run is None or not self._deviate(message.run):
            return message
        turned = dataclasses.replace(message, **fields)  # type: ignore[arg-type]
        run.votes[self.public_key] = turned
        run.my_vote = turned.go
        return turned

    def _draw_key_starting(self, first_byte: int) -> None:
        """Draw her key again until it starts with ``first_byte``: 0 sorts first (mixer 1 of her group's runs),
        0xFF last (the final mixer)."""
        while self.public_key[0] != first_byte:
            self._identity = crypto.SigningKey.generate(self._rng)
            self.public_key = self._identity.public
        self.sid = self.client_id = topics.sid_of(self.public_key)


# ---------------------------------------------------------------------------------------------- silence
#: Silent phases -> the first message she no longer sends.
SILENT_PHASES: dict[str, str] = {
    "register": "register", "keys": "run_keys", "sharing": "run_keys", "submit": "submit", "mix": "batch",
    "vote": "vote", "reveal": "reveal", "verdict": "verdict",
}


class Silent(SubjectStrategy):
    """Sends nothing from the first message of ``phase`` on (and never again): a member who goes
    silent mid-protocol, on purpose or by crashing."""

    NAME = "silent"
    PARAMS: ClassVar[dict[str, object]] = {"phase": "sharing"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"phase": tuple(SILENT_PHASES)}
    silenced: bool = False

    def _stops_at(self) -> str:
        return SILENT_PHASES[self.param_str("phase")]

    def _filter(self, out: list[Outgoing]) -> list[Outgoing]:
        if self.silenced:
            return []
        stop = self._stops_at()
        kept: list[Outgoing] = []
        for message in out:
            if message.payload and stop == self._caches.decode(message.payload, self._limits).message.TAG:
                self.silenced = self.deviated = True
                self._resend.clear()
                return kept
            kept.append(message)
        return kept

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        return self._filter(super().receive(topic, payload, now))

    def on_timer(self, now: float) -> list[Outgoing]:
        return self._filter(super().on_timer(now))

    def on_transport(self, up: bool, now: float) -> list[Outgoing]:
        return self._filter(super().on_transport(up, now))


class LeaveAfterGrouping(Silent):
    """Leaves the round once her group is known: from her assign on she sends nothing and her host
    may disconnect her (``finished``)."""

    NAME = "leave-after-grouping"
    PARAMS: ClassVar[dict[str, object]] = {}

    def _stops_at(self) -> str:
        return "run_keys"

    def _filter(self, out: list[Outgoing]) -> list[Outgoing]:
        if self.state == SubjectState.SHARING and not self.silenced:
            self.silenced = self.deviated = True
            self._resend.clear()
        return [] if self.silenced else out

    @property
    def finished(self) -> bool:
        return self.silenced or super().finished


class FreeRider(Silent):
    """Wants the release without contributing: registers and publishes her run keys (so her group
    counts on her), never submits her record."""

    NAME = "free-rider"
    PARAMS: ClassVar[dict[str, object]] = {}

    def _stops_at(self) -> str:
        return "submit"


# ---------------------------------------------------------------------------------------------- mixing
class Tamper(SubjectStrategy):
    """As a mixer in every run, alters one item of her batch (one byte of its authentication tag): the
    next mixer cannot peel it, or, in the final batch, its author misses her ciphertext."""

    NAME = "tamper"

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Batch) and self._run is not None and self._deviate(message.run):
            items = list(message.items)
            items[0] = items[0][:-1] + bytes([items[0][-1] ^ 1])
            message = dataclasses.replace(message, items=tuple(items))
            self._run.batches[message.step] = message.items  # she keeps what she published
        return super()._emit(topic, message)


class Withhold(SubjectStrategy):
    """As a mixer in every run, drops one item and puts a copy of another in its place (the batch keeps
    its size, so only the final batch and re-execution show it)."""

    NAME = "withhold"

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Batch) and self._run is not None and len(message.items) > 1 \
                and self._deviate(message.run):
            items = list(message.items)
            items[0] = items[1]
            message = dataclasses.replace(message, items=tuple(items))
            self._run.batches[message.step] = message.items
        return super()._emit(topic, message)


class Copycat(SubjectStrategy):
    """Reads every member's direct traffic (subjects can read the broker's group topics) and submits
    an exact copy of a fellow member's submission (onion and commitment) in every run, then mixes and
    votes like an honest member."""

    NAME = "copycat"
    stolen: Submit | None = None

    def _compute_subscriptions(self) -> frozenset[str]:
        subs = super()._compute_subscriptions()
        return subs | {topics.all_subject_to(self._round_id)} if self._round_id is not None else subs

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out = super().receive(topic, payload, now)
        run = self._run
        if run is not None and (self.stolen is None or self.stolen.run != run.number) and payload:
            try:
                message = self._caches.decode(payload, self._limits).message
            except Exception:
                return out
            if isinstance(message, Submit) and message.run == run.number and message.group == self._group \
                    and message.sender != self.public_key and message.sender in run.members:
                self.stolen = message
                out.extend(self._advance(now))
        return out

    def _advance(self, now: float) -> list[Outgoing]:
        run = self._run
        if run is not None and run.my_sealed is None and (self.stolen is None or self.stolen.run != run.number):
            return []  # wait for someone's onion to copy
        return super()._advance(now)

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Submit) and self.stolen is not None and self.stolen.run == message.run:
            message = dataclasses.replace(message, onion=self.stolen.onion,
                                          inner_commitment=self.stolen.inner_commitment)
            assert self._run is not None
            self._run.submissions[self.public_key] = message.onion  # she mixes what she published
            self._deviate(message.run)
        return super()._emit(topic, message)


# ---------------------------------------------------------------------------------------------- voting and blame
class FalseComplaint(SubjectStrategy):
    """Votes no-go on a correct final batch in every run (and blames, as a no-go voter must)."""

    NAME = "false-complaint"

    def _emit(self, topic: str, message: Message) -> Outgoing:
        return super()._emit(topic, self._turn_go_vote(message, go=False))


class HideSubmit(FalseComplaint):
    """Keeps her submission from the collector, then votes no-go, so that re-execution lacks its input
    (found by a reviewer: with the rule that a blame the collector cannot resolve runs the group again,
    then excludes it whole, one member got her whole group excluded). ``via = "withhold"``: her per-round
    key drawn until it sorts first (mixer 1 of every run), she mixes her own submission without ever
    publishing it (an ACL-compliant member can), nor carrying it in her blame; ``via = "inbox"``: she sends it
    to mixer 1's inbox, which mixer 1 reads (relays come there) and the collector does not (the shipped ACL
    forbids it: the in-memory bus has none), and mixer 1's blame, which carries the submissions she mixed, shows
    it to the collector."""

    NAME = "hide-submit"
    PARAMS: ClassVar[dict[str, object]] = {"via": "withhold"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"via": ("withhold", "inbox")}

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        if self.param_str("via") == "withhold":
            self._draw_key_starting(0)

    def _emit(self, topic: str, message: Message) -> Outgoing:
        out = super()._emit(topic, message)
        run = self._run
        if not isinstance(message, Submit) or run is None or self._round_id is None:
            return out
        if self.param_str("via") == "inbox":
            self.deviated = True
            return Outgoing(topics.inbox(self._round_id, run.members[0]), out.payload)
        if run.members[0] == self.public_key:
            self.deviated = True
            # Published where nobody listens: she mixes it herself all the same.
            return Outgoing(topics.subject_up(self._round_id, self.public_key) + "/withheld", out.payload)
        return out

    def _start_blame(self, run: SubjectRun, now: float) -> list[Outgoing]:
        if self.param_str("via") == "withhold":
            run.taken.pop((0, self.public_key), None)  # mixer 1 withholding hers: her blame would show it
        return super()._start_blame(run, now)


class Resubmit(FalseComplaint):
    """Votes no-go on a correct final batch and re-sends, with her blame, a second signed submission: the same
    sealed item and commitment under a new outer onion, in place of the one mixer 1 mixed (found by an attacker
    on the blames, SPEC §3). The collector must never hold her first one: ``via = "broker"``, her first
    submission goes where it should, and the broker strategy ``hide-first-submit`` (a broker operator colluding
    with her) keeps the collector's copy from it; ``via = "inbox"``, she sends her first one to mixer 1's inbox,
    which the collector does not read (the shipped ACL forbids it: the in-memory bus has none). Before mixer 1's
    blame carried the submissions she mixed, re-execution found mixer 1's batch no permutation of the peels of
    the submissions the collector held and named the honest mixer 1 `blamed_tamper`. Her key is drawn until it
    sorts last, so that she is never mixer 1 (whose own blame would carry her first submission)."""

    NAME = "resubmit"
    PARAMS: ClassVar[dict[str, object]] = {"via": "broker"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"via": ("broker", "inbox")}

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self._draw_key_starting(0xFF)

    def _emit(self, topic: str, message: Message) -> Outgoing:
        out = super()._emit(topic, message)
        run = self._run
        if isinstance(message, Submit) and run is not None and run.my_submit is None and self._round_id is not None \
                and self.param_str("via") == "inbox":
            return Outgoing(topics.inbox(self._round_id, run.members[0]), out.payload)
        return out

    def _start_blame(self, run: SubjectRun, now: float) -> list[Outgoing]:
        if run.my_sealed is not None and run.my_submit is not None and run.members[0] != self.public_key \
                and self._round_id is not None and self._group is not None:
            rid, group = self._round_id, self._group
            onion = crypto.build_onion(run.my_sealed, [run.keys[m][0] for m in run.members],
                                       lambda j: outer_aad(rid, group, run.number, j), self._rng)
            second = Submit(rid, self.public_key, group, run.number, onion, inner_commitment(run.my_sealed,
                                                                                             run.my_salt))
            run.my_submit = self._publish_to(run.members[0], second)  # what the honest code re-sends with a blame
            self._deviate(run.number)
            self.deviated = True
        return super()._start_blame(run, now)


class UnsolicitedBlame(SubjectStrategy):
    """Publishes a blame in every run as soon as she has submitted, without any no-go vote; otherwise
    honest (mixes, votes go)."""

    NAME = "unsolicited-blame"

    def _advance(self, now: float) -> list[Outgoing]:
        out = super()._advance(now)
        run = self._run
        if run is not None and run.my_sealed is not None and self._deviate(run.number):
            assert self._round_id is not None and self._group is not None
            out.append(self._publish_group(Blame(self._round_id, self.public_key, self._group, run.number,
                                                 run.outer.secret, (), run.my_salt, (), NO_BATCH, b"")))
        return out


class GarbageInner(SubjectStrategy):
    """Seals her record to a key that is not the collector's: her innermost layer is garbage to it,
    yet her inner ciphertext is in the final batch, so she votes go and reveals."""

    NAME = "garbage-inner"

    def _on_announce(self, message: Announce, digest: bytes, now: float) -> list[Outgoing]:
        out = super()._on_announce(message, digest, now)
        if self._params is not None:
            self._params = dataclasses.replace(self._params, collector_kx=crypto.KxKey.generate(self._rng).public)
            self.deviated = True
        return out


# ---------------------------------------------------------------------------------------------- misreporting
class MisreportQI(SubjectStrategy):
    """Registers her QIs shifted by ``shift`` (each attribute): indistinguishable from the truth. She
    lands in another group (or moves her group's centroid) and audits the release as she reported."""

    NAME = "misreport-qi"
    PARAMS: ClassVar[dict[str, object]] = {"shift": 5.0}
    true_qi: tuple[float, ...] = ()

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self.true_qi = self._qi
        self._qi = tuple(v + self.param_float("shift") for v in self._qi)
        self._caches.expect(self._qi + self._confidential)
        self.deviated = True


class MisreportConfidential(SubjectStrategy):
    """Submits her confidential values shifted by ``shift``: indistinguishable from the truth; the
    release carries her false values."""

    NAME = "misreport-confidential"
    PARAMS: ClassVar[dict[str, object]] = {"shift": 1000.0}
    true_confidential: tuple[float, ...] = ()

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self.true_confidential = self._confidential
        self._confidential = tuple(v + self.param_float("shift") for v in self._confidential)
        self._caches.expect(self._qi + self._confidential)
        self.deviated = True



# ---------------------------------------------------------------------------------------------- split views
class KeySplit(SubjectStrategy):
    """Shows each fellow member a run key the others never see: before her real run_keys, a second one,
    signed, with another inner key, on her topic towards that member (``via = "direct"``) or on the
    member's inbox (``"inbox"``, where behind the shipped ACL only the collector publishes: a collector
    relaying for her). A member who took it would seal her inner layer to a key only the splitter
    holds, so that her item alone needs it when opened: her record singled out. With the broker
    strategy ``split-keys`` (a broker operator colluding with her) the odd key reaches that member on
    the splitter's own group topic instead of the real one."""

    NAME = "key-split"
    PARAMS: ClassVar[dict[str, object]] = {"via": "direct"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"via": ("direct", "inbox")}
    #: The inner secrets she showed, by fellow member (what she would open their items with).
    shown: dict[bytes, crypto.KxKey]

    def _on_shuffle_start(self, message: ShuffleStart, digest: bytes, now: float) -> list[Outgoing]:
        out = super()._on_shuffle_start(message, digest, now)
        run = self._run
        if run is None or run.number != message.run or self._round_id is None or not self._deviate(run.number):
            return out
        self.shown = {}
        odd: list[Outgoing] = []
        for member in run.members:
            if member == self.public_key:
                continue
            inner = self.shown[member] = crypto.KxKey.generate(self._rng)
            keys = RunKeys(self._round_id, self.public_key, message.group, run.number, run.outer.public,
                           inner.public, self._view_root(), run.members_digest)
            topic = topics.subject_to(self._round_id, self.public_key, member) \
                if self.param_str("via") == "direct" else topics.inbox(self._round_id, member)
            odd.append(self._emit(topic, keys))
        return [*odd, *out]


class Equivocate(SubjectStrategy):
    """As a mixer in every run, signs two batches for her step: an honest one and one with an item
    dropped (a copy of another in its place). ``via = "other-member"``: the honest one on her topic
    towards another member than the one it is for (so that the collector, reading every such topic,
    might keep it), the tampered one to the next mixer; ``"same-topic"``: the honest one, then the
    tampered one, both where the batch goes."""

    NAME = "equivocate"
    PARAMS: ClassVar[dict[str, object]] = {"via": "other-member"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"via": ("other-member", "same-topic")}

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        out = super()._mix(run, step, inputs, now)
        honest = run.batches.get(step)
        if honest is None or len(honest) < 2 or self._round_id is None or not self._deviate(run.number):
            return out
        assert self._group is not None
        items = list(honest)
        items[0] = items[1]
        tampered = Batch(self._round_id, self.public_key, self._group, run.number, step, tuple(items))
        batch = Batch(self._round_id, self.public_key, self._group, run.number, step, honest)
        g = len(run.members)
        right = topics.subject_to(self._round_id, self.public_key, run.members[step]) if step < g else \
            topics.subject_group(self._round_id, self.public_key)
        elsewhere = next((m for m in run.members if m != self.public_key and (step >= g or m != run.members[step])),
                         None)
        sent = self._emit(right, tampered)
        run.my_batch = sent  # what she re-sends with a blame
        if self.param_str("via") == "same-topic" or elsewhere is None:
            # (In a run of two before the last step nobody but the next mixer is left to show the other one.)
            return [*out, sent]
        run.batches[step] = tampered.items  # she goes on with what the next mixer got
        return [self._emit(topics.subject_to(self._round_id, self.public_key, elsewhere), batch), sent]


class TwoFinals(SubjectStrategy):
    """As final mixer (her key drawn until it sorts last), signs a second final batch, her items in another order,
    for each fellow member on her topic towards that member, before her real one. With the broker strategy
    ``split-final`` (a broker operator colluding with her) every fellow gets it in place of her real one, the
    collector the real one (found by an attacker on the blames): the members vote go on theirs, the collector's
    group is never ready, nobody votes no-go and nobody is missing, and the reveal barrier held the whole round.
    Now the collector relays the run, and a member holding two final batches of hers blames with both."""

    NAME = "two-finals"

    def configure(self, params: Mapping[str, object]) -> None:
        super().configure(params)
        self._draw_key_starting(0xFF)

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        out = super()._mix(run, step, inputs, now)
        final = run.batches.get(step)
        if step != len(run.members) or final is None or len(final) < 2 or self._round_id is None \
                or self._group is None or not self._deviate(run.number):
            return out
        other = Batch(self._round_id, self.public_key, self._group, run.number, step, (*final[1:], final[0]))
        shown = [self._emit(topics.subject_to(self._round_id, self.public_key, member), other)
                 for member in run.members if member != self.public_key]
        return [*shown, *out]


class WrongDigest(SubjectStrategy):
    """Votes go naming a final batch nobody signed (found while closing ``two-finals``): the collector's group was
    never ready, nobody voted no-go and nobody was missing, and the reveal barrier held the whole round. Now the
    run is relayed, and at its deadline the voters who name another final batch than the collector holds, and did
    not blame with two of them, are excluded (``silent``: the collector cannot tell her from a member who holds a
    second final batch a broker kept the relay from, so it states no blame)."""

    NAME = "wrong-digest"

    def _emit(self, topic: str, message: Message) -> Outgoing:
        return super()._emit(topic, self._turn_go_vote(message, final_digest=bytes(32)))


class DirectNoGo(SubjectStrategy):
    """Votes go on her group topic, and, just before, no-go with a blame on her topic towards one
    fellow member only: that member alone sees a no-go the others and the collector never see."""

    NAME = "direct-no-go"

    def _advance(self, now: float) -> list[Outgoing]:
        run = self._run
        voted = run is not None and run.my_vote is not None
        out = super()._advance(now)
        if run is None or voted or not run.my_vote or self._round_id is None or not self._deviate(run.number):
            return out
        assert self._group is not None and run.final_digest is not None
        fellow = next(m for m in run.members if m != self.public_key)
        topic = topics.subject_to(self._round_id, self.public_key, fellow)
        no_go = self._emit(topic, self._vote(run, False, run.final_digest))
        mixed = run.batches.get(run.members.index(self.public_key) + 1)
        blame = Blame(self._round_id, self.public_key, self._group, run.number, run.outer.secret,
                      run.my_permutation, run.my_salt, run.taken_envelopes(),
                      NO_BATCH if mixed is None else batch_digest(mixed), no_go.payload)
        return [no_go, self._emit(topic, blame), *out]


class KeysAhead(SubjectStrategy):
    """Publishes, retained, a signed run_keys for a run the collector has not started: the next run of her
    group (``target = "next-run"``, with the members she guesses it will have) or a run of another group
    (``"other-group"``, one she expects to be moved into by a merge). Nobody takes it now (IGNORE
    ``early``/``wrong_group``), but a member who subscribes to her topic once that run starts would get
    it from the broker's retained store before her real keys, and keep it: a key split without any
    help from the broker."""

    NAME = "keys-ahead"
    PARAMS: ClassVar[dict[str, object]] = {"target": "next-run"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"target": ("next-run", "other-group")}

    def _on_shuffle_start(self, message: ShuffleStart, digest: bytes, now: float) -> list[Outgoing]:
        out = super()._on_shuffle_start(message, digest, now)
        run = self._run
        if run is None or run.number != message.run or self._round_id is None or not self._deviate(run.number):
            return out
        ahead = self.param_str("target") == "next-run"
        group, number = (message.group, run.number + 1) if ahead else (message.group + 1, 0)
        keys = RunKeys(self._round_id, self.public_key, group, number, crypto.KxKey.generate(self._rng).public,
                       crypto.KxKey.generate(self._rng).public, self._view_root(),
                       members_digest(self._announce_digest, group, number, run.members))
        return [*out, dataclasses.replace(self._publish_group(keys), retain=True)]


class BadKey(SubjectStrategy):
    """Publishes a run key of small order (``which``: her inner or outer key): every key agreement with
    it gives the all-zero secret, so nobody can seal to her."""

    NAME = "bad-key"
    PARAMS: ClassVar[dict[str, object]] = {"which": "inner"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"which": ("inner", "outer")}
    #: The point of order 1 (u = 1).
    SMALL_ORDER = bytes([1]) + bytes(31)

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, RunKeys) and message.sender == self.public_key and self._deviate(message.run):
            if self.param_str("which") == "inner":
                message = dataclasses.replace(message, inner_kx=self.SMALL_ORDER)
            else:
                message = dataclasses.replace(message, outer_kx=self.SMALL_ORDER)
        return super()._emit(topic, message)


class EarlyNoGo(SubjectStrategy):
    """Votes no-go (and blames) as soon as she holds every member's run keys, before any batch: as a mixer
    who claims an item she cannot peel, whatever her position, so that honest mixers blame before they mix."""

    NAME = "early-no-go"

    def _advance(self, now: float) -> list[Outgoing]:
        out = super()._advance(now)
        run = self._run
        if run is None or run.my_sealed is None or run.my_vote is not None or run.blamed \
                or not self._deviate(run.number):
            return out
        return [*out, *self._halt(run, now)]  # as a mixer halts on an item she cannot peel


class LateNoGo(SubjectStrategy):
    """Votes go; once the reveal_open comes, signs a no-go vote of her own (published nowhere) and blames with it,
    never revealing: her group is suppressed. Her blame shows her own two votes of one run (found by a reviewer:
    relabelled as a late blamer, she was excluded `suppressed` like the honest members she suppressed)."""

    NAME = "late-no-go"

    def _on_reveal_open(self, message: RevealOpen, digest: bytes, now: float) -> list[Outgoing]:
        run = self._run
        if run is None or run.number != message.run or not run.my_vote or run.revealed or run.blamed \
                or run.final_digest is None or self._round_id is None or not self._deviate(run.number):
            return super()._on_reveal_open(message, digest, now)
        no_go = self._emit(topics.subject_group(self._round_id, self.public_key),
                           self._vote(run, False, run.final_digest))
        run.no_go_vote = no_go.payload  # carried by her blame, published nowhere else
        return self._start_blame(run, now)
