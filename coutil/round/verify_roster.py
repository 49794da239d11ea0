"""The auditor's first half (`coutil.round.verify`): the transcript verified, and the roster it set up.

- `Check`: one check's result (pass, fail with every problem found, or skip with what it needs);
- `VerifiedRound`: the transcript's messages that verified, decoded; `check_signatures` fills it, and
  every other check reads it, skipping through `need` what it lacks;
- `check_parameters` (the announced k and method protect someone);
- the checks of the roster the round was set up on: `check_roster` (the assigns against the roster) and
  `check_inclusion` (the roster root against the registrations, the inclusion proofs); `check_grouping`
  (MDAV or SafePub recomputed on the roster, merges explained) is in `coutil.round.verify_grouping`.

The checks of what the round released, the list of checks (`CHECKS`) and the driver that runs them
are in `coutil.round.verify`, which imports this module (never the other way round).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, merkle
from coutil.protocol.messages import (
    COLLECTOR_TAGS,
    Announce,
    Assign,
    Message,
    Register,
    Release,
    Roster,
    ShuffleStart,
    Verdict,
)
from coutil.protocol.topics import sid_of
from coutil.round.transcript import Transcript


@dataclass
class Check:
    """One check's result: status ``pass``, ``fail`` or ``skip``."""

    name: str
    #: The collector deviations (`coutil.adversary` names) this check would catch.
    catches: str
    status: str = "pass"
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, problem: str) -> None:
        self.status = "fail"
        self.problems.append(problem)

    def skip(self, why: str) -> None:
        if self.status != "fail":
            self.status = "skip"
        self.notes.append(why)

    def as_dict(self) -> dict[str, object]:
        return {"check": self.name, "status": self.status, "catches": self.catches, "problems": self.problems,
                "notes": self.notes}


@dataclass
class VerifiedRound:
    """The transcript's messages that verified, decoded."""

    transcript: Transcript
    announce: Announce | None = None
    roster: Roster | None = None
    release: Release | None = None
    release_digest: bytes = b""
    assigns: list[Assign] = field(default_factory=list)
    registrations: list[Register] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    shuffle_starts: list[ShuffleStart] = field(default_factory=list)

    #: The groups the grouping method forms on the registrations (label -> sorted member keys) and their
    #: centroids, when `check_grouping` could form them (registrations in the transcript).
    formed: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    formed_centroids: dict[int, tuple[float, ...]] = field(default_factory=dict)

    @property
    def k(self) -> int:
        return self.announce.params.k if self.announce is not None else 1

    def roster_keys(self) -> list[bytes] | None:
        """The roster in order (sorted keys), known only from the registrations."""
        if not self.transcript.registrations_included:
            return None
        return sorted(r.sender for r in self.registrations)

    def qi_of(self) -> dict[bytes, tuple[float, ...]]:
        return {reg.sender: reg.qi for reg in self.registrations}

    def runs(self) -> dict[tuple[int, int], ShuffleStart]:
        """The signed shuffle_starts by (group, run) (the first of two different ones: `exclusion_evidence`
        fails on those)."""
        runs: dict[tuple[int, int], ShuffleStart] = {}
        for s in self.shuffle_starts:
            runs.setdefault((s.group, s.run), s)
        return runs

    def issued(self, start: ShuffleStart) -> float:
        """When a shuffle_start was issued (SPEC §8.5): a run's deadline minus the step timeout, a closing
        one's (no members) deadline."""
        step = self.announce.params.step_timeout if self.announce is not None else 0.0
        return start.deadline if not start.members else start.deadline - step

    def statements(self) -> dict[bytes, list[tuple[float, int, int, str]]]:
        """Per member, the signed exclusions naming her: (issued, group, run, reason), oldest first."""
        out: dict[bytes, list[tuple[float, int, int, str]]] = defaultdict(list)
        for (group, run), s in sorted(self.runs().items()):
            for key, reason in s.excluded:
                out[key].append((self.issued(s), group, run, reason))
        for items in out.values():
            items.sort()
        return out

    def post_reveal_blamers(self) -> set[bytes]:
        """Members excluded `blamed_unsolicited` in the summary with no signed statement, who are in the last
        run of their group (a run with members): a blame after her group's reveal_open, when no run may
        follow and the group goes on with her (SPEC §4 share.6, §7.3 blame). No signed statement of the
        collector exists for that case: her record is opened with her group's, so every check counts it
        among her group's released records. Only with the shuffle_starts (without them nobody can tell)."""
        if not self.transcript.shuffle_starts_included:
            return set()
        runs, stated = self.runs(), self.statements()
        last: dict[int, ShuffleStart] = {}
        for (group, _run), s in sorted(runs.items()):
            last[group] = s
        out: set[bytes] = set()
        for a in self.assigns:
            if self.transcript.exclusions.get(sid_of(a.subject)) != "blamed_unsolicited":
                continue
            if any(reason != "merged" for *_, reason in stated.get(a.subject, [])):
                continue
            final = last.get(a.group)
            if final is not None and a.subject in final.members:
                out.add(a.subject)
        return out

    def record_holders(self) -> tuple[dict[int, set[bytes]], dict[int, set[bytes]]]:
        """Per group (her latest assign's), the members whose records the release must hold (not excluded,
        or excluded after the reveal_open: `post_reveal_blamers`) and those whose records it may hold
        (excluded `blamed_unsolicited` in a transcript without shuffle_starts: before or after the reveal_open,
        nobody can tell)."""
        after = self.post_reveal_blamers()
        sure: dict[int, set[bytes]] = defaultdict(set)
        maybe: dict[int, set[bytes]] = defaultdict(set)
        for a in self.assigns:
            reason = self.transcript.exclusions.get(sid_of(a.subject))
            if reason is None or a.subject in after:
                sure[a.group].add(a.subject)
            elif reason == "blamed_unsolicited" and not self.transcript.shuffle_starts_included:
                maybe[a.group].add(a.subject)
        return sure, maybe


def _decode(data: bytes, what: str, check: Check) -> codec.Decoded | None:
    try:
        return codec.decode(data, codec.Limits())
    except RemoteProtocolError as exc:
        check.fail(f"{what}: {exc.reason} ({exc.detail})")
        return None


def check_signatures(r: VerifiedRound, check: Check) -> None:
    """Verify every envelope under its sender's key, all of this round, and decode into ``r`` what verified."""
    t = r.transcript
    decoded = _decode(t.announce, "announce", check)
    if decoded is None:
        return
    if not isinstance(decoded.message, Announce):
        check.fail(f"announce: a {decoded.message.TAG} in its place")
        return
    if decoded.message.sender != t.collector_key:
        check.fail("announce: signed by another key than the transcript's collector_key")
    if decoded.message.round_id != t.round_id:
        check.fail("announce: of another round than the transcript's")
    r.announce = decoded.message
    collector = decoded.message.sender

    def take(data: bytes, what: str, cls: type[Message]) -> Message | None:
        d = _decode(data, what, check)
        if d is None:
            return None
        message = d.message
        if not isinstance(message, cls):
            check.fail(f"{what}: a {message.TAG}, expected a {cls.TAG}")
            return None
        if message.round_id != t.round_id:
            check.fail(f"{what}: of another round ({message.round_id.hex()}): a replay")
            return None
        if (message.TAG in COLLECTOR_TAGS) != (message.sender == collector):
            signer = "another key than the collector" if message.TAG in COLLECTOR_TAGS else "the collector"
            check.fail(f"{what}: signed by {signer}")
            return None
        if isinstance(message, Release):
            r.release_digest = d.digest
        return message

    if t.roster is not None:
        roster = take(t.roster, "roster", Roster)
        r.roster = roster if isinstance(roster, Roster) else None
    if t.release is not None:
        release = take(t.release, "release", Release)
        r.release = release if isinstance(release, Release) else None
    groups: list[tuple[Sequence[bytes], str, type[Message], list[Any]]] = [
        (t.assignments, "assign", Assign, r.assigns),
        (t.registrations, "registration", Register, r.registrations),
        (t.verdicts, "verdict", Verdict, r.verdicts),
        (t.shuffle_starts, "shuffle_start", ShuffleStart, r.shuffle_starts),
    ]
    total = 1 + (t.roster is not None) + (t.release is not None)
    for items, what, cls, sink in groups:
        for i, data in enumerate(items):
            message = take(data, f"{what} {i}", cls)
            if message is not None:
                sink.append(message)
        total += len(items)
    if check.status == "pass":
        check.notes.append(f"{total} envelopes (protocol version {codec.PROTOCOL_VERSION}) verify under their "
                           f"senders' keys, all of round {t.round_id.hex()}")


def need(r: VerifiedRound, check: Check, *, roster: bool = False, release: bool = False) -> bool:
    """Whether ``r`` holds what a check needs (a valid announce, and the roster or release asked for); if
    not, ``check`` is skipped saying what is missing, or failed when the round went past the release
    without one on the release topic."""
    if r.announce is None:
        check.skip("no valid announce")
        return False
    if roster and r.roster is None:
        t = r.transcript
        later = [what for what, held in (("a release", t.release is not None), ("assigns", bool(t.assignments)),
                                         ("shuffle_starts", bool(t.shuffle_starts)), ("verdicts", bool(t.verdicts)))
                 if held]
        if t.roster is None and later:
            # The collector signs the roster before any of them (SPEC §8.5): a transcript that holds them without
            # it withholds the roster, and with it every check of the roster and the release (k, the groups).
            check.fail(f"no roster although the transcript holds {', '.join(later)}, which follow it: the roster "
                       "withheld")
        else:
            check.skip(f"no roster (phase {t.phase})")
        return False
    if release and r.release is None:
        if r.transcript.phase in ("auditing", "done") or r.transcript.verdicts:
            # Past the release, it must be on the release topic (retained, the same for everyone): a
            # collector that showed releases only in inboxes may have shown different ones (split view).
            check.fail(f"no release on the release topic although the round reached {r.transcript.phase} "
                       f"({len(r.transcript.verdicts)} verdicts): releases shown only privately")
        else:
            check.skip(f"no release (phase {r.transcript.phase})")
        return False
    return True


def check_parameters(r: VerifiedRound, check: Check) -> None:
    """The announced parameters protect someone: k at least 2 (k = 1 releases every record alone), a known
    grouping method, QI and confidential attributes named, a positive step timeout."""
    if not need(r, check):
        return
    assert r.announce is not None
    params = r.announce.params
    if params.k < 2:
        check.fail(f"the announce sets k = {params.k}: groups of fewer than 2 records protect nobody")
    if params.method not in ("mdav", "safepub"):
        check.fail(f"the announce names the grouping method {params.method!r}, not mdav or safepub")
    if not params.qi_names or not params.confidential_names:
        check.fail("the announce names no QI attribute or no confidential attribute")
    if not (math.isfinite(params.step_timeout) and params.step_timeout > 0):
        # `exclusion_evidence` times a `silent` exclusion by the announced step: with none, a live member could be
        # excluded at once (found by fuzzing the auditor: 0 and -1 passed).
        check.fail(f"the announce sets step_timeout = {params.step_timeout!r}: no time for a member to answer")
    if r.roster is not None and params.k > r.roster.n:
        check.fail(f"k = {params.k} for a roster of {r.roster.n} subjects")
    if check.status == "pass":
        check.notes.append(f"k = {params.k}, {params.method} on {len(params.qi_names)} QIs, "
                           f"{len(params.confidential_names)} confidential attribute(s)")


def check_roster(r: VerifiedRound, check: Check) -> None:
    """The assigns against the roster: its root, leaf order and size; one member list and centroid per group."""
    if not need(r, check, roster=True):
        return
    assert r.roster is not None
    root, n = r.roster.merkle_root, r.roster.n
    by_subject: dict[bytes, Assign] = {}
    for a in r.assigns:
        if a.subject in by_subject:
            check.fail(f"two assigns for subject {sid_of(a.subject)}")
        by_subject[a.subject] = a
        if a.merkle_root != r.roster.merkle_root:
            check.fail(f"subject {sid_of(a.subject)}'s assign names roster root {a.merkle_root.hex()[:16]}, the roster "
                       f"{root.hex()[:16]} (split view of the roster)")
        if not 0 <= a.leaf_index < n:
            check.fail(f"subject {sid_of(a.subject)}'s leaf index {a.leaf_index} outside a roster of {n}")
        if a.group >= r.roster.n_groups:
            check.fail(f"subject {sid_of(a.subject)} assigned group {a.group}, the roster has {r.roster.n_groups}")
    # A class's members excluded `suppressed_class` after its run lost members have an assign: count each once.
    assigned = {sid_of(key) for key in by_subject}
    suppressed = sum(1 for sid, reason in r.transcript.exclusions.items()
                     if reason == "suppressed_class" and sid not in assigned)
    if len(by_subject) + suppressed != n:
        check.fail(f"{len(by_subject)} assigns (+ {suppressed} suppressed classes' members) for a roster of {n}")
    ordered = sorted(by_subject.values(), key=lambda a: a.subject)
    if [a.leaf_index for a in ordered] != sorted(a.leaf_index for a in ordered) or \
            len({a.leaf_index for a in ordered}) != len(ordered):
        check.fail("leaf indices are not in the order of the subjects' keys (the roster order)")
    keys = r.roster_keys()
    if keys is not None:
        for a in ordered:
            if a.subject in keys and keys.index(a.subject) != a.leaf_index:
                check.fail(f"subject {sid_of(a.subject)} at leaf {a.leaf_index}, her roster position is "
                           f"{keys.index(a.subject)}")
    # Every record holder's latest assign (`VerifiedRound.record_holders`: live members, and members exempt
    # from a signed exclusion, whose records the release holds) must agree per group: one member list, one
    # centroid. An excluded member keeps the assign of the group she left (which may have merged since), so
    # hers only has to be well-formed; one whose record the release may hold (`blamed_unsolicited` without
    # the shuffle_starts) may only list members whose assigns name her group.
    sure, maybe = r.record_holders()
    holders = set().union(*sure.values()) if sure else set()
    maybe_holders = set().union(*maybe.values()) if maybe else set()
    members_of: dict[int, set[tuple[bytes, ...]]] = defaultdict(set)
    centroid_of: dict[int, set[tuple[float, ...]]] = defaultdict(set)
    for a in ordered:
        if a.subject not in a.members:
            check.fail(f"subject {sid_of(a.subject)}'s assign does not list her among group {a.group}'s members")
        if list(a.members) != sorted(set(a.members)):
            check.fail(f"group {a.group}: members unsorted or repeated")
        if len(a.members) < r.k:
            check.fail(f"group {a.group} assigned with {len(a.members)} members, below k = {r.k}")
        if a.subject in holders:
            members_of[a.group].add(a.members)
            centroid_of[a.group].add(a.centroid)
        elif a.subject in maybe_holders:
            for m in a.members:
                if m in by_subject and by_subject[m].group != a.group:
                    check.fail(f"group {a.group}: {sid_of(a.subject)} (excluded blamed_unsolicited, her record maybe "
                               f"released) was told a member list naming {sid_of(m)}, whose assign names group "
                               f"{by_subject[m].group}")
    for group, views in sorted(members_of.items()):
        if len(views) > 1:
            check.fail(f"group {group}: its members were told {len(views)} different member lists (split view)")
        if len(centroid_of[group]) > 1:
            check.fail(f"group {group}: its members were told {len(centroid_of[group])} different centroids")
        for members in views:
            for m in members:
                if m in by_subject and by_subject[m].group != group:
                    check.fail(f"group {group} lists {sid_of(m)}, whose assign names group {by_subject[m].group}")
    if check.status == "pass":
        check.notes.append(f"{len(ordered)} assigns of {len(members_of)} groups name the roster root "
                           f"{root.hex()[:16]} (n = {n}); every group's members were told the same")


def _check_fellows(r: VerifiedRound, check: Check, root: bytes, n: int) -> None:
    """Every assign's fellow entries (SPEC §8.3): one per other member, each leading to the roster root."""
    bad = [a for a in r.assigns if len(a.fellows) != len(a.members) - (a.subject in a.members) or not all(
        merkle.verify_inclusion(merkle.roster_leaf(key, entry[1]), entry[0], n, entry[2], root)
        for key, entry in zip([m for m in a.members if m != a.subject], a.fellows, strict=False))]
    for a in bad[:5]:
        check.fail(f"subject {sid_of(a.subject)}'s assign names fellow members not on the roster (a run of her own)")
    if len(bad) > 5:
        check.fail(f"... and {len(bad) - 5} more assigns with fellows not on the roster")


def _path_root(leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes]) -> bytes | None:
    """The root an audit path leads to from a leaf hash (`merkle.verify_inclusion`'s walk); None if malformed."""
    current, position, width = leaf_hash, 0, size
    while width > 1:
        if index % 2 == 1 or index + 1 < width:
            if position >= len(proof):
                return None
            sibling = proof[position]
            position += 1
            current = merkle.node_hash(sibling, current) if index % 2 == 1 else merkle.node_hash(current, sibling)
        index //= 2
        width = (width + 1) // 2
    return current if position == len(proof) else None


def check_inclusion(r: VerifiedRound, check: Check) -> None:
    """The roster root against the registrations and every inclusion proof (without registrations: each
    proof against its neighbour's leaf hash)."""
    if not need(r, check, roster=True):
        return
    assert r.roster is not None and r.announce is not None
    root, n = r.roster.merkle_root, r.roster.n
    by_index = {a.leaf_index: a for a in r.assigns}
    if r.transcript.registrations_included:
        qi_of = {reg.sender: reg.qi for reg in r.registrations}
        if len(qi_of) != len(r.registrations):
            check.fail("two registrations from one subject")
        if len(qi_of) != n:
            check.fail(f"{len(qi_of)} registrations for a roster of {n} (members added to or left out of the roster)")
        width = len(r.announce.params.qi_names)
        if any(len(qi) != width for qi in qi_of.values()):
            check.fail(f"a registration without exactly {width} QI values")
            return
        keys = sorted(qi_of)
        commitment_of = {reg.sender: merkle.qi_commitment(reg.salt, reg.qi) for reg in r.registrations}
        tree = merkle.MerkleTree([merkle.roster_leaf(key, commitment_of[key]) for key in keys])
        if tree.root != root:
            check.fail(f"the roster root {root.hex()[:16]} is not the Merkle root over the registrations "
                       f"({tree.root.hex()[:16]})")
        for a in r.assigns:
            if a.subject not in qi_of:
                check.fail(f"assign to {sid_of(a.subject)}, who never registered (a fabricated member)")
            elif not merkle.verify_inclusion(merkle.roster_leaf(a.subject, commitment_of[a.subject]), a.leaf_index,
                                             n, a.proof, root):
                check.fail(f"subject {sid_of(a.subject)}'s inclusion proof does not lead to the roster root")
        if check.status == "pass":
            check.notes.append(f"the roster root is the tree over the {n} registrations; {len(r.assigns)} "
                               "inclusion proofs verify")
        _check_fellows(r, check, root, n)
        return
    # Without registrations the leaves are unknown; a leaf's hash is its neighbour's first proof element.
    checked = 0
    for a in r.assigns:
        sibling = by_index.get(a.leaf_index ^ 1)
        if sibling is None or not sibling.proof or (a.leaf_index ^ 1) >= n:
            continue
        if _path_root(sibling.proof[0], a.leaf_index, n, a.proof) != root:
            check.fail(f"subject {sid_of(a.subject)}'s inclusion proof (with her neighbour's leaf hash) does not lead "
                       "to the roster root")
        checked += 1
    _check_fellows(r, check, root, n)
    check.notes.append(f"no registrations in the transcript: {checked} proofs checked for consistency with their "
                       "neighbours' only, the leaves (key and QIs) not (export with --with-registrations)")
