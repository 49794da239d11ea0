"""A subject's proof that her round's collector equivocated about its roster (SPEC §4 group, §8.5).

An honest collector has one roster per round: every message of it stating a roster root (the roster, every
assign, the release) states the same one. A subject keeps the announce she took part on and the first such
message; one stating another root completes the proof (`SubjectNode.equivocation_evidence`). The three exact
envelopes convict the key that signed them, whoever brings them and with no transcript (a withheld round);
an auditor compares that key with the collector's published identity, since anyone can sign an announce.
Every subject also keeps a *receipt* (her announce and the first roster of her round), which she
brings to an auditor after any round: receipts of different subjects stating different roots combine into
such a proof, so a victim who never saw the second root (she was done, or her host stopped) still convicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec
from coutil.protocol.messages import Announce, Assign, Message, Release, Roster, ShuffleStart

__all__ = ["CheckedEquivocation", "EquivocationEvidence", "RosterReceipt", "check_equivocation", "combine_receipts",
           "stated_roster_root"]


def stated_roster_root(message: Message) -> bytes | None:
    """The roster root a collector message states (a roster's, an assign's, a release's), else None. An honest
    collector has one roster per round, so two of its messages of one round stating different roots prove that
    it showed subjects different rosters (`check_equivocation`, SPEC §3 "split roster")."""
    if isinstance(message, (Roster, Assign)):
        return message.merkle_root
    if isinstance(message, Release):
        return message.roster_root
    return None


@dataclass(frozen=True)
class EquivocationEvidence:
    """The announce she took part on and two messages its sender signed for that round stating different roster
    roots (exact envelopes, in the order she received them). It convicts the key that signed them: the auditor
    compares it with the collector's published key (anyone can sign an announce)."""

    announce: bytes
    first: bytes
    second: bytes

    def as_dict(self) -> dict[str, list[str]]:
        return {"equivocation": [self.announce.hex(), self.first.hex(), self.second.hex()]}


@dataclass(frozen=True)
class CheckedEquivocation:
    """A proof of equivocation, checked: the round and collector key it convicts, or why it proves nothing."""

    round_id: bytes = b""
    collector_key: bytes = b""
    #: What the collector signed, e.g. "a roster of root 1a2b... and a release of roster root 3c4d...".
    statement: str = ""
    problem: str = ""


def check_equivocation(item: EquivocationEvidence, round_id: bytes | None = None,
                       collector_key: bytes | None = None) -> CheckedEquivocation:
    """The three envelopes verify; the first is an announce; the other two are collector messages stating a
    roster root (`stated_roster_root`), of the announce's round, signed by its sender, stating different roots,
    or two different shuffle_starts of one run (`_two_starts`).
    ``round_id``/``collector_key``: the round being audited (None: whichever the announce names)."""
    try:
        announce, first, second = (codec.decode(e).message for e in (item.announce, item.first, item.second))
    except RemoteProtocolError as exc:
        return CheckedEquivocation(problem=f"an envelope does not decode or verify ({exc.reason})")
    if not isinstance(announce, Announce):
        return CheckedEquivocation(problem=f"the first envelope is a {announce.TAG}, not an announce")
    if round_id is not None and announce.round_id != round_id:
        return CheckedEquivocation(problem="an announce of another round")
    if collector_key is not None and announce.sender != collector_key:
        return CheckedEquivocation(problem="an announce signed by another key than the round's collector")
    if isinstance(first, ShuffleStart) or isinstance(second, ShuffleStart):
        return _two_starts(announce, first, second)
    stated: list[str] = []
    roots: set[bytes] = set()
    for message in (first, second):
        root = stated_roster_root(message)
        if root is None:
            return CheckedEquivocation(problem=f"a {message.TAG} states no roster root")
        if message.round_id != announce.round_id or message.sender != announce.sender:
            return CheckedEquivocation(problem=f"a {message.TAG} of another round or collector than the announce's")
        roots.add(root)
        stated.append(f"a {message.TAG} of roster root {root.hex()[:16]}...")
    if len(roots) == 1:
        return CheckedEquivocation(problem="both messages state the same roster root")
    return CheckedEquivocation(announce.round_id, announce.sender, " and ".join(stated))


def _two_starts(announce: Announce, first: Message, second: Message) -> CheckedEquivocation:
    """Two different shuffle_starts signed for one run of one group: an honest collector signs one per run (its
    re-sends are the same bytes), so a member shown a run of her own (she answers it, and the collector excludes
    her for answering a run it never started) holds both once the real one reaches her (SPEC §3)."""
    if not (isinstance(first, ShuffleStart) and isinstance(second, ShuffleStart)):
        return CheckedEquivocation(problem="a shuffle_start beside a message of another kind")
    for message in (first, second):
        if message.round_id != announce.round_id or message.sender != announce.sender:
            return CheckedEquivocation(problem="a shuffle_start of another round or collector than the announce's")
    if (first.group, first.run) != (second.group, second.run):
        return CheckedEquivocation(problem="shuffle_starts of two different runs")
    if first == second:
        return CheckedEquivocation(problem="the same shuffle_start twice")
    return CheckedEquivocation(announce.round_id, announce.sender,
                               f"two different shuffle_starts of group {first.group} run {first.run}")


@dataclass(frozen=True)
class RosterReceipt:
    """What a subject brings an auditor after any round: the announce she took part on and the first roster of that
    round she received, exact envelopes. Both are bulletins, public: a receipt shows nothing of her group or
    record. Two receipts of one round and key stating different roots are a proof of equivocation
    (`combine_receipts`): the victim of a roster of her own, done before the real roster was
    published (SPEC §3, ``release_first``), still holds hers, and any other subject holds the real one."""

    announce: bytes
    statement: bytes

    def as_dict(self) -> dict[str, list[str]]:
        return {"receipt": [self.announce.hex(), self.statement.hex()]}


def combine_receipts(receipts: Sequence[RosterReceipt]) -> tuple[list[EquivocationEvidence], list[str]]:
    """Proofs of equivocation made of receipts (one per root beyond the first, per round and key), and why
    each receipt that proves nothing was left out (it does not verify, its announce is no announce, its statement
    is not a roster of the announce's round and signer)."""
    first: dict[tuple[bytes, bytes], RosterReceipt] = {}
    proofs: list[EquivocationEvidence] = []
    seen: set[tuple[bytes, bytes, bytes]] = set()
    problems: list[str] = []
    for receipt in receipts:
        try:
            announce = codec.decode(receipt.announce).message
            statement = codec.decode(receipt.statement).message
        except RemoteProtocolError as exc:
            problems.append(f"a receipt does not decode or verify ({exc.reason})")
            continue
        if not isinstance(announce, Announce) or not isinstance(statement, Roster) \
                or statement.round_id != announce.round_id or statement.sender != announce.sender:
            problems.append("a receipt that is not an announce and a roster of its round and signer")
            continue
        root = statement.merkle_root
        key = (announce.round_id, announce.sender)
        if (*key, root) in seen:
            continue
        seen.add((*key, root))
        if key not in first:
            first[key] = receipt
        else:
            kept = first[key]
            proofs.append(EquivocationEvidence(kept.announce, kept.statement, receipt.statement))
    return proofs, problems
