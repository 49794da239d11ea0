"""The collector's view of one group's shuffle: runs, deadlines, blame, opening.

A run moves through keys -> submissions -> batches 1..g -> votes -> (all go) reveal -> opened, or
(any no-go) blame -> a new run without the culprits. The step deadline is pushed back by every new
valid message of the run; when it passes, `silent_members` names whom the run is waiting for.

A member can wait for a message that only a member who has since vanished could re-send (her keys
or batch reached the collector but was lost on its way to this member). So before excluding
anyone, a stalled run is *relayed*: the collector re-publishes, on the group's control topic, the
exact signed bytes of every member message of the run it holds (never a reveal), with the run's
control messages. An honest member then catches up, and only the members who really went silent
are still missing at the deadline.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias, TypeVar

import numpy as np

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, crypto, topics
from coutil.protocol.messages import (
    Batch,
    Blame,
    GroupDone,
    Message,
    Reveal,
    RevealOpen,
    RunKeys,
    ShuffleStart,
    Submit,
    Vote,
)
from coutil.protocol.node import SERIAL_POOL, Pending, WorkPool
from coutil.protocol.shuffle import (
    NO_BATCH,
    BlameResult,
    assign_blame,
    batch_digest,
    check_run_keys,
    collector_aad,
    inner_aad,
    keys_digest,
    members_digest,
)

#: The messages a member publishes in her group's runs (the collector hands them to `GroupState.observe`).
GroupMessage: TypeAlias = RunKeys | Submit | Batch | Vote | Reveal | Blame
#: A message a blame carries, as `GroupState.blame_carried` verified it, with its exact envelope.
CarriedMessage: TypeAlias = tuple[Submit | Batch | Vote, bytes]
#: One subject's confidential values, as opened from a final batch.
Record: TypeAlias = tuple[float, ...]


@dataclass
class RunData:
    keys: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)
    submissions: dict[bytes, Submit] = field(default_factory=dict)
    batches: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    votes: dict[bytes, Vote] = field(default_factory=dict)
    reveals: dict[bytes, bytes] = field(default_factory=dict)
    #: The revealed secrets as key pairs (derived once, when checked against the published key).
    reveal_keys: dict[bytes, crypto.KxKey] = field(default_factory=dict)
    blames: dict[bytes, Blame] = field(default_factory=dict)
    #: Exact envelopes of the run's messages to re-publish when the run stalls (control messages
    #: first, then every fresh member message except reveals, in arrival order), each with the one
    #: member it is meant for (a submission, a batch before the last) or None (the whole group).
    relay: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    #: The run's keys as the collector holds them (`keys_digest`), once it holds every member's.
    keys_digest: bytes | None = None
    #: Members whose run_keys or vote stated another view of the roster or of the run.
    view_mismatch: list[bytes] = field(default_factory=list)
    #: Exact envelopes of member messages that proved their sender deviated without being stored (a second,
    #: different message for one slot, a view or key nobody was given, a message for a run not started): with
    #: ``relay``, the signed evidence of the run's `blamed_*` exclusions (`proven_exclusions`).
    proofs: list[bytes] = field(default_factory=list)
    #: Members shown by a blame after the reveal_open to have signed a no-go vote beside the go vote kept
    #: (`GroupState.late_equivocation`): excluded `blamed_equivocation` when the group is suppressed.
    late_equivocators: list[bytes] = field(default_factory=list)
    #: The members whose blame showed such a late equivocation: each withholds her reveal for it, so the group
    #: is suppressed; she is excluded `suppressed` with the others, not `silent` (she answered what she was shown).
    late_blamers: list[bytes] = field(default_factory=list)
    #: The last blame `GroupState.blame_carried` checked, with the members it was checked against, and what
    #: it carries or why it was refused: one blame is checked up to three times as it is taken (observed, its
    #: carried messages taken, the late check), and each check verifies up to g + 2 signatures.
    carried_memo: tuple[Blame, tuple[bytes, ...], list[CarriedMessage] | RemoteProtocolError] | None = None


def open_item(secrets: tuple[crypto.KxKey, ...], collector_kx: crypto.KxKey, aad_inner: bytes, aad_record: bytes,
              width: int, item: bytes) -> Record | None:
    """One item of a final batch opened: the inner sealing with every member's revealed secret, then
    the collector's layer; None when it does not open (a module-level function of picklable
    arguments, so that a `WorkPool` may run it in another process)."""
    try:
        innermost = crypto.open_with_all(secrets, item, aad_inner)
        return crypto.decode_record(crypto.open_sealed(collector_kx, innermost, aad_record), width)
    except (crypto.CryptoError, ValueError):
        return None  # cannot be attributed without breaking unlinkability: counted, left out


@dataclass
class GroupState:
    label: int
    members: tuple[bytes, ...]
    indices: tuple[int, ...]
    deadline: float
    original: bool = True
    active: bool = True
    opened: bool = False
    run: int = -1
    data: RunData = field(default_factory=RunData)
    reveal_sent: bool = False
    undecryptable: int = 0
    #: When the stalled run is relayed next (None: not stalled since the last fresh message).
    next_relay: float | None = None
    #: When a message from any member last arrived (duplicates included): a group from which
    #: nothing arrives for half a step is mute (see `OutageWatch`).
    heard_at: float = 0.0
    #: Its deadline is extended because its silence is taken for an outage (until it is heard again).
    suspended: bool = False
    #: The run's membership digest (SPEC §8.4) as every member must state it.
    members_digest: bytes = b""

    # -------------------------------------------------------------- runs
    def new_run(
        self, round_id: bytes, announce_digest: bytes, sender: bytes, excluded: tuple[tuple[bytes, str], ...],
        deadline: float,
    ) -> ShuffleStart:
        self.run += 1
        self.data = RunData()
        self.reveal_sent = False
        self.deadline = deadline
        self.next_relay = None
        self.members_digest = members_digest(announce_digest, self.label, self.run, self.members)
        return ShuffleStart(round_id, sender, self.label, self.run, self.members, excluded, deadline)

    def closing_message(
        self, round_id: bytes, sender: bytes, excluded: tuple[tuple[bytes, str], ...], now: float
    ) -> ShuffleStart:
        self.run += 1
        return ShuffleStart(round_id, sender, self.label, self.run, (), excluded, now)

    def set_members(self, members: tuple[bytes, ...], index_of: Callable[[bytes], int]) -> None:
        self.members = tuple(sorted(members))
        self.indices = tuple(index_of(m) for m in self.members)
        self.original = False

    def dissolve(self) -> None:
        self.active = False
        self.members = ()
        self.indices = ()

    # -------------------------------------------------------------- observing messages
    def observe(self, message: GroupMessage, envelope: bytes, now: float, step_timeout: float,
                roster_root: bytes = b"", to: str | None = None) -> None:
        """Record a member message of this group (``to``: the sid its topic addresses it to, when it came
        on the sender's topic towards one member; None on her group topic)."""
        run_number = message.run
        if message.group != self.label:
            # IGNORE (SPEC §7.3): a member moved by a merge re-sends her old group's messages, and a
            # broker can replay them; neither is a fault of hers.
            raise RemoteProtocolError("wrong_group", f"{message.TAG} names another group", ignore=True)
        if not self.active:
            raise RemoteProtocolError("stale_run", "group already finished", ignore=True)
        if run_number < self.run:
            raise RemoteProtocolError("stale_run", f"run {run_number} is over", ignore=True)
        if run_number > self.run:
            raise RemoteProtocolError("early", f"run {run_number} not started", ignore=True)
        if message.sender not in self.members:
            raise RemoteProtocolError("not_a_member", f"{message.TAG} from outside this run")
        d = self.data
        fresh = False
        target: bytes | None = None
        if isinstance(message, RunKeys | Vote) and (
                message.roster_root != roster_root or message.members_digest != self.members_digest):
            if message.sender not in d.view_mismatch:
                d.view_mismatch.append(message.sender)
            raise RemoteProtocolError("view_mismatch", f"{message.TAG} states another roster or membership")
        if isinstance(message, Blame):
            if self.reveal_sent and not self.no_go:
                raise RemoteProtocolError("unjustified_blame", "blame after every member voted go")
            self.blame_carried(message)
            self._check_stated_batch(message.sender, message.batch_digest, d.batches.get(self._step_of(message.sender)))
        if isinstance(message, Submit | Batch):
            target = self._target(message)
        if to is not None and (target is None or topics.sid_of(target) != to):
            # Only what is meant for that member alone may travel on a topic towards her: a copy sent
            # elsewhere would be a second view of the run (the collector keeping one, the members another).
            raise RemoteProtocolError("topic_mismatch", f"{message.TAG} addressed to a member it is not for")
        if isinstance(message, RunKeys):
            check_run_keys(message.outer_kx, message.inner_kx)
            fresh = _store(d.keys, message.sender, (message.outer_kx, message.inner_kx))
        elif isinstance(message, Submit):
            fresh = _store(d.submissions, message.sender, message)
        elif isinstance(message, Batch):
            blame = d.blames.get(message.sender)
            if blame is not None:
                self._check_stated_batch(message.sender, blame.batch_digest, message.items)
            self._check_final_vote(d.votes.get(message.sender) if message.step == len(self.members) else None,
                                   message.items)
            fresh = _store(d.batches, message.step, message.items)
        elif isinstance(message, Vote):
            # Checked against the keys the collector holds; while a member's run_keys has not reached it
            # (lost on the way: she stops re-sending once the members hold them), the vote is kept and
            # checked when they arrive (`votes_on_other_keys`), and meanwhile the votes must agree (`ready`).
            own = self.own_keys_digest(message.round_id)
            if own is not None and message.keys_digest != own:
                if message.sender not in d.view_mismatch:
                    d.view_mismatch.append(message.sender)
                raise RemoteProtocolError("view_mismatch", "vote states other run keys")
            if message.sender == self.members[-1]:
                self._check_final_vote(message, d.batches.get(len(self.members)))
            fresh = _store(d.votes, message.sender, message)
        elif isinstance(message, Reveal):
            keys = d.keys.get(message.sender)
            try:
                revealed = crypto.KxKey.from_secret(message.inner_secret)
            except (ValueError, crypto.CryptoError):
                raise RemoteProtocolError("bad_reveal", "inner secret is not a key") from None
            if keys is not None and revealed.public != keys[1]:
                raise RemoteProtocolError("bad_reveal", "inner secret does not match the published key")
            if not self.ready:
                raise RemoteProtocolError("early", "reveal before every member voted go", ignore=True)
            fresh = _store(d.reveals, message.sender, message.inner_secret)
            d.reveal_keys[message.sender] = revealed
        else:
            fresh = _store(d.blames, message.sender, message)
        if fresh:
            self.deadline = now + step_timeout
            self.next_relay = None
            if not isinstance(message, Reveal):  # an inner secret is for the collector only
                d.relay.append((envelope, target))

    def blame_carried(self, blame: Blame) -> list[CarriedMessage]:
        """The signed messages ``blame`` carries, verified (SPEC §8.4): what its author took (her input: the batch of
        step - 1, or as mixer 1 the members' submissions she mixed; the final batch), then the no-go vote she
        answers. REJECT ``unjustified_blame`` unless the vote is a no-go vote of the blame's run by one of its
        members, each batch, of a distinct step, her input or the final one, by its mixer, and each submission, in
        mixer 1's blame alone, by a distinct member: at most g + 2 messages taken (a second final batch of its mixer,
        below). The caller observes them as messages of the run, so a collector cannot show a run without them:
        another vote of the voter (a go vote it kept) is her equivocation, never an unsolicited blame (found by an
        attacker: the honest blamers were framed), every batch a member took is in the evidence, and a submission
        mixer 1 mixed beside another one its member signed (shown to the collector alone by a broker, found by an
        attacker: re-execution named the honest mixer 1) is that member's equivocation. In place of the no-go vote:
        nothing, with two final batches of the final mixer, or her go vote naming another final batch than one of
        hers carried (SPEC §8.4)."""
        memo = self.data.carried_memo
        if memo is not None and memo[0] == blame and memo[1] == self.members:
            if isinstance(memo[2], RemoteProtocolError):
                raise RemoteProtocolError(memo[2].reason, memo[2].detail)
            return list(memo[2])
        try:
            carried = self._blame_carried(blame)
        except RemoteProtocolError as exc:
            # Kept without its traceback (whose frames would be kept alive with it).
            self.data.carried_memo = (blame, self.members, RemoteProtocolError(exc.reason, exc.detail))
            raise
        self.data.carried_memo = (blame, self.members, carried)
        return list(carried)

    def _blame_carried(self, blame: Blame) -> list[CarriedMessage]:
        carried: list[CarriedMessage] = []
        mine, g = self._step_of(blame.sender), len(self.members)
        if len(blame.taken) > g + 2:  # mixer 1: g submissions and the final batch (two, below); any other: three
            raise RemoteProtocolError("unjustified_blame", "blame carries more messages than a member takes")
        steps: set[int] = set()
        senders: set[bytes] = set()
        finals: set[bytes] = set()
        for envelope in blame.taken:
            taken = self._carried(blame, envelope, "message she took")
            if isinstance(taken, Submit):
                if mine != 1 or taken.sender not in self.members or taken.sender in senders:
                    raise RemoteProtocolError("unjustified_blame", "blame carries a submission she did not mix")
                senders.add(taken.sender)
            elif not isinstance(taken, Batch) or taken.step not in (mine - 1, g) or taken.step in (0, mine) \
                    or (taken.step in steps and (taken.step != g or len(finals) != 1)) \
                    or taken.sender != self.members[taken.step - 1]:
                raise RemoteProtocolError("unjustified_blame", "blame carries a batch she did not take")
            else:
                steps.add(taken.step)
                if taken.step == g:
                    finals.add(batch_digest(taken.items))
            carried.append((taken, envelope))
        if not blame.no_go_vote:
            # Two final batches the final mixer signed, in place of a no-go vote: the member took one and was
            # relayed the other, which the collector holds (a broker showed it one and the members the other,
            # found by an attacker: the round stalled). Her proof of the mixer's equivocation (SPEC §8.4).
            if len(finals) < 2:
                raise RemoteProtocolError("unjustified_blame",
                                          "blame carries neither a no-go vote nor two final batches")
            return carried
        vote = self._carried(blame, blame.no_go_vote, "vote")
        # A go vote justifies a blame only as the final mixer's, naming another final batch than hers the blamer
        # took (found by an attacker: a broker kept the relay of the collector's final batch from the members).
        contradicted = isinstance(vote, Vote) and vote.go and vote.sender == self.members[-1] and any(
            isinstance(m, Batch) and m.step == g and batch_digest(m.items) != vote.final_digest for m, _ in carried)
        if not isinstance(vote, Vote) or (vote.go and not contradicted) or vote.sender not in self.members:
            raise RemoteProtocolError("unjustified_blame", "blame carries no no-go vote of its run")
        carried.append((vote, blame.no_go_vote))
        return carried

    @staticmethod
    def _carried(blame: Blame, envelope: bytes, what: str) -> Submit | Batch | Vote:
        try:
            message = codec.decode(envelope).message
        except RemoteProtocolError:
            raise RemoteProtocolError("unjustified_blame", f"blame carries no signed {what}") from None
        if not isinstance(message, Submit | Batch | Vote) \
                or (message.round_id, message.group, message.run) != (blame.round_id, blame.group, blame.run):
            raise RemoteProtocolError("unjustified_blame", f"blame carries a {what} of another run")
        return message

    def late_equivocation(self, blame: Blame) -> Vote | Batch | None:
        """What a blame of this run carries after the reveal_open, every member having voted go, that its signer
        signed beside what the collector keeps: a no-go vote of a member whose kept vote is a go vote, or a final
        batch of the final mixer other than the one every member voted on. The blamer was shown it alone (a
        broker's doing, found by attackers). None otherwise (the blame is then REJECT ``unjustified_blame``, or
        taken)."""
        if not (self.active and self.reveal_sent and not self.no_go and blame.group == self.label
                and blame.run == self.run and blame.sender in self.members):
            return None
        try:
            carried = self.blame_carried(blame)
        except RemoteProtocolError:
            return None
        final = self.final_batch
        for message, _ in carried:
            if isinstance(message, Vote):
                kept = self.data.votes.get(message.sender)
                if kept is not None and kept != message:
                    return message
            elif isinstance(message, Batch) and message.step == len(self.members) and final is not None \
                    and message.items != final:
                return message
        return None

    def _step_of(self, member: bytes) -> int:
        return self.members.index(member) + 1

    @staticmethod
    def _check_stated_batch(mixer: bytes, stated: bytes, published: Sequence[bytes] | None) -> None:
        """A mixer's blame and her batch agree: the blame states the batch's digest, or `NO_BATCH` and there is
        none. Two signed statements that differ are equivocation, whichever came first."""
        if published is not None and stated != batch_digest(published):
            raise RemoteProtocolError("equivocation", "blame states another batch than its mixer published")

    @staticmethod
    def _check_final_vote(vote: Vote | None, final: Sequence[bytes] | None) -> None:
        """The final mixer votes on her own final batch (she holds no other: only she signs it). Her vote naming
        another one, whichever came first, is equivocation (found by an attacker: a broker gave the collector one
        final batch of hers and the members another, and kept the collector's relay from them)."""
        if vote is not None and final is not None and vote.final_digest != batch_digest(final):
            raise RemoteProtocolError("equivocation", "the final mixer's vote names another final batch than hers")

    def _stated_batch_missing(self, member: bytes) -> bool:
        """Her blame states a batch the collector does not hold (lost on its way: she re-sends it with her blame)."""
        blame = self.data.blames.get(member)
        return blame is not None and blame.batch_digest != NO_BATCH and self._step_of(member) not in self.data.batches

    def _target(self, message: Submit | Batch) -> bytes | None:
        """The one member a submission or a batch before the last is for (None: the final batch)."""
        if isinstance(message, Submit):
            return self.members[0]
        g = len(self.members)
        if not 1 <= message.step <= g or self.members[message.step - 1] != message.sender:
            raise RemoteProtocolError("wrong_mixer", f"batch step {message.step} from the wrong member")
        if len(message.items) != g:
            raise RemoteProtocolError("bad_batch", "batch size differs from the group size")
        return self.members[message.step] if message.step < g else None

    def all_keys(self) -> bool:
        return len(self.data.keys) == len(self.members)

    def own_keys_digest(self, round_id: bytes) -> bytes | None:
        """`keys_digest` over the run keys the collector holds; None until it holds every member's."""
        d = self.data
        if d.keys_digest is None and self.all_keys():
            d.keys_digest = keys_digest(round_id, self.label, self.run, self.members, d.keys)
        return d.keys_digest

    def votes_on_other_keys(self, round_id: bytes) -> list[bytes]:
        """Members whose kept vote states other run keys than the collector holds (once it holds all)."""
        own = self.own_keys_digest(round_id)
        if own is None:
            return []
        return [m for m in self.members if m in self.data.votes and self.data.votes[m].keys_digest != own]

    @property
    def final_batch(self) -> tuple[bytes, ...] | None:
        return self.data.batches.get(len(self.members))

    @property
    def no_go(self) -> bool:
        return any(not v.go for v in self.data.votes.values())

    @property
    def ready(self) -> bool:
        """Every member voted go on the final batch the collector holds."""
        final = self.final_batch
        if final is None or len(self.data.votes) != len(self.members) or self.no_go:
            return False
        digest = batch_digest(final)
        # Every member used the same run keys (no key split, SPEC §8.4): the members check it against
        # theirs; the collector, which may lack a member's run_keys, that the votes agree.
        return all(v.final_digest == digest for v in self.data.votes.values()) \
            and len({v.keys_digest for v in self.data.votes.values()}) == 1

    def blame_complete(self) -> bool:
        """Every member blamed, and the collector holds every submission and run key, and every batch a blame
        states: re-execution can name whoever deviated (SPEC §4 share.6)."""
        d, n = self.data, len(self.members)
        return self.no_go and len(d.blames) == n and len(d.submissions) == n and len(d.keys) == n \
            and not any(self._stated_batch_missing(m) for m in self.members)

    def reveals_complete(self) -> bool:
        return self.ready and self.reveal_sent and len(self.data.reveals) == len(self.members)

    def silent_members(self) -> list[bytes]:
        """Whom the run is waiting for at its deadline."""
        d = self.data
        members = self.members
        if self.no_go:
            # Re-execution needs every member's submission and keys too, and the batch her blame states: members
            # re-send their submission and batch with their blame, so a member whose own is still missing (mixer
            # 1 who mixed hers without publishing it, a member who sent it where the collector does not read) is
            # the one missing.
            return [m for m in members if m not in d.blames] \
                or [m for m in members if m not in d.submissions or m not in d.keys or self._stated_batch_missing(m)]
        if self.ready:
            return [m for m in members if m not in d.reveals] if self.reveal_sent else []
        if self.final_batch is not None:
            missing = [m for m in members if m not in d.votes]
            if missing or len(d.keys) < len(members):
                # Votes on other keys than each other's, some run_keys never reached the collector: it
                # needs them to tell who states other keys.
                return missing or [m for m in members if m not in d.keys]
            # Every vote go, some on another final batch than the one the collector holds: its mixer signed two (a
            # broker showed the collector one and the members the other, found by an attacker: the whole round
            # stalled), or the voter names one nobody signed. Relayed, a member holding the other one blames with
            # both, her proof of the mixer's equivocation; at the deadline the voters who did not are excluded.
            final = batch_digest(self.final_batch)
            return [m for m in members if d.votes[m].final_digest != final and m not in d.blames]
        if len(d.keys) < len(members):
            return [m for m in members if m not in d.keys]
        last_step = max(d.batches, default=0)
        if last_step == 0 and len(d.submissions) < len(members):
            return [m for m in members if m not in d.submissions]
        return [members[last_step]] if last_step < len(members) else []

    # -------------------------------------------------------------- outcomes
    def reveal_open_message(self, round_id: bytes, sender: bytes) -> RevealOpen:
        final = self.final_batch
        assert final is not None
        self.reveal_sent = True
        return RevealOpen(round_id, sender, self.label, self.run, batch_digest(final))

    def done_message(self, round_id: bytes, sender: bytes) -> GroupDone:
        return GroupDone(round_id, sender, self.label, self.run)

    def start_opening(self, round_id: bytes, collector_kx: crypto.KxKey, width: int,
                      pool: WorkPool = SERIAL_POOL) -> Pending[list[Record | None]]:
        """Hand the opening of every item of the final batch to ``pool`` (inner sealing with all
        revealed secrets, then our layer: six X25519 operations an item); the group is over.

        An item that does not open (its author's inner layers are garbage although she voted go)
        comes back as None: `finish_opening` counts it in ``undecryptable`` and leaves it out, and
        the caller releases the group only if at least k records remain (SPEC §4 share.7: never a
        second run once secrets are out)."""
        final = self.final_batch
        assert final is not None
        secrets = tuple(self.data.reveal_keys[m] for m in self.members)
        opener = functools.partial(open_item, secrets, collector_kx, inner_aad(round_id, self.label, self.run),
                                   collector_aad(round_id), width)
        self.opened = True
        self.active = False
        return pool.submit(opener, final)

    def finish_opening(self, opened: list[Record | None]) -> list[Record]:
        """The records that opened (see `start_opening`)."""
        records = [record for record in opened if record is not None]
        self.undecryptable += len(opened) - len(records)
        return records

    def blame(self, round_id: bytes) -> BlameResult:
        """Re-execute the run; only once `blame_complete` (a gap in the transcript names nobody: at the
        deadline the members whose messages are missing are excluded `silent`, never the no-go voters)."""
        d = self.data
        assert self.blame_complete(), "a blame is resolved only with every submission and run key"
        voters = [m for m, v in d.votes.items() if not v.go]
        return assign_blame(
            self.members,
            {m: k[0] for m, k in d.keys.items()},
            {m: sub.onion for m, sub in d.submissions.items()},
            d.batches,
            {m: b.outer_secret for m, b in d.blames.items()},
            {m: b.permutation for m, b in d.blames.items()},
            voters,
            {m: sub.inner_commitment for m, sub in d.submissions.items()},
            {m: b.commitment_salt for m, b in d.blames.items()},
            round_id=round_id,
            group=self.label,
            run=self.run,
        )


def deviation_exclusion(reason: str, reveal_sent: bool) -> str | None:
    """The exclusion that a member message rejected with ``reason`` proves against its sender (SPEC §7.3), or
    None. Only before the run's reveal_open (no run may follow it): a view of the roster, of the run or of its
    keys that nobody was given (every member read the same, on her own topic), two different signed messages
    for one slot, or run keys nobody can seal to. Her own signature is the proof."""
    if reveal_sent:
        return None
    if reason == "view_mismatch":
        return "blamed_split_view"
    if reason in ("equivocation", "bad_key"):
        return f"blamed_{reason}"
    if reason == "unjustified_blame":  # a blame carrying no signed no-go vote of its run
        return "blamed_unsolicited"
    return None


def is_unstarted(start_group: int, start_run: int, members: Collection[bytes], message: GroupMessage,
                 moved_from: Collection[int]) -> bool:
    """A member's signed message for a later run of her group than the one started, or for a group she was
    never in (``moved_from``: the groups a merge moved her out of, whose messages she may still re-send):
    the collector never started her there, so it is a second view of the run (`blamed_equivocation`)."""
    if message.sender not in members:
        return False
    if message.group == start_group:
        return message.run > start_run
    return message.group not in moved_from


def proven_exclusions(
    start: ShuffleStart, messages: Sequence[tuple[Message, bytes]], announce_digest: bytes, roster_root: bytes,
    moved_from: Mapping[bytes, Collection[int]],
) -> dict[bytes, set[str]]:
    """The `blamed_*` exclusions that a run's signed messages prove, member by member (an auditor's replay of
    what the collector decided, SPEC §8.5): the run ``start`` opened, with its member messages (``messages``:
    decoded, signatures verified, with their envelopes) handed to a fresh `GroupState` in the order the
    collector kept them (the relay's, then the proofs); what a blame carries right after it, as the collector
    takes it. The collector's own reveal_open of the run marks it revealed. Every rule is the collector's:
    `observe` (a blame without a no-go vote of its run is unsolicited), `deviation_exclusion`, `is_unstarted`,
    `votes_on_other_keys` and `blame` (re-execution from the blames)."""
    group = GroupState(start.group, start.members, (), start.deadline)
    group.run = start.run - 1
    group.new_run(start.round_id, announce_digest, start.sender, start.excluded, start.deadline)
    proven: dict[bytes, set[str]] = defaultdict(set)

    def take(message: GroupMessage, envelope: bytes) -> None:
        try:
            group.observe(message, envelope, 0.0, 0.0, roster_root)
        except RemoteProtocolError as exc:
            reason = deviation_exclusion(exc.reason, group.reveal_sent)
            if reason is not None and message.sender in start.members:
                proven[message.sender].add(reason)
            return
        if isinstance(message, Blame):
            for carried, carried_envelope in group.blame_carried(message):
                take(carried, carried_envelope)

    for message, envelope in messages:
        if message.round_id != start.round_id:
            continue
        if message.sender == start.sender:
            if isinstance(message, RevealOpen) and (message.group, message.run) == (start.group, start.run):
                group.reveal_sent = True
            continue
        if not isinstance(message, GroupMessage):
            continue
        if not group.reveal_sent and is_unstarted(start.group, start.run, start.members, message,
                                                  moved_from.get(message.sender, ())):
            proven[message.sender].add("blamed_equivocation")
            continue
        late = group.late_equivocation(message) if isinstance(message, Blame) else None
        if late is not None:
            proven[late.sender].add("blamed_equivocation")
            continue
        take(message, envelope)
    if not group.reveal_sent:
        for liar in group.votes_on_other_keys(start.round_id):
            proven[liar].add("blamed_split_view")
    # Re-execution only of a run in which nothing else was proven: the collector ends a run at its first proven
    # deviation (a new run without her), so it never re-executes one; re-executed without a message it rejected,
    # the run would name whoever used that message (found by an attacker: a colluder's second batch
    # kept in the evidence, her real one rejected when the next mixer's blame carried it, framed that mixer).
    if group.blame_complete() and not proven:
        for culprit, reason in group.blame(start.round_id).culprits:
            proven[culprit].add(reason)
    return dict(proven)


K = TypeVar("K")
V = TypeVar("V")


def _store(store: dict[K, V], key: K, value: V) -> bool:
    """Store a first message; a duplicate is ignored, a different second one is equivocation."""
    if key in store:
        if store[key] != value:
            raise RemoteProtocolError("equivocation", "two different messages for one slot")
        raise RemoteProtocolError("duplicate", "already received", ignore=True)
    store[key] = value
    return True


def still_sealed(group: GroupState, groups: Iterable[GroupState]) -> list[GroupState]:
    """The other groups ``group``'s members may merge into (SPEC §4): active, with members, not yet opened."""
    return [other for other in groups if other is not group and other.active and not other.opened and other.members]


def merge_target(
    group: GroupState, groups: Iterable[GroupState], centroid_of: Callable[[GroupState], np.ndarray],
    max_members: int,
) -> GroupState | None:
    """The nearest other group (by QI centroid) whose records are still sealed and which, with the members of
    ``group``, has at most ``max_members``: the most whose run's messages fit (`largest_group`)."""
    here = centroid_of(group)
    best: GroupState | None = None
    best_distance = float("inf")
    for other in still_sealed(group, groups):
        if len(other.members) + len(group.members) > max_members:
            continue
        distance = float(np.sum((centroid_of(other) - here) ** 2))
        if distance < best_distance or (distance == best_distance and best is not None and other.label < best.label):
            best, best_distance = other, distance
    return best
