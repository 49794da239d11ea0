"""The auditor (protocol/SPEC.md §2, §12): check a published round end to end from its signed transcript.

`verify_path` takes a run directory (``transcript.json`` beside ``release.csv`` and ``manifest.json``)
or a transcript file (``coutil collector export --transcript``) and runs the checks of `CHECKS`, each
naming the collector deviation it catches. A check passes, fails (with every problem it found, one
line each) or is skipped (what it needs is not in the transcript: registrations, shuffle_starts, a
release). Nothing here trusts the collector's unsigned words beyond reporting them: every message is
verified under its sender's key, every root recomputed.

What the transcript cannot show, stated: a Sybil admitted with a signed registration of its own
(``fabricate-members``, ``isolate-victim``) is indistinguishable from a real subject (SPEC §3: it
takes admission control); a member the collector claims silent after waiting a step timeout, when
it withholds her messages (``drop-subject`` done patiently), looks like a member who was silent. An
excluded subject can still prove she was live with her own signed messages, which she keeps.
"""

from __future__ import annotations

import csv
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from coutil.audit.subject import release_digest
from coutil.errors import InputError, RemoteProtocolError
from coutil.protocol import codec, merkle, topics
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
from coutil.round.transcript import TRANSCRIPT_NAME, Transcript, read_transcript
from coutil.sdc.generalization import classes_of, parse_scheme
from coutil.sdc.mdav import mdav

#: Exclusion reason codes of SPEC §7.3 (and SafePub's ``suppressed_class``, §9.1).
EXCLUSION_REASONS = frozenset({
    "silent", "blamed_tamper", "blamed_malformed", "blamed_false_complaint", "blamed_copy", "blamed_unsolicited",
    "blamed_split_view", "blame_inconclusive", "merged", "below_k_no_partner", "suppressed", "suppressed_class",
})

#: What a subject's complaint reveals about the collector (SPEC §3), by verdict reason.
COMPLAINT_MEANING = {
    "not_included": "her record is not in the release (drop-subject, or a record replaced)",
    "not_k_anonymous": "a released group below k or with several QI vectors (publish-below-k)",
    "distance_below_promise": "the release discloses her record closer than the collector promised",
    "malformed_release": "a release that does not parse",
    "rows_root_mismatch": "release rows that do not match their rows_root",
    "roster_mismatch": "a release of another roster (split-view-roster / split-view-release)",
    "split_view": "members of one run shown different memberships or rosters (split view)",
    "rerun_after_reveal": "a group run again after its records were opened (rerun-subtract)",
    "excluded_after_reveal": "a member dropped after she revealed, to subtract the records (rerun-subtract)",
    "regroup_after_reveal": "a member regrouped after she revealed (rerun-subtract)",
    "run_below_k": "a run with fewer than k members (publish-below-k, isolate-victim)",
    "run_not_in_group": "a run with members outside the assigned group (isolate-victim, split view)",
}


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
class VerifyResult:
    """Every check of one round, in order."""

    source: str
    round_id: str
    checks: list[Check]
    complaints_by_reason: dict[str, int]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def first_problem(self) -> str | None:
        for check in self.checks:
            if check.problems:
                return f"{check.name}: {check.problems[0]}"
        return None

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "round": self.round_id, "ok": self.ok, "first_problem": self.first_problem,
                "checks": [c.as_dict() for c in self.checks], "complaints_by_reason": self.complaints_by_reason}


#: (name, the deviations it catches), in the order the checks run.
CHECKS: tuple[tuple[str, str], ...] = (
    ("signatures", "a tampered or forged transcript, messages of another round (replays), collector messages not "
                   "signed by the announced key, registrations or verdicts not signed by their subjects"),
    ("roster", "split-view-roster (assigns naming another roster root; one group shown different member lists), "
               "assignments that do not match the roster's size and order"),
    ("inclusion", "split-view-roster and fabricate-members done in the tree (a roster root that is not the tree over "
                  "the registered subjects; inclusion proofs that do not verify)"),
    ("grouping", "groups that are not MDAV's (or SafePub's classes) on the roster: isolate-victim by hand-made "
                 "groups, victims grouped with chosen members"),
    ("release", "publish-below-k, a release of another roster, rows that do not match rows_root, released groups "
                "outside the roster, QI values that are not the group's centroid"),
    ("release_files", "a release.csv or manifest.json that is not the signed release"),
    ("membership", "drop-subject (a member neither released nor excluded, a released group missing live members' "
                   "records), fabricated rows (more rows than live members), unknown exclusion reasons"),
    ("exclusion_evidence", "drop-subject (an exclusion the collector never signed, a member excluded `silent` "
                           "before the run's step deadline or from a run she was not in)"),
    ("verdicts", "split-view-release (verdicts bound to another release digest), split-view-roster (bound to another "
                 "roster root), verdicts from outside the roster"),
    ("complaints", "whatever the subjects detected and complained of (run_below_k, split_view, rerun_after_reveal, "
                   "not_k_anonymous, ...)"),
)


@dataclass
class _Round:
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

    @property
    def k(self) -> int:
        return self.announce.params.k if self.announce is not None else 1

    def roster_keys(self) -> list[bytes] | None:
        """The roster in order (sorted keys), known only from the registrations."""
        if not self.transcript.registrations_included:
            return None
        return sorted(r.sender for r in self.registrations)


def _decode(data: bytes, what: str, check: Check) -> codec.Decoded | None:
    try:
        return codec.decode(data, codec.Limits())
    except RemoteProtocolError as exc:
        check.fail(f"{what}: {exc.reason} ({exc.detail})")
        return None


def _check_signatures(r: _Round, check: Check) -> None:
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


def _need(r: _Round, check: Check, *, roster: bool = False, release: bool = False) -> bool:
    if r.announce is None:
        check.skip("no valid announce")
        return False
    if roster and r.roster is None:
        check.skip(f"no roster (phase {r.transcript.phase})")
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


def _sid(key: bytes) -> str:
    return topics.sid_of(key)


def _check_roster(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True):
        return
    assert r.roster is not None
    root, n = r.roster.merkle_root, r.roster.n
    by_subject: dict[bytes, Assign] = {}
    for a in r.assigns:
        if a.subject in by_subject:
            check.fail(f"two assigns for subject {_sid(a.subject)}")
        by_subject[a.subject] = a
        if a.merkle_root != r.roster.merkle_root:
            check.fail(f"subject {_sid(a.subject)}'s assign names roster root {a.merkle_root.hex()[:16]}, the roster "
                       f"{root.hex()[:16]} (split view of the roster)")
        if not 0 <= a.leaf_index < n:
            check.fail(f"subject {_sid(a.subject)}'s leaf index {a.leaf_index} outside a roster of {n}")
        if a.group >= r.roster.n_groups:
            check.fail(f"subject {_sid(a.subject)} assigned group {a.group}, the roster has {r.roster.n_groups}")
    suppressed = sum(1 for reason in r.transcript.exclusions.values() if reason == "suppressed_class")
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
                check.fail(f"subject {_sid(a.subject)} at leaf {a.leaf_index}, her roster position is "
                           f"{keys.index(a.subject)}")
    # The latest assigns of the live members must agree per group; an excluded member keeps the assign
    # of the group she left (which may have merged since), so hers only has to be well-formed.
    excluded = r.transcript.exclusions
    members_of: dict[int, set[tuple[bytes, ...]]] = defaultdict(set)
    centroid_of: dict[int, set[tuple[float, ...]]] = defaultdict(set)
    for a in ordered:
        if a.subject not in a.members:
            check.fail(f"subject {_sid(a.subject)}'s assign does not list her among group {a.group}'s members")
        if list(a.members) != sorted(set(a.members)):
            check.fail(f"group {a.group}: members unsorted or repeated")
        if len(a.members) < r.k:
            check.fail(f"group {a.group} assigned with {len(a.members)} members, below k = {r.k}")
        if _sid(a.subject) not in excluded:
            members_of[a.group].add(a.members)
            centroid_of[a.group].add(a.centroid)
    for group, views in sorted(members_of.items()):
        if len(views) > 1:
            check.fail(f"group {group}: its members were told {len(views)} different member lists (split view)")
        if len(centroid_of[group]) > 1:
            check.fail(f"group {group}: its members were told {len(centroid_of[group])} different centroids")
        for members in views:
            for m in members:
                if m in by_subject and by_subject[m].group != group:
                    check.fail(f"group {group} lists {_sid(m)}, whose assign names group {by_subject[m].group}")
    if check.status == "pass":
        check.notes.append(f"{len(ordered)} assigns of {len(members_of)} groups name the roster root "
                           f"{root.hex()[:16]} (n = {n}); every group's members were told the same")


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


def _check_inclusion(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True):
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
        tree = merkle.MerkleTree([merkle.roster_leaf(key, qi_of[key]) for key in keys])
        if tree.root != root:
            check.fail(f"the roster root {root.hex()[:16]} is not the Merkle root over the registrations "
                       f"({tree.root.hex()[:16]})")
        for a in r.assigns:
            if a.subject not in qi_of:
                check.fail(f"assign to {_sid(a.subject)}, who never registered (a fabricated member)")
            elif not merkle.verify_inclusion(merkle.roster_leaf(a.subject, qi_of[a.subject]), a.leaf_index, n,
                                             a.proof, root):
                check.fail(f"subject {_sid(a.subject)}'s inclusion proof does not lead to the roster root")
        if check.status == "pass":
            check.notes.append(f"the roster root is the tree over the {n} registrations; {len(r.assigns)} "
                               "inclusion proofs verify")
        return
    # Without registrations the leaves are unknown; a leaf's hash is its neighbour's first proof element.
    checked = 0
    for a in r.assigns:
        sibling = by_index.get(a.leaf_index ^ 1)
        if sibling is None or not sibling.proof or (a.leaf_index ^ 1) >= n:
            continue
        if _path_root(sibling.proof[0], a.leaf_index, n, a.proof) != root:
            check.fail(f"subject {_sid(a.subject)}'s inclusion proof (with her neighbour's leaf hash) does not lead "
                       "to the roster root")
        checked += 1
    check.notes.append(f"no registrations in the transcript: {checked} proofs checked for consistency with their "
                       "neighbours' only, the leaves (key and QIs) not (export with --with-registrations)")


def _check_grouping(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True):
        return
    if not r.transcript.registrations_included:
        check.skip("needs the registrations (export or run with --with-registrations)")
        return
    assert r.roster is not None and r.announce is not None
    params = r.announce.params
    qi_of = {reg.sender: reg.qi for reg in r.registrations}
    keys = sorted(qi_of)
    if len(keys) != r.roster.n or not keys:
        check.skip("the registrations are not the roster (see inclusion)")
        return
    matrix = np.array([qi_of[key] for key in keys], dtype=np.float64)
    excluded = {sid: reason for sid, reason in r.transcript.exclusions.items()}
    assigned = {a.subject: a for a in r.assigns}
    if params.method == "safepub":
        manifest = dict(params.manifest)
        try:
            scheme = parse_scheme(manifest.get("safepub_bins", ""), params.qi_names)
        except InputError as exc:
            check.fail(f"the announced SafePub bins do not parse: {exc}")
            return
        classes = classes_of(matrix, scheme)
        labels, centres, n_groups = classes.labels, classes.midpoints, int(classes.midpoints.shape[0])
    elif params.method == "mdav":
        grouping = mdav(matrix, params.k)
        labels, centres, n_groups = grouping.groups, np.asarray(grouping.centroids, dtype=np.float64), \
            grouping.n_groups
    else:
        check.skip(f"unknown grouping method {params.method!r}")
        return
    if r.roster.n_groups != n_groups:
        check.fail(f"the roster announces {r.roster.n_groups} groups, {params.method} forms {n_groups}")
    expected: dict[int, list[bytes]] = defaultdict(list)
    for key, label in zip(keys, labels.tolist(), strict=True):
        expected[int(label)].append(key)
    merges = 0
    for label, members in sorted(expected.items()):
        if len(members) < params.k:
            # SafePub: a class below k gets no assign; its members are excluded `suppressed_class`.
            for key in members:
                if key in assigned:
                    check.fail(f"class {label} has {len(members)} members, below k, yet {_sid(key)} was assigned")
                elif excluded.get(_sid(key)) != "suppressed_class":
                    check.fail(f"{_sid(key)} of class {label} (below k) is not excluded `suppressed_class`")
            continue
        if any(key not in assigned for key in members):
            check.fail(f"group {label}: {sum(key not in assigned for key in members)} of its members got no assign")
            continue
        now_in = {assigned[key].group for key in members}
        if now_in == {label}:
            first = assigned[members[0]]
            want = tuple(float(v) for v in centres[label])
            if first.members == tuple(sorted(members)) and first.centroid != want:
                check.fail(f"group {label}: assigned centroid {first.centroid}, {params.method} gives {want}")
            continue
        # A merge: the group lost members below k before its reveal and all the others moved to one group.
        movers = [key for key in members if assigned[key].group != label]
        targets = {assigned[key].group for key in movers}
        stayed = [key for key in members if assigned[key].group == label and _sid(key) not in excluded]
        if len(targets) != 1:
            check.fail(f"group {label} ({params.method}) split over groups {sorted(targets)}")
        elif stayed:
            check.fail(f"group {label}: {len(movers)} members moved to group {min(targets)}, {len(stayed)} stayed")
        elif params.method != "mdav":
            check.fail(f"class {label} merged into another: SafePub never merges")
        elif min(targets) not in expected:
            check.fail(f"group {label} moved to group {min(targets)}, which {params.method} never formed")
        else:
            merges += 1
    if check.status == "pass":
        check.notes.append(f"the {n_groups} groups are {params.method}'s on the {len(keys)} registrations"
                           + (f" ({merges} merged after losing members below k)" if merges else ""))


def _release_matrix(release: Release) -> np.ndarray | None:
    width = 8 * len(release.columns)
    if not release.columns or len(release.rows) % width:
        return None
    return np.frombuffer(release.rows, dtype="<f8").reshape(-1, len(release.columns))


def _check_release(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True, release=True):
        return
    assert r.release is not None and r.roster is not None and r.announce is not None
    rel, params = r.release, r.announce.params
    columns = tuple(params.qi_names) + tuple(params.confidential_names)
    if rel.columns != columns:
        check.fail(f"columns {list(rel.columns)}, the announce names {list(columns)}")
    matrix = _release_matrix(rel)
    if matrix is None:
        check.fail("rows do not fill the columns (malformed release)")
        return
    if rel.roster_root != r.roster.merkle_root:
        check.fail(f"the release names roster root {rel.roster_root.hex()[:16]}, the roster is "
                   f"{r.roster.merkle_root.hex()[:16]} (a release of another roster)")
    if merkle.rows_root(rel.rows, len(rel.columns)) != rel.rows_root:
        check.fail("rows_root is not the Merkle root over the release's rows")
    if len(rel.group_ids) != len(rel.group_sizes) or sum(rel.group_sizes) != matrix.shape[0]:
        check.fail(f"group sizes add up to {sum(rel.group_sizes)} for {matrix.shape[0]} rows")
        return
    if len(set(rel.group_ids)) != len(rel.group_ids) or any(g >= r.roster.n_groups for g in rel.group_ids):
        check.fail(f"group numbers repeated or not below the roster's {r.roster.n_groups} groups")
    if matrix.shape[0] > r.roster.n:
        check.fail(f"{matrix.shape[0]} rows for a roster of {r.roster.n} subjects (fabricated rows)")
    excluded = r.transcript.exclusions
    centroid_of: dict[int, tuple[float, ...]] = {}
    changed: set[int] = set()
    for a in r.assigns:
        if _sid(a.subject) in excluded:
            changed.add(a.group)  # released with the mean of its final members (SPEC §4)
        else:
            centroid_of[a.group] = a.centroid
    qi_of = {reg.sender: reg.qi for reg in r.registrations}
    nq = len(params.qi_names)
    start = 0
    for group, size in zip(rel.group_ids, rel.group_sizes, strict=True):
        block = matrix[start:start + size, :nq]
        start += size
        if size < params.k:
            check.fail(f"group {group} released with {size} records, below k = {params.k} (publish-below-k)")
        if size and not (block == block[0]).all():
            check.fail(f"group {group}: its rows hold several QI vectors (not k-anonymous)")
        elif size and group in centroid_of and (group not in changed or params.method != "mdav") \
                and tuple(float(v) for v in block[0]) != centroid_of[group]:
            check.fail(f"group {group}: released QIs {tuple(block[0].tolist())} are not its assigned centroid "
                       f"{centroid_of[group]}")
        elif size and group in changed and qi_of and params.method == "mdav":
            final = [qi_of[a.subject] for a in r.assigns if a.group == group and _sid(a.subject) not in excluded
                     and a.subject in qi_of]
            if final and not np.allclose(block[0], np.mean(np.array(final), axis=0), rtol=1e-12, atol=0.0):
                check.fail(f"group {group}: released QIs {tuple(block[0].tolist())} are not the mean of its final "
                           "members' QIs")
    if check.status == "pass":
        check.notes.append(f"{matrix.shape[0]} rows in {len(rel.group_ids)} groups, each of at least k = {params.k} "
                           "with one QI vector (its centroid); rows_root and roster_root hold")


def _check_release_files(r: _Round, check: Check, directory: Path | None) -> None:
    if directory is None:
        check.skip("a transcript alone: no release.csv to compare")
        return
    if not _need(r, check, release=True):
        return
    assert r.release is not None
    matrix = _release_matrix(r.release)
    if matrix is None:
        check.skip("malformed release (see release)")
        return
    path = directory / "release.csv"
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            lines = list(csv.reader(handle))
    except (OSError, UnicodeDecodeError) as exc:
        check.fail(f"{path.name}: cannot read it ({exc})")
        return
    if not lines or tuple(lines[0]) != r.release.columns:
        check.fail(f"{path.name}: header {lines[0] if lines else []} is not the release's columns")
        return
    try:
        values = np.array([[float(cell) for cell in row] for row in lines[1:] if row], dtype=np.float64)
    except ValueError as exc:
        check.fail(f"{path.name}: not numbers ({exc})")
        return
    values = values.reshape(-1, len(r.release.columns))
    if values.shape != matrix.shape:
        check.fail(f"{path.name}: {values.shape[0]} rows, the signed release has {matrix.shape[0]}")
    elif not np.array_equal(values, matrix):
        row = int(np.argwhere((values != matrix).any(axis=1))[0][0])
        check.fail(f"{path.name}: row {row + 2} differs from the signed release")
    manifest_path = directory / "manifest.json"
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            check.fail(f"{manifest_path.name}: not JSON ({exc})")
            return
        rel = r.release
        digest = release_digest(rel.round_id, rel.columns, rel.group_sizes, matrix).hex()
        if manifest.get("release_digest") != digest:
            check.fail(f"{manifest_path.name}: release_digest is not the signed release's")
        if manifest.get("group_ids") != list(rel.group_ids) or manifest.get("group_sizes") != list(rel.group_sizes):
            check.fail(f"{manifest_path.name}: group_ids/group_sizes are not the signed release's")
        if manifest.get("round_id") != rel.round_id.hex():
            check.fail(f"{manifest_path.name}: round_id {manifest.get('round_id')} is not the transcript's")
    if check.status == "pass":
        check.notes.append("release.csv holds exactly the signed release's rows"
                           + ("; manifest.json its digest and groups" if manifest_path.exists() else ""))


def _check_membership(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True):
        return
    assert r.roster is not None
    exclusions = dict(r.transcript.exclusions)
    for sid, reason in sorted(exclusions.items()):
        if reason not in EXCLUSION_REASONS:
            check.fail(f"{sid} excluded for an unknown reason {reason!r}")
    known = {_sid(a.subject) for a in r.assigns} | {_sid(reg.sender) for reg in r.registrations}
    for sid in sorted(set(exclusions) - known):
        if exclusions[sid] != "suppressed_class" or r.transcript.registrations_included:
            check.fail(f"{sid} is named excluded but is not in the roster")
    if r.release is None:
        check.skip(f"no release (phase {r.transcript.phase}): only the exclusions were checked")
        return
    released = dict(zip(r.release.group_ids, r.release.group_sizes, strict=False))
    live: dict[int, int] = Counter()
    tolerated: dict[int, int] = Counter()
    for a in r.assigns:
        excluded_for = exclusions.get(_sid(a.subject))
        if excluded_for is None:
            live[a.group] += 1
        elif excluded_for == "blamed_unsolicited":
            tolerated[a.group] += 1  # excluded after her group's reveal_open: her record may be opened
    for group in sorted(set(live) | set(released)):
        size, alive = released.get(group, 0), live.get(group, 0)
        if size > alive + tolerated.get(group, 0):
            check.fail(f"group {group}: {size} records released for {alive} live members (fabricated or excluded "
                       "members' records)")
        elif size < alive and group in released:
            check.fail(f"group {group}: {size} records released for {alive} live members: {alive - size} dropped "
                       "without an exclusion (drop-subject; or a member's unopenable item)")
        elif group not in released and alive:
            check.fail(f"group {group}: {alive} members neither released nor excluded (drop-subject)")
    total = sum(released.values())
    reasons = Counter(exclusions.values())
    check.notes.append(f"{r.roster.n} roster members: {total} released, {len(exclusions)} excluded"
                       + (f" ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})" if reasons else ""))


def _check_exclusion_evidence(r: _Round, check: Check) -> None:
    if not _need(r, check):
        return
    assert r.announce is not None
    if not r.transcript.shuffle_starts_included:
        if r.transcript.exclusions:
            check.skip("the transcript holds no shuffle_start (collector export): the exclusions are the collector's "
                       "unsigned summary")
        return
    step = r.announce.params.step_timeout
    runs: dict[tuple[int, int], ShuffleStart] = {}
    for s in r.shuffle_starts:
        previous = runs.get((s.group, s.run))
        if previous is not None and previous != s:
            check.fail(f"group {s.group} run {s.run}: two different shuffle_starts (split view of the run)")
        runs[(s.group, s.run)] = s
    signed: dict[str, tuple[str, int, int]] = {}
    for (group, run), s in sorted(runs.items()):
        issued = s.deadline if not s.members else s.deadline - step
        previous = runs.get((group, run - 1))
        for key, reason in s.excluded:
            signed.setdefault(_sid(key), (reason, group, run))
            if reason in ("suppressed_class",):
                continue
            if previous is None:
                if reason != "merged" or run > 0:
                    check.fail(f"group {group} run {run} excludes {_sid(key)} ({reason}) without a previous run "
                               "she could have failed in (drop-subject)")
                continue
            if key not in previous.members:
                check.fail(f"group {group} run {run} excludes {_sid(key)} ({reason}), not a member of run {run - 1}")
            if reason == "silent" and issued < previous.deadline - 1e-6:
                check.fail(f"group {group} run {run} excludes {_sid(key)} as silent {previous.deadline - issued:.3g} s "
                           f"before run {run - 1}'s step deadline (drop-subject)")
    for sid, reason in sorted(r.transcript.exclusions.items()):
        statement = signed.get(sid)
        if statement is None:
            if reason != "blamed_unsolicited":  # after reveal_open the group goes on without a new run
                check.fail(f"{sid} excluded ({reason}) in the summary, in no signed shuffle_start")
        elif statement[0] != reason and statement[0] != "merged":
            check.fail(f"{sid} excluded as {reason} in the summary, as {statement[0]} in group {statement[1]} "
                       f"run {statement[2]}'s signed shuffle_start")
    for sid, (reason, group, run) in sorted(signed.items()):
        if reason != "merged" and sid not in r.transcript.exclusions:
            check.fail(f"{sid} excluded ({reason}) by group {group} run {run}'s shuffle_start, not in the summary")
    if check.status == "pass":
        check.notes.append(f"{len(r.transcript.exclusions)} exclusions, each in a signed shuffle_start, none "
                           "before a run's step deadline")


def _check_verdicts(r: _Round, check: Check) -> None:
    if not _need(r, check, roster=True, release=True):
        return
    assert r.roster is not None and r.release is not None
    members = {a.subject for a in r.assigns} | {reg.sender for reg in r.registrations}
    seen: set[bytes] = set()
    other_release = other_roster = 0
    for v in r.verdicts:
        sid = _sid(v.sender)
        if v.sender not in members:
            check.fail(f"verdict from {sid}, who is not in the roster")
        if v.sender in seen:
            check.fail(f"two verdicts from {sid}")
        seen.add(v.sender)
        if v.release_digest != r.release_digest:
            other_release += 1
            check.fail(f"{sid}'s verdict judges another release (digest {v.release_digest.hex()[:16]}): she was "
                       "shown a different release (split-view-release)")
        if v.roster_root != r.roster.merkle_root:
            other_roster += 1
            check.fail(f"{sid}'s verdict binds roster root {v.roster_root.hex()[:16]}, not the roster's "
                       "(split-view-roster)")
    live = {a.subject for a in r.assigns if _sid(a.subject) not in r.transcript.exclusions}
    missing = len(live - seen)
    if missing:
        check.notes.append(f"{missing} live members sent no verdict (liveness, not a deviation)")
    if check.status == "pass":
        check.notes.append(f"{len(r.verdicts)} verdicts, each bound to this release and roster")


def _check_complaints(r: _Round, check: Check) -> dict[str, int]:
    reasons = Counter(v.reason for v in r.verdicts if not v.accept)
    for reason, count in sorted(reasons.items()):
        meaning = COMPLAINT_MEANING.get(reason, "a reason code this auditor does not know")
        check.fail(f"{count} subject{'s' if count > 1 else ''} complained {reason}: {meaning}")
    accepted = sum(1 for v in r.verdicts if v.accept)
    if check.status == "pass":
        check.notes.append(f"{accepted} of {len(r.verdicts)} verdicts accept")
    return dict(sorted(reasons.items()))


def verify_transcript(transcript: Transcript, *, directory: Path | None = None, source: str = "") -> VerifyResult:
    """Run every check on ``transcript`` (``directory``: its run directory, for release.csv and manifest.json)."""
    r = _Round(transcript)
    checks = {name: Check(name, catches) for name, catches in CHECKS}
    steps: list[tuple[str, Callable[[_Round, Check], object]]] = [
        ("signatures", _check_signatures),
        ("roster", _check_roster),
        ("inclusion", _check_inclusion),
        ("grouping", _check_grouping),
        ("release", _check_release),
        ("release_files", lambda rr, c: _check_release_files(rr, c, directory)),
        ("membership", _check_membership),
        ("exclusion_evidence", _check_exclusion_evidence),
        ("verdicts", _check_verdicts),
    ]
    for name, step in steps:
        step(r, checks[name])
    complaints = _check_complaints(r, checks["complaints"])
    return VerifyResult(source or transcript.round_id.hex(), transcript.round_id.hex(), list(checks.values()),
                        complaints)


def verify_path(path: Path) -> VerifyResult:
    """Verify a run directory (its transcript.json, release.csv, manifest.json) or a transcript file."""
    if path.is_dir():
        file = path / TRANSCRIPT_NAME
        if not file.exists():
            raise InputError(f"{path}: no {TRANSCRIPT_NAME} (the collector never announced a round, an older coutil "
                             "wrote it, or not a run directory)")
        return verify_transcript(read_transcript(file), directory=path, source=str(path))
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return verify_transcript(read_transcript(path), source=str(path))

