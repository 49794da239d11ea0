"""Deviating brokers: the broker operator of SPEC §3 as named strategies of the in-memory bus.

A broker carries every message and signs none. The bus (`coutil.net.memory.MemoryBus`, its ``broker``)
consults a `BrokerStrategy` for every publication (`BrokerStrategy.on_publish`: route it or not, and
messages of the broker's own to publish later) and every delivery (`BrokerStrategy.on_deliver`: as
published, dropped, late, twice, or other bytes). Whatever the broker *made* (a replay, an extra copy,
a substitute, a late copy) is flagged, and the bus reports what its receiver did with it
(`BrokerStrategy.observe`: the reasons of the rejections it recorded, none if it took the message), so
the report says whether the defence of SPEC §7.2 is what stopped it.

- ``replay-runs``: every message of run r of a group (shuffle_start, run_keys, submit, batch, vote,
  blame, reveal_open, reveal, group_done) is published again, on its own topic, whenever a later run of
  that group enters a phase (replays across runs within a round);
- ``replay-round``: every publication of an *earlier round* (the same data and collector key, another
  round id and other subject keys: the collector's previous round) is published again in this round
  when this round first reaches the same phase, its topic rewritten to this round and to the subject of
  the same row (replays across rounds: announce, registrations, roster, assigns, ..., verdicts, release);
- ``drop-victim``: drops every message from or to the victim from a phase on, for ``duration`` seconds
  or for good (a broker that drops); with ``against_earlier`` it also subtracts this release from an
  earlier round's over the same records (SPEC §3's known limit across rounds, reported as ``across_rounds``);
- ``duplicate`` / ``reorder``: delivers a seeded share of the messages twice / late;
- ``split-retained``: shows the victim another retained bulletin (roster, release or announce) than
  everyone else: the earlier round's, or the real one with a forged signature;
- ``replay-pre-merge``: after a merge, re-delivers what the collector signed for the target group *before*
  it: to a member moved in, the group's earlier shuffle_start (without her), her real one held back a
  second (``mode = "start"``); to an original member, her own pre-merge assign (fewer members), two
  seconds after the merge's (``"assign"``) or right after her reveal (``"assign-after-reveal"``). Found by
  an attacker: before the fix movers were excluded (`silent`), members shrank their view and excluded
  each other, and after a reveal they complained ``regroup_after_reveal`` against an honest collector;
- ``split-keys``: colludes with a member playing ``key-split``: the second run_keys she signed for one
  fellow member never travels on the topic she sent it on; that member gets it instead of the real one
  on the splitter's group topic (everyone else, the collector included, gets the real one);
- ``swap-vote``: the same for a vote, with a member playing ``direct-no-go``: one fellow member gets her
  no-go vote in place of her go vote, ``delay`` seconds late;
- ``split-final``: the same for the final batch, with the final mixer playing ``two-finals`` (``victim``: her row):
  every fellow member gets her second final batch, the collector her real one;
- ``late-final``: holds that second final batch and shows it to one fellow just before the reveal_open of her group;
- ``hide-first-submit``: colludes with a member playing ``resubmit`` (its ``victim``: her row): the collector never
  gets her first submission of a run (mixer 1 does), so that it holds only the second one she re-sends with her
  blame.

A strategy never holds a key of the round: it cannot sign, so all it can do is route, drop, delay, copy
and replay bytes it saw. The driver (`coutil.round.memory`) records the earlier round a strategy needs
(``NEEDS_EARLIER_ROUND``) and names the victim's node (``NEEDS_VICTIM``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import msgpack

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, topics
from coutil.protocol.messages import Assign, Message, ShuffleStart
from coutil.protocol.node import Publication, SeededRandom

__all__ = [
    "RUN_TAGS", "BrokerStrategy", "Copy", "DropVictim", "Duplicate", "EarlierRound", "HideFirstSubmit", "Injection",
    "LateFinal", "Peek", "Reorder", "ReplayPreMerge", "ReplayRound", "ReplayRuns", "SplitFinal", "SplitKeys",
    "SplitRetained", "SwapVote", "peek",
]

#: Messages that name a group and a run (their fields 3 and 4, SPEC §7.3).
RUN_TAGS = frozenset({"shuffle_start", "run_keys", "submit", "batch", "vote", "blame", "reveal_open", "reveal",
                      "group_done"})
#: The phases a drop can start at: ``start`` or the first publication of one of these tags.
PHASE_TAGS = ("start", "roster", "assign", "shuffle_start", "run_keys", "submit", "batch", "vote", "reveal_open",
              "reveal", "group_done", "release")


@dataclass(frozen=True)
class Copy:
    """One delivery of a message the broker makes to one receiver."""

    #: On top of the network's delay (seconds).
    delay: float = 0.0
    #: Other bytes than the published ones (None: the published bytes).
    payload: bytes | None = None
    #: The broker made or altered this delivery: its receiver's verdict on it is reported (`observe`).
    made: bool = False


@dataclass(frozen=True)
class Injection:
    """A message the broker publishes itself, ``delay`` seconds from now, to the subscribers of ``topic``."""

    delay: float
    topic: str
    payload: bytes


@dataclass(frozen=True)
class EarlierRound:
    """What a broker kept of an earlier round: its round id, node ids (dataset order), publications and
    its public release's confidential records (row by row)."""

    round_id: bytes
    node_ids: tuple[str, ...]
    #: As its broker carried them (``at``: seconds since that round began).
    publications: tuple[Publication, ...]
    released: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True)
class Peek:
    """What a broker reads of a message without any key: the payload is signed, not encrypted."""

    tag: str
    round_id: bytes
    group: int | None = None
    run: int | None = None


def peek(payload: bytes) -> Peek | None:
    """The tag, round id and (for `RUN_TAGS`) group and run of an envelope; None if it does not parse."""
    try:
        envelope = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        inner = msgpack.unpackb(envelope[1], raw=False, strict_map_key=False)
        tag, round_id = str(inner[0]), bytes(inner[1])
        if tag in RUN_TAGS:
            return Peek(tag, round_id, int(inner[3]), int(inner[4]))
        return Peek(tag, round_id)
    except (ValueError, TypeError, IndexError, KeyError, msgpack.ExtraData, msgpack.FormatError,
            msgpack.StackError):
        return None


def payload_kind(topic: str, payload: bytes) -> str:
    """What a publication is: its tag; for an empty payload ``withdrawn`` (the announce withdrawn) or
    ``cleared`` (a member's retained run_keys cleared, SPEC §6: not a message); ``?`` if it does not parse."""
    seen = peek(payload)
    if seen is not None:
        return seen.tag
    if not payload:
        return "cleared" if topics.is_subject_group(topic) else "withdrawn"
    return "?"


def _uniform(rng: SeededRandom) -> float:
    return rng.below(2**53) / 2**53


class BrokerStrategy:
    """Base of the broker strategies: honest routing, the counts of what it did, what receivers made of it."""

    NAME: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, object]] = {}
    #: Parameter name -> the values it may take (when not any value of its type).
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: Whether it targets one subject (the ``victim`` parameter: a row of the data set).
    NEEDS_VICTIM: ClassVar[bool] = False
    #: Whether it replays an earlier round (the driver records one first).
    NEEDS_EARLIER_ROUND: ClassVar[bool] = False

    def __init__(self, params: Mapping[str, object], *, seed: int, round_id: bytes, node_ids: Sequence[str],
                 victim: str | None = None, earlier: EarlierRound | None = None) -> None:
        self.params: dict[str, object] = {**self.PARAMS, **params}
        self.round_id = round_id
        self.node_ids = tuple(node_ids)
        self.victim = victim
        self.earlier = earlier
        self.rng = SeededRandom(seed).fork("broker").fork(self.NAME)
        #: What it did: ``dropped``, ``injected``, ``duplicated``, ``delayed``, ``substituted``.
        self.actions: Counter[str] = Counter()
        #: Its deliveries by type (what it replayed, copied, substituted).
        self.made_by_kind: Counter[str] = Counter()
        #: What receivers did with what it made: rejection reason -> count (``accepted``: no rejection).
        self.received: Counter[str] = Counter()
        #: Non-ignored rejections (REJECT, not IGNORE) of what it made, by receiver.
        self.rejected_by: Counter[str] = Counter()
        #: Accepted deliveries of what it made, by type.
        self.accepted_by_kind: Counter[str] = Counter()
        self.deviated = False
        self.setup()

    @classmethod
    def needs_earlier_round(cls, params: Mapping[str, object]) -> bool:
        """Whether the driver must record an earlier round for it (with these parameters)."""
        return cls.NEEDS_EARLIER_ROUND

    def setup(self) -> None:
        """Prepare (after the parameters, the victim and the earlier round are set)."""

    def param_float(self, name: str) -> float:
        value = self.params[name]
        assert isinstance(value, int | float)
        return float(value)

    def param_str(self, name: str) -> str:
        value = self.params[name]
        assert isinstance(value, str)
        return value

    def param_int(self, name: str) -> int:
        value = self.params[name]
        assert isinstance(value, int)
        return value

    # -------------------------------------------------------------- the bus's hooks
    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        """Whether to route this publication, and the broker's own publications it triggers."""
        return True, []

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        """The deliveries of one message to one receiver (None: one, as published; empty: dropped)."""
        return None

    def observe(self, receiver: str, topic: str, payload: bytes, rejections: Sequence[tuple[str, bool]]) -> None:
        """A receiver handled a delivery the broker made: the (reason, ignored) of what it rejected."""
        kind = payload_kind(topic, payload)
        if kind == "cleared":
            return  # not a message: nothing to take or reject
        if not rejections:
            self.received["accepted"] += 1
            self.accepted_by_kind[kind] += 1
        for reason, ignored in rejections:
            self.received[reason] += 1
            if not ignored:
                self.rejected_by[receiver] += 1

    def _made(self, topic: str, payload: bytes) -> None:
        self.made_by_kind[payload_kind(topic, payload)] += 1
        self.deviated = True


class ReplayRuns(BrokerStrategy):
    """Replays every message of a group's earlier runs whenever a later run of it enters a phase."""

    NAME = "replay-runs"
    PARAMS: ClassVar[dict[str, object]] = {"delay": 0.5}

    def setup(self) -> None:
        #: group -> run -> (topic, payload) in the order carried.
        self._runs: dict[int, dict[int, list[tuple[str, bytes]]]] = {}
        self._seen: set[tuple[int, int, str]] = set()

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        seen = peek(payload)
        if seen is None or seen.group is None or seen.run is None or seen.round_id != self.round_id:
            return True, []
        runs = self._runs.setdefault(seen.group, {})
        kept = runs.setdefault(seen.run, [])
        if (topic, payload) not in kept:
            kept.append((topic, payload))
        key = (seen.group, seen.run, seen.tag)
        if key in self._seen:
            return True, []
        self._seen.add(key)
        # A later run enters a phase: everything of the group's earlier runs, again.
        delay = self.param_float("delay")
        out = [Injection(delay, t, p) for run, messages in sorted(runs.items()) if run < seen.run for t, p in messages]
        for injection in out:
            self._made(injection.topic, injection.payload)
        self.actions["injected"] += len(out)
        return True, out


class ReplayPreMerge(BrokerStrategy):
    """Re-delivers a merge's target group's collector messages from before the merge (module docstring)."""

    NAME = "replay-pre-merge"
    PARAMS: ClassVar[dict[str, object]] = {"mode": "start"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"mode": ("start", "assign", "assign-after-reveal")}

    def setup(self) -> None:
        #: group -> (run, members, payload) of its shuffle_starts with members, in the order carried.
        self._starts: dict[int, list[tuple[int, tuple[bytes, ...], bytes]]] = {}
        #: subject -> her assigns (group, members, payload), in the order carried.
        self._assigns: dict[bytes, list[tuple[int, tuple[bytes, ...], bytes]]] = {}
        #: (subject, group) whose real shuffle_start of that group is held back.
        self._held: set[tuple[bytes, int]] = set()
        #: subject -> (her inbox, her pre-merge assign), replayed when she reveals.
        self._after_reveal: dict[bytes, tuple[str, bytes]] = {}

    @staticmethod
    def _decoded(payload: bytes) -> Message | None:
        try:
            return codec.decode(payload).message
        except RemoteProtocolError:
            return None

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        kind = payload_kind(topic, payload)
        if kind not in ("shuffle_start", "assign", "reveal"):
            return True, []
        message = self._decoded(payload)
        out: list[Injection] = []
        if isinstance(message, ShuffleStart) and message.members:
            runs = self._starts.setdefault(message.group, [])
            if all(run != message.run for run, _, _ in runs):
                runs.append((message.run, message.members, payload))
        elif isinstance(message, Assign):
            earlier = self._assigns.setdefault(message.subject, [])
            inbox = topics.inbox(message.round_id, message.subject)
            mode = self.param_str("mode")
            if earlier and earlier[-1][0] != message.group and mode == "start":
                # A mover: the target group's earlier starts (without her) now, her real one late.
                out += [Injection(0.3, inbox, start) for _, members, start in self._starts.get(message.group, [])
                        if message.subject not in members]
                self._held.add((message.subject, message.group))
            elif earlier and earlier[-1][0] == message.group and earlier[-1][1] != message.members:
                if mode == "assign":
                    out.append(Injection(0.5, inbox, earlier[-1][2]))
                elif mode == "assign-after-reveal":
                    self._after_reveal[message.subject] = (inbox, earlier[-1][2])
            if not earlier or earlier[-1][2] != payload:
                earlier.append((message.group, message.members, payload))
        elif message is not None and message.sender in self._after_reveal:
            inbox, old = self._after_reveal.pop(message.sender)
            out.append(Injection(0.0, inbox, old))
        for injection in out:
            self._made(injection.topic, injection.payload)
        self.actions["injected"] += len(out)
        return True, out

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if not self._held or payload_kind(topic, payload) != "shuffle_start":
            return None
        message = self._decoded(payload)
        if not isinstance(message, ShuffleStart):
            return None
        for key in message.members:
            if (key, message.group) in self._held and receiver.split("-", maxsplit=1)[0] == topics.sid_of(key):
                self.actions["delayed"] += 1
                self.deviated = True
                return [Copy(delay=1.0)]
        return None


class ReplayRound(BrokerStrategy):
    """Replays an earlier round's publications into this one, phase by phase, on this round's topics."""

    NAME = "replay-round"
    NEEDS_EARLIER_ROUND = True
    #: ``earlier_offset``: the earlier round ran with seed + this (its round id and subject keys), with
    #: the same collector key.
    PARAMS: ClassVar[dict[str, object]] = {"earlier_offset": 1}

    def setup(self) -> None:
        assert self.earlier is not None
        old_hex, new_hex = topics.round_hex(self.earlier.round_id), topics.round_hex(self.round_id)
        # The same row's subject: the strongest pairing (her own messages of the earlier round).
        sid_map = {o.split("-")[0]: n.split("-")[0]
                   for o, n in zip(self.earlier.node_ids, self.node_ids, strict=False)}
        #: tag -> [(seconds after the tag's first publication, rewritten topic, payload)].
        self._by_tag: dict[str, list[tuple[float, str, bytes]]] = {}
        first: dict[str, float] = {}
        for pub in self.earlier.publications:
            tag = payload_kind(pub.topic, pub.payload)
            first.setdefault(tag, pub.at)
            parts = [new_hex if part == old_hex else sid_map.get(part, part) for part in pub.topic.split("/")]
            self._by_tag.setdefault(tag, []).append((pub.at - first[tag], "/".join(parts), pub.payload))
        #: The earlier round's tags in the order they first occurred.
        self._order = sorted(first, key=lambda t: first[t])
        self._done: set[str] = set()

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        tag = payload_kind(topic, payload)
        if tag in self._done or tag not in self._by_tag:
            return True, []
        # This round reached the phase: that phase of the earlier round, and any earlier phase it
        # has not shown (a blame the earlier round had and this one has not yet).
        upto = self._order.index(tag)
        out: list[Injection] = []
        for old in self._order[:upto + 1]:
            if old in self._done:
                continue
            self._done.add(old)
            out.extend(Injection(delay, t, p) for delay, t, p in self._by_tag[old])
        for injection in out:
            self._made(injection.topic, injection.payload)
        self.actions["injected"] += len(out)
        return True, out


class DropVictim(BrokerStrategy):
    """Drops every message from or to the victim from a phase on (``after``: the first message of that
    kind she sends or is sent), for ``duration`` seconds (0: for good). ``against_earlier``: the
    collector ran an earlier round over the same records (with ``earlier_offset``, as for
    ``replay-round``) and the broker subtracts this release from that one (SPEC §3: the difference of
    two releases, the known limit across rounds)."""

    NAME = "drop-victim"
    NEEDS_VICTIM = True
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "after": "shuffle_start", "duration": 0.0,
                                           "against_earlier": False, "earlier_offset": 1}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"after": PHASE_TAGS}

    @classmethod
    def needs_earlier_round(cls, params: Mapping[str, object]) -> bool:
        return bool(params.get("against_earlier", False))

    def setup(self) -> None:
        self._from: float | None = 0.0 if self.param_str("after") == "start" else None

    def _dropping(self, now: float) -> bool:
        duration = self.param_float("duration")
        return self._from is not None and now >= self._from and (duration <= 0 or now < self._from + duration)

    def _starts(self, now: float, payload: bytes) -> None:
        # The phase as the victim meets it: the first message of that kind she sends or is sent (the
        # collector starts each group's run as soon as that group's members are assigned).
        if self._from is None:
            seen = peek(payload)
            if seen is not None and seen.tag == self.param_str("after") and seen.round_id == self.round_id:
                self._from = now

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        if sender == self.victim:
            self._starts(now, payload)
            if self._dropping(now):
                self.actions["dropped_from_victim"] += 1
                self.deviated = True
                return False, []
        return True, []

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if receiver == self.victim:
            self._starts(now, payload)
        if receiver == self.victim and self._dropping(now):
            self.actions["dropped_to_victim"] += 1
            self.deviated = True
            return []
        return None


class Duplicate(BrokerStrategy):
    """Delivers a seeded share (``probability``) of the messages twice, the copy up to ``delay`` s late."""

    NAME = "duplicate"
    PARAMS: ClassVar[dict[str, object]] = {"probability": 0.3, "delay": 1.0}

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if _uniform(self.rng) >= self.param_float("probability"):
            return None
        self.actions["duplicated"] += 1
        self._made(topic, payload)
        return [Copy(), Copy(delay=_uniform(self.rng) * self.param_float("delay"), made=True)]


class Reorder(BrokerStrategy):
    """Holds a seeded share (``probability``) of the messages back up to ``delay`` s: later messages
    overtake them."""

    NAME = "reorder"
    PARAMS: ClassVar[dict[str, object]] = {"probability": 0.3, "delay": 2.0}

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if _uniform(self.rng) >= self.param_float("probability"):
            return None
        self.actions["delayed"] += 1
        self._made(topic, payload)
        return [Copy(delay=_uniform(self.rng) * self.param_float("delay"), made=True)]


class SplitRetained(BrokerStrategy):
    """Shows the victim another retained bulletin than everyone else, on every delivery of its topic (or
    on the first ``times`` of them, 0: every one): the earlier round's (``source = "earlier"``) or the
    real one with a broken signature (``"forged"``: a broker cannot sign)."""

    NAME = "split-retained"
    NEEDS_VICTIM = True
    NEEDS_EARLIER_ROUND = True
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "bulletin": "roster", "source": "earlier",
                                           "earlier_offset": 1, "times": 0}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"bulletin": ("roster", "release", "announce"),
                                                     "source": ("earlier", "forged")}

    @classmethod
    def needs_earlier_round(cls, params: Mapping[str, object]) -> bool:
        return params.get("source", "earlier") == "earlier"

    def setup(self) -> None:
        bulletin = self.param_str("bulletin")
        self._topic = {"roster": topics.roster(self.round_id), "release": topics.release(self.round_id),
                       "announce": topics.ANNOUNCE}[bulletin]
        self._old: bytes | None = None
        if self.earlier is not None:
            old_topic = {"roster": topics.roster(self.earlier.round_id),
                         "release": topics.release(self.earlier.round_id), "announce": topics.ANNOUNCE}[bulletin]
            # The bulletin the earlier round's broker held last (the announce before its withdrawal).
            for pub in self.earlier.publications:
                if pub.topic == old_topic and pub.retain and pub.payload:
                    self._old = pub.payload

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if receiver != self.victim or topic != self._topic or not payload:
            return None
        times = self.param_int("times")
        if 0 < times <= self.actions["substituted"]:
            return None
        if self.param_str("source") == "forged":
            other = payload[:-1] + bytes([payload[-1] ^ 1])  # the signature's last byte
        elif self._old is not None:
            other = self._old
        else:
            return None
        self.actions["substituted"] += 1
        self._made(topic, other)
        return [Copy(payload=other, made=True)]


class SplitKeys(BrokerStrategy):
    """A broker operator colluding with a member who signs a second run_keys for a fellow member
    (subject strategy ``key-split``, ``via = "direct"``): that copy is not routed where she published it
    (``.../s/<her>/to/<fellow>``); when her real run_keys is delivered on her group topic to that fellow,
    the fellow gets the second one in its place. Every other receiver gets the real one: a split view of
    the run's keys that no signature check can see."""

    NAME = "split-keys"
    #: The message she signs twice.
    TAG: ClassVar[str] = "run_keys"
    #: ``delay``: seconds late, on top of the network's, that the fellow gets it.
    PARAMS: ClassVar[dict[str, object]] = {"delay": 0.0}

    def setup(self) -> None:
        #: (her group topic, the fellow's sid) -> the message she signed for that fellow alone.
        self._second: dict[tuple[str, str], bytes] = {}

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        parts = topic.split("/")
        if len(parts) == 7 and parts[3] == "s" and parts[5] == "to" and payload_kind(topic, payload) == self.TAG:
            group_topic = "/".join([*parts[:5], "group"])
            self._second[(group_topic, parts[6])] = payload
            self.actions["dropped"] += 1
            return False, []
        return True, []

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        other = self._second.get((topic, receiver.split("-", maxsplit=1)[0]))
        if other is None or payload_kind(topic, payload) != self.TAG:
            return None
        self.actions["substituted"] += 1
        self._made(topic, other)
        return [Copy(delay=self.param_float("delay"), payload=other, made=True)]


class SwapVote(SplitKeys):
    """``split-keys`` for a vote (found by an attacker on the blames that carry votes): colluding with a member
    who signs a no-go vote towards one fellow member and votes go (subject strategy ``direct-no-go``), it hands
    that fellow the no-go in place of her go vote, ``delay`` seconds late (late enough, the fellow's blame reaches
    the collector after its reveal_open). Everyone else, the collector included, gets the go vote."""

    NAME = "swap-vote"
    TAG = "vote"


class SplitFinal(SplitKeys):
    """``split-keys`` for the final batch (found by an attacker on the blames): colluding with the final mixer
    (subject strategy ``two-finals``, its ``victim``: her row), who signs a second final batch for each fellow on
    her topic towards that fellow, it hands every fellow that one in place of her real one, ``delay`` seconds late;
    the collector gets the real one. Only her messages: every member's batch before the last travels on such a
    topic too."""

    NAME = "split-final"
    TAG = "batch"
    NEEDS_VICTIM = True
    #: ``relay = "drop"``: the collector's relay of her real final batch (on the group's control topic) never reaches
    #: a fellow either (found by an attacker: honest members were excluded `silent`, she was not).
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "delay": 0.0, "relay": "keep"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"relay": ("keep", "drop")}

    def setup(self) -> None:
        super().setup()
        #: Her real final batches, as she published them on her group topic.
        self._finals: set[bytes] = set()

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        if sender != self.victim:
            return True, []
        if topics.is_subject_group(topic) and payload_kind(topic, payload) == self.TAG:
            self._finals.add(payload)
        return super().on_publish(now, sender, topic, payload, retain)

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        out = super().on_deliver(now, sender, receiver, topic, payload)
        if out is None and self.param_str("relay") == "drop" and payload in self._finals and "/c/group/" in topic \
                and receiver.split("-", maxsplit=1)[0] in {sid for _, sid in self._second}:
            self.actions["dropped"] += 1
            return []
        return out


class LateFinal(SplitFinal):
    """``split-final`` at the last moment (found by an attacker on its fix): the final mixer's second final batch
    (``two-finals``) is held and everyone, the collector included, gets her real one; when the collector's
    reveal_open of her group is delivered to a first fellow member, that fellow gets the second final batch just
    before it. Her blame (two final batches) reaches the collector after its reveal_open: the mixer is convicted
    in the suppression's statement, the blamer withholds her reveal (SPEC §7.3)."""

    NAME = "late-final"

    def setup(self) -> None:
        super().setup()
        self._shown = False

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        seen = peek(payload)
        if self._shown or seen is None or seen.tag != "reveal_open":
            return None
        fellow = receiver.split("-", maxsplit=1)[0]
        second = next((other for (_, sid), other in self._second.items()
                       if sid == fellow and (found := peek(other)) is not None and found.group == seen.group), None)
        if second is None:
            return None
        self._shown = True
        self.actions["substituted"] += 1
        self._made(topic, second)
        return [Copy(payload=second, made=True), Copy(delay=0.05)]


class HideSubmits(BrokerStrategy):
    """Drops the collector's copy of every member's submission (mixer 1 still gets hers, so runs go on):
    with a member who tampers, the collector cannot re-execute the run (`blame_inconclusive`). Measured
    before the fix: the honest no-go voters were excluded and the tamperer stayed."""

    NAME = "hide-submits"

    def setup(self) -> None:
        self._subjects = frozenset(self.node_ids)

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        # The one receiver that is not a subject node is the collector.
        if receiver not in self._subjects and payload_kind(topic, payload) == "submit":
            self.actions["dropped"] += 1
            self.deviated = True
            return []
        return None


class HideFirstSubmit(BrokerStrategy):
    """Colludes with a member playing ``resubmit`` (``victim``: her row, the member it works for): every copy of
    the first submission she publishes in a run is kept from the collector (mixer 1 gets it and mixes it); any
    other submission of hers, the second one she re-sends with her blame, reaches it. Found by an attacker on the
    blames: the collector held only her second one and re-execution named the honest mixer 1 `blamed_tamper`."""

    NAME = "hide-first-submit"
    NEEDS_VICTIM = True
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}

    def setup(self) -> None:
        self._subjects = frozenset(self.node_ids)
        #: (group, run) -> the first submission she published in it.
        self._first: dict[tuple[int | None, int | None], bytes] = {}

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        seen = peek(payload)
        if sender == self.victim and seen is not None and seen.tag == "submit":
            self._first.setdefault((seen.group, seen.run), payload)
        return True, []

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        # The one receiver that is not a subject node is the collector.
        if sender == self.victim and receiver not in self._subjects and payload in self._first.values():
            self.actions["dropped"] += 1
            self.deviated = True
            return []
        return None


class SplitAnnounce(BrokerStrategy):
    """The broker of a collector that shows one subject another announce (collector strategy
    ``split-announce``): the collector's announce published on the victim's inbox is not routed but
    kept, and handed to her in place of every announce delivered to her."""

    NAME = "split-announce"
    NEEDS_VICTIM = True
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0}

    def setup(self) -> None:
        self._other: bytes | None = None

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        if topic != topics.ANNOUNCE and payload_kind(topic, payload) == "announce":
            self._other = payload
            return False, []
        return True, []

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        if self._other is None or receiver != self.victim or topic != topics.ANNOUNCE or not payload:
            return None
        self.actions["substituted"] += 1
        self._made(topic, self._other)
        return [Copy(payload=self._other, made=True)]
