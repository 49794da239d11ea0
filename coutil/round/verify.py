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

This module holds the result (`VerifyResult`: its `summary` never says "every check passes" when a
check was skipped), the list of checks (`CHECKS`), the driver, and the checks of what the round
released (release, release_files, membership, verdicts, complaints) and of the subjects' evidence
that the collector acknowledged verdicts it left out of the transcript (acknowledged_verdicts,
`coutil.round.evidence`). A check's result (`Check`), the decoded round and the checks of the
parameters and of the roster the round was set up on (signatures, parameters, roster, inclusion) are
in `coutil.round.verify_roster`; the grouping and its merges in `coutil.round.verify_grouping`; the
signed exclusions and runs (exclusion_evidence) in `coutil.round.verify_exclusions`; the proof of every
`blamed_*` exclusion (blame_evidence) in `coutil.round.verify_blames`.
"""

from __future__ import annotations

import io
import json
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coutil.audit.subject import release_digest
from coutil.errors import DataFileError, InputError
from coutil.fileio import present, read_regular_bytes
from coutil.protocol import merkle
from coutil.protocol.equivocation import RosterReceipt
from coutil.protocol.messages import VERDICT_REASONS, Assign, Release
from coutil.protocol.topics import sid_of
from coutil.round.evidence import EVIDENCE_NAME, Evidence, read_evidence
from coutil.round.report import typed_manifest
from coutil.round.transcript import TRANSCRIPT_NAME, Transcript, read_transcript
from coutil.round.verify_blames import check_blame_evidence
from coutil.round.verify_exclusions import check_exclusion_evidence
from coutil.round.verify_grouping import check_grouping
from coutil.round.verify_held import (
    check_acknowledged_verdicts,
    check_equivocation_evidence,
    check_transcript_signature,
)
from coutil.round.verify_privacy import check_privacy_label
from coutil.round.verify_roster import (
    Check,
    VerifiedRound,
    check_inclusion,
    check_parameters,
    check_roster,
    check_signatures,
    need,
)
from coutil.sdc.dataset import read_csv_records

#: Exclusion reason codes of SPEC §7.3 (and SafePub's ``suppressed_class``, §9.1).
EXCLUSION_REASONS = frozenset({
    "silent", "blamed_tamper", "blamed_malformed", "blamed_false_complaint", "blamed_copy", "blamed_unsolicited",
    "blamed_split_view", "blamed_equivocation", "blamed_bad_key", "blame_inconclusive", "merged",
    "below_k_no_partner", "suppressed", "suppressed_class",
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
    "run_not_as_stated": "a run whose signed statement excludes members it keeps (erase-complaints)",
    "group_not_as_run": "her released group holds more records than the run she revealed in had members",
    "fellow_not_on_roster": "her assign named fellow members not on the roster (split-assign: a run of her own)",
}


@dataclass
class VerifyResult:
    """Every check of one round, in order."""

    source: str
    round_id: str
    checks: list[Check]
    complaints_by_reason: dict[str, int]
    #: The collector key the round was checked against (hex): the transcript's, or the one the auditor gave.
    collector_key: str = ""

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    @property
    def skipped(self) -> list[str]:
        """The checks that could not be made (what each needs is in its notes)."""
        return [c.name for c in self.checks if c.status == "skip"]

    @property
    def summary(self) -> str:
        """The one-line outcome: never "every check passes" when a check was skipped."""
        failed = sum(1 for c in self.checks if c.status == "fail")
        skipped = self.skipped
        skips = f"{len(skipped)} check(s) skipped ({', '.join(skipped)})" if skipped else ""
        if failed:
            return f"{failed} check(s) failed" + (f", {skips}" if skips else "")
        if skipped:
            return f"no check failed, {skips}: what they check was not verified"
        return "every check passes"

    @property
    def first_problem(self) -> str | None:
        for check in self.checks:
            if check.problems:
                return f"{check.name}: {check.problems[0]}"
        return None

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "round": self.round_id, "collector_key": self.collector_key, "ok": self.ok,
                "first_problem": self.first_problem,
                "summary": self.summary, "skipped": self.skipped, "checks": [c.as_dict() for c in self.checks],
                "complaints_by_reason": self.complaints_by_reason}


#: (name, the deviations it catches), in the order the checks run.
CHECKS: tuple[tuple[str, str], ...] = (
    ("signatures", "a tampered or forged transcript, messages of another round (replays), collector messages not "
                   "signed by the announced key, registrations or verdicts not signed by their subjects"),
    ("transcript_signature", "unsigned_transcript (a transcript unsigned, or altered after signing, though the "
                             "announce commits to a signed one), two_transcripts (two different final transcripts of "
                             "the round signed by its collector, the other given with --other-transcript)"),
    ("parameters", "an announce whose k (below 2) or grouping method protects nobody"),
    ("roster", "split-view-roster (assigns naming another roster root; one group shown different member lists), "
               "assignments that do not match the roster's size and order"),
    ("inclusion", "split-view-roster and fabricate-members done in the tree (a roster root that is not the tree over "
                  "the registered subjects; inclusion proofs that do not verify)"),
    ("grouping", "groups that are not MDAV's (or SafePub's classes) on the roster: isolate-victim by hand-made "
                 "groups, victims grouped with chosen members, a member moved into a group of the collector's "
                 "choosing as a fake merge (a group that did not fall below k, lost no member by a signed statement, "
                 "or merged into another than the nearest group still sealed)"),
    ("release", "publish-below-k, a release of another roster, rows that do not match rows_root, released groups "
                "outside the roster, QI values that are not the group's centroid (MDAV's, or for a group whose "
                "members differ from MDAV's the mean of its final members' QIs)"),
    ("release_files", "a release.csv or manifest.json that is not the signed release, or that holds records no "
                      "signed release in the transcript covers"),
    ("privacy_label", "a manifest.json claiming (epsilon, delta)-differential privacy that the signed round does not "
                      "support (an MDAV round, exclusions other than suppression, a group below k, a k too small for "
                      "the claimed delta, other values than the announce's)"),
    ("membership", "drop-subject (a member neither released nor excluded, a released group missing live members' "
                   "records), fabricated rows (more rows than live members), unknown exclusion reasons"),
    ("exclusion_evidence", "drop-subject (an exclusion the collector never signed, or signed for a group that does "
                           "not exist or a run she was not in, a member excluded `silent` before the run's step "
                           "deadline), a run that is not the one before it minus its signed exclusions (split-assign, "
                           "erase-complaints), a run below k"),
    ("blame_evidence", "drop-subject with a blame (a live member excluded as a deviator, `blamed_*`, that the signed "
                       "messages of the run she was excluded from do not prove: the run replayed from the transcript's "
                       "run evidence with the collector's rules)"),
    ("verdicts", "split-view-release (verdicts bound to another release digest), split-view-roster (bound to another "
                 "roster root), verdicts from outside the roster"),
    ("complaints", "whatever the subjects detected and complained of (run_below_k, split_view, rerun_after_reveal, "
                   "not_k_anonymous, ...)"),
    ("equivocation", "split-roster, split-roster-early (release_first too), split-view-roster (two different "
                     "roster roots the collector signed for the round, in rosters, assigns or a release, shown to one "
                     "subject, or in the receipts of different subjects or the transcript), a run shown to one member "
                     "alone (two different shuffle_starts of one run): from the subjects' evidence, which proves it "
                     "without the transcript (a withheld round too)"),
    ("acknowledged_verdicts", "hide_complaints (a verdict the collector acknowledged, a complaint or one bound to "
                              "another release, left out of the transcript): from the subjects' evidence "
                              "(evidence.json in a run directory, --evidence)"),
)


def _release_matrix(release: Release) -> np.ndarray | None:
    width = 8 * len(release.columns)
    if not release.columns or len(release.rows) % width:
        return None
    return np.frombuffer(release.rows, dtype="<f8").reshape(-1, len(release.columns))


def _centroid_problem(r: VerifiedRound, group: int, released: tuple[float, ...], sure: set[bytes],
                      maybe: set[bytes], assigned: list[Assign], qi_of: dict[bytes, tuple[float, ...]]) -> str | None:
    """Why a group's released QI vector is not its centroid (SPEC §4, §9): MDAV's for a group released
    with MDAV's members, else the mean of its final members' QIs (its assigned members whose records it
    holds, `VerifiedRound.record_holders`); SafePub's bins' midpoints (its assigned centroid). None: it is.
    ``assigned``: the assigns naming the group; ``qi_of``: the registrations' QIs."""
    params = r.announce.params if r.announce is not None else None
    told = next((a.centroid for a in assigned if a.subject in sure), None)
    if params is None or params.method != "mdav":
        return None if told is None or released == told else f"are not its assigned centroid {told}"
    if not r.formed:
        # Without the registrations only a group none of whose members was excluded is checked: its
        # centroid is the one its members were told.
        unchanged = told is not None and not maybe and all(a.subject in sure for a in assigned)
        return None if not unchanged or released == told else f"are not its assigned centroid {told}"
    formed = set(r.formed.get(group, ()))
    candidates = [sure] + ([sure | maybe] if maybe else [])
    for final in candidates:
        if final == formed:
            if released == r.formed_centroids.get(group):
                return None
        elif final and all(key in qi_of for key in final):
            mean = np.mean(np.array([qi_of[key] for key in sorted(final)], dtype=np.float64), axis=0)
            if np.allclose(np.asarray(released), mean, rtol=1e-12, atol=0.0):
                return None
    if sure == formed:
        return f"are not MDAV's centroid {r.formed_centroids.get(group)}"
    return (f"are not the mean of its {len(sure)} final members' QIs (its members differ from MDAV's: merged or "
            "lost members)")


def _check_release(r: VerifiedRound, check: Check) -> None:
    if not need(r, check, roster=True, release=True):
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
    sure, maybe = r.record_holders()
    by_group: dict[int, list[Assign]] = defaultdict(list)
    for a in r.assigns:
        by_group[a.group].append(a)
    qi_of = r.qi_of()
    nq = len(params.qi_names)
    start = 0
    for group, size in zip(rel.group_ids, rel.group_sizes, strict=True):
        block = matrix[start:start + size, :nq]
        start += size
        if size < params.k:
            check.fail(f"group {group} released with {size} records, below k = {params.k} (publish-below-k)")
        if size and not (block == block[0]).all():
            check.fail(f"group {group}: its rows hold several QI vectors (not k-anonymous)")
        elif size:
            problem = _centroid_problem(r, group, tuple(float(v) for v in block[0]), sure.get(group, set()),
                                        maybe.get(group, set()), by_group.get(group, []), qi_of)
            if problem:
                check.fail(f"group {group}: released QIs {tuple(block[0].tolist())} {problem}")
    if check.status == "pass":
        check.notes.append(f"{matrix.shape[0]} rows in {len(rel.group_ids)} groups, each of at least k = {params.k} "
                           "with one QI vector (its centroid); rows_root and roster_root hold")


def _read_records(path: Path, check: Check) -> list[tuple[int, list[str]]] | None:
    """release.csv's records and their lines, by coutil's strict CSV reader (None, and ``check`` failed, when the
    file cannot be read or is malformed: an unclosed quote is named with the line it starts on)."""
    try:
        text = read_regular_bytes(path).decode("utf-8")
    except OSError as exc:  # a directory, a symbolic link loop, a FIFO (refused, never waited on), permission
        check.fail(f"{path.name}: cannot read it ({exc.strerror or exc})")
        return None
    except UnicodeDecodeError as exc:
        check.fail(f"{path.name}: cannot read it ({exc})")
        return None
    try:
        return read_csv_records(io.StringIO(text, newline=""), path.name)
    except DataFileError as exc:
        check.fail(str(exc))
        return None


def _read_csv(path: Path, records: list[tuple[int, list[str]]], width: int, check: Check) -> np.ndarray | None:
    """release.csv's rows (``records`` after the header) as a matrix of ``width`` columns (None, and ``check``
    failed, when it is not one)."""
    rows = [row for _, row in records if row]
    for number, row in records:
        if row and len(row) != width:
            check.fail(f"{path.name}: row {number} has {len(row)} values, the release has {width} columns")
            return None
    try:
        return np.array([[float(cell) for cell in row] for row in rows], dtype=np.float64).reshape(-1, width)
    except ValueError as exc:
        check.fail(f"{path.name}: not numbers ({str(exc)[:200]})")
        return None


def _read_manifest(path: Path, check: Check) -> dict[str, object] | None:
    try:
        text = read_regular_bytes(path)
    except OSError as exc:  # a directory, a symbolic link loop, a FIFO (refused, never waited on), permission
        check.fail(f"{path.name}: cannot read it ({exc.strerror or exc})")
        return None
    try:
        manifest = json.loads(text)
    except ValueError as exc:  # bad JSON or UTF-8, or a number of more than 4,300 digits
        check.fail(f"{path.name}: not JSON ({exc})")
        return None
    except RecursionError:
        check.fail(f"{path.name}: not a manifest (JSON nested too deep)")
        return None
    if not isinstance(manifest, dict):
        check.fail(f"{path.name}: not a manifest (a JSON {type(manifest).__name__}, not an object)")
        return None
    return manifest


def _unsigned_files(r: VerifiedRound, check: Check, directory: Path) -> None:
    """No signed release: the directory's release.csv and manifest.json must release nothing either
    (an aborted round writes them empty), or they are files no signature covers."""
    held = []
    csv_path, manifest_path = directory / "release.csv", directory / "manifest.json"
    if present(csv_path):
        try:
            lines = read_regular_bytes(csv_path).splitlines()
        except OSError as exc:  # a directory, unreadable: as `_check_release_files` reads a release.csv
            check.fail(f"{csv_path.name}: cannot read it ({exc.strerror or exc})")
            lines = []
        if any(line.strip() for line in lines[1:]):
            held.append(f"{csv_path.name} holds records")
    if present(manifest_path):  # a symbolic link loop too: read, and failed, never taken for no manifest
        manifest = _read_manifest(manifest_path, check)
        if manifest is not None and (manifest.get("group_sizes") or manifest.get("group_ids")):
            held.append(f"{manifest_path.name} names released groups")
    if held:
        check.fail(f"{' and '.join(held)}, and the transcript holds no signed release (phase {r.transcript.phase}): "
                   "a release no signature covers")
    elif check.status != "fail":
        check.skip(f"no signed release (phase {r.transcript.phase}); release.csv and manifest.json release nothing")


def _check_manifest_entries(written: object, signed: Sequence[tuple[str, str]], name: str, check: Check) -> None:
    """manifest.json's ``manifest``: the signed announce's parameters as the collector writes them (`typed_manifest`).
    Data users read k, the method and SafePub's epsilon there; before this check any values passed (found by an
    attacker of the privacy label: an MDAV round at k = 3 written as SafePub at k = 40, epsilon 0.01, verified)."""
    try:
        expected = json.loads(json.dumps(typed_manifest(signed)))
    except (ValueError, TypeError, RecursionError):  # a signed entry typed_manifest cannot read: the text entries
        expected = dict(signed)
    if written != expected and written != dict(signed):
        keys = sorted(key for key in set(written) | set(expected) if written.get(key) != expected.get(key)) \
            if isinstance(written, dict) and isinstance(expected, dict) else []
        check.fail(f"{name}: manifest is not the signed announce's parameters"
                   + (f" ({', '.join(str(key)[:64] for key in keys[:8])})" if keys else ""))


def _check_release_files(r: VerifiedRound, check: Check, directory: Path | None) -> None:
    if directory is None:
        check.skip("a transcript alone: no release.csv to compare")
        return
    if r.announce is not None and r.release is None and \
            r.transcript.phase not in ("auditing", "done") and not r.transcript.verdicts:
        _unsigned_files(r, check, directory)
        return
    if not need(r, check, release=True):
        return
    assert r.release is not None
    matrix = _release_matrix(r.release)
    if matrix is None:
        check.skip("malformed release (see release)")
        return
    path = directory / "release.csv"
    records = _read_records(path, check)
    if records is None:
        return
    header = records[0][1] if records else []
    if tuple(header) != r.release.columns:
        check.fail(f"{path.name}: header {header[:20]} is not the release's columns")
        return
    values = _read_csv(path, records[1:], len(r.release.columns), check)
    if values is None:
        return
    if values.shape != matrix.shape:
        check.fail(f"{path.name}: {values.shape[0]} rows, the signed release has {matrix.shape[0]}")
    elif not np.array_equal(values, matrix):
        row = int(np.argwhere((values != matrix).any(axis=1))[0][0])
        check.fail(f"{path.name}: row {row + 2} differs from the signed release")
    manifest_path = directory / "manifest.json"
    if present(manifest_path):  # a symbolic link loop too: read, and failed, never taken for no manifest
        manifest = _read_manifest(manifest_path, check)
        if manifest is None:
            return
        rel = r.release
        digest = release_digest(rel.round_id, rel.columns, rel.group_sizes, matrix).hex()
        if manifest.get("release_digest") != digest:
            check.fail(f"{manifest_path.name}: release_digest is not the signed release's")
        if manifest.get("group_ids") != list(rel.group_ids) or manifest.get("group_sizes") != list(rel.group_sizes):
            check.fail(f"{manifest_path.name}: group_ids/group_sizes are not the signed release's")
        if manifest.get("round_id") != rel.round_id.hex():
            check.fail(f"{manifest_path.name}: round_id {str(manifest.get('round_id'))[:64]} is not the transcript's")
        if "manifest" in manifest and r.announce is not None:
            _check_manifest_entries(manifest["manifest"], r.announce.params.manifest, manifest_path.name, check)
    if check.status == "pass":
        check.notes.append("release.csv holds exactly the signed release's rows"
                           + ("; manifest.json its digest and groups" if present(manifest_path) else ""))


def _check_privacy_label(r: VerifiedRound, check: Check, directory: Path | None) -> None:
    path = directory / "manifest.json" if directory is not None else None
    if path is None or not path.is_file():
        check.skip("no manifest.json: no privacy label claimed")
        return
    manifest = _read_manifest(path, Check("manifest", ""))  # a file it cannot read fails release_files
    if manifest is None:
        check.skip("manifest.json unreadable (see release_files)")
        return
    check_privacy_label(r, check, manifest.get("privacy"))


def _check_membership(r: VerifiedRound, check: Check) -> None:
    if not need(r, check, roster=True):
        return
    assert r.roster is not None
    exclusions = dict(r.transcript.exclusions)
    for sid, reason in sorted(exclusions.items()):
        if reason not in EXCLUSION_REASONS:
            check.fail(f"{sid} excluded for an unknown reason {reason!r}")
    known = {sid_of(a.subject) for a in r.assigns} | {sid_of(reg.sender) for reg in r.registrations}
    for sid in sorted(set(exclusions) - known):
        if exclusions[sid] != "suppressed_class" or r.transcript.registrations_included:
            check.fail(f"{sid} is named excluded but is not in the roster")
    if r.release is None:
        check.skip(f"no release (phase {r.transcript.phase}): only the exclusions were checked")
        return
    released = dict(zip(r.release.group_ids, r.release.group_sizes, strict=False))
    sure, maybe = r.record_holders()
    after_reveal = r.post_reveal_blamers()
    for group in sorted(set(sure) | set(maybe) | set(released)):
        size, alive, extra = released.get(group, 0), len(sure.get(group, ())), len(maybe.get(group, ()))
        late = sum(1 for key in sure.get(group, ()) if key in after_reveal)
        counted = f" (counting {late} excluded blamed_unsolicited after the reveal_open, with no statement: her " \
                  "record opened with the group's)" if late else ""
        if size > alive + extra:
            check.fail(f"group {group}: {size} records released for {alive} live members{counted} (fabricated or "
                       "excluded members' records)")
        elif size < alive and group in released:
            check.fail(f"group {group}: {size} records released for {alive} live members{counted}: {alive - size} "
                       "dropped without an exclusion (drop-subject; or a member's unopenable item)")
        elif group not in released and alive:
            check.fail(f"group {group}: {alive} members neither released nor excluded{counted} (drop-subject)")
    total = sum(released.values())
    reasons = Counter(exclusions.values())
    check.notes.append(f"{r.roster.n} roster members: {total} released, {len(exclusions)} excluded"
                       + (f" ({', '.join(f'{k} {v}' for k, v in sorted(reasons.items()))})" if reasons else ""))


def _check_verdicts(r: VerifiedRound, check: Check) -> None:
    if not need(r, check, roster=True, release=True):
        return
    assert r.roster is not None and r.release is not None
    members = {a.subject for a in r.assigns} | {reg.sender for reg in r.registrations}
    seen: set[bytes] = set()
    other_release = other_roster = 0
    for v in r.verdicts:
        sid = sid_of(v.sender)
        if v.sender not in members:
            check.fail(f"verdict from {sid}, who is not in the roster")
        if v.sender in seen:
            check.fail(f"two verdicts from {sid}")
        seen.add(v.sender)
        if v.reason not in VERDICT_REASONS or v.accept != (v.reason == "ok"):
            # SPEC §7.3: a collector takes no other (a subject's free text is never printed, and an accept
            # stating a complaint, or a complaint stating ok, is no verdict of this protocol).
            check.fail(f"{sid}'s verdict is not accept with `ok` or a complaint with a reason code of SPEC §7.3")
        if v.release_digest != r.release_digest:
            other_release += 1
            check.fail(f"{sid}'s verdict judges another release (digest {v.release_digest.hex()[:16]}): she was "
                       "shown a different release (split-view-release)")
        if v.roster_root != r.roster.merkle_root:
            other_roster += 1
            check.fail(f"{sid}'s verdict binds roster root {v.roster_root.hex()[:16]}, not the roster's "
                       "(split-view-roster)")
    live = {a.subject for a in r.assigns if sid_of(a.subject) not in r.transcript.exclusions}
    missing = len(live - seen)
    if missing:
        check.notes.append(f"{missing} live members sent no verdict (liveness, not a deviation)")
    if check.status == "pass":
        check.notes.append(f"{len(r.verdicts)} verdicts, each bound to this release and roster")


#: Complaints a signed suppression of the complainant's group explains (SPEC §4: a group that loses a
#: member at the reveal is suppressed; those who revealed complain excluded_after_reveal, the others not_included).
SUPPRESSION_COMPLAINTS = frozenset({"not_included", "excluded_after_reveal"})
#: The exclusions of a closing shuffle_start that suppress a group: MDAV's at the reveal, SafePub's class that
#: fell below k after its run (§9.1).
SUPPRESSIONS = frozenset({"suppressed", "suppressed_class"})


def _suppressed_by_statement(r: VerifiedRound) -> set[bytes]:
    """Members a signed closing shuffle_start (no members) of their group (their assign's) names `suppressed` or
    `suppressed_class`, or `blamed_*`: a member who signed a second message the blame of a fellow carried after the
    reveal_open (`blamed_equivocation` in the suppression's statement, SPEC §7.3) had revealed, and says so
    (`excluded_after_reveal`, found by an attacker: an honest collector failed verify); that blame is
    `blame_evidence`'s to prove."""
    if not r.transcript.shuffle_starts_included:
        return set()
    group_of = {a.subject: a.group for a in r.assigns}
    return {key for s in r.runs().values() if not s.members for key, reason in s.excluded
            if (reason in SUPPRESSIONS or reason.startswith("blamed_")) and group_of.get(key) == s.group}


def _excluded_by_statement(r: VerifiedRound) -> set[bytes]:
    """Members a signed shuffle_start excludes for themselves (`silent`, a blame: any reason but `merged` and the
    suppressions); that she was in that run is `exclusion_evidence`'s check."""
    if not r.transcript.shuffle_starts_included:
        return set()
    return {key for key, items in r.statements().items()
            if any(reason != "merged" and reason not in SUPPRESSIONS for _, _, _, reason in items)}


def _covered(r: VerifiedRound, key: bytes) -> bool:
    """Whether the latest signed run of her group naming her a member is covered by the assign the collector signed
    her (its members among her assign's), and is a run of her group: every member's assign names it, or a later
    closing shuffle_start of it states her `merged` on and her assign names another group than MDAV's (a move
    that `grouping` holds to SPEC §4's merge rule). Her `run_not_in_group` is then a merge's assign that did not
    reach her in time, a broker holding it back for a step (`answer-old-assign`, SPEC §3), not a run of members
    outside her group. Her own assign alone proves nothing: an excluded member's only has to be well-formed, and a
    collector signed one covering a run with members of other groups that it never sent her (`cover-run`, found by
    an attacker: verify passed it)."""
    assign = next((a for a in r.assigns if a.subject == key), None)
    if assign is None:
        return False
    runs = r.runs()
    named = [s for (group, _), s in sorted(runs.items()) if group == assign.group and key in s.members]
    if not named or not set(named[-1].members) <= set(assign.members):
        return False
    group_of = {a.subject: a.group for a in r.assigns}
    formed = {m: label for label, members in r.formed.items() for m in members}
    moved_on = {m for (group, run), s in runs.items() if group == assign.group and run > named[-1].run
                and not s.members for m, reason in s.excluded if reason == "merged"
                and group_of.get(m) not in (None, formed.get(m))}
    return all(group_of.get(m) == assign.group or m in moved_on for m in named[-1].members)


def _check_complaints(r: VerifiedRound, check: Check) -> dict[str, int]:
    """Every complaint is a failure, except a `not_included` or `excluded_after_reveal` one from a member
    whom a signed closing shuffle_start of her group names (`_suppressed_by_statement`), and a `not_included` one
    (or a `run_not_in_group` one her assign explains, `_covered`) from a member a signed shuffle_start excluded
    (reported in the notes)."""
    suppressed = _suppressed_by_statement(r)
    explained = Counter(v.reason for v in r.verdicts
                        if not v.accept and v.reason in SUPPRESSION_COMPLAINTS and v.sender in suppressed)
    # Found by an attacker: a subject cut off past her step deadline is excluded `silent` by an honest
    # collector, comes back, gets the release and rightly says her record is not in it; that failed the round.
    # Her exclusion is signed and explains it; a live member excluded `silent` at once (drop-subject) is what
    # `exclusion_evidence` times, and one excluded at the deadline cannot be told from her (SPEC §3).
    excluded = _excluded_by_statement(r) - suppressed
    returned = Counter(v.reason for v in r.verdicts if not v.accept and v.sender in excluded
                       and (v.reason == "not_included" or (v.reason == "run_not_in_group" and _covered(r, v.sender))))
    reasons = Counter(v.reason if v.reason in VERDICT_REASONS else "(not a reason code)" for v in r.verdicts
                      if not v.accept) - explained - returned
    for reason, count in sorted(reasons.items()):
        meaning = COMPLAINT_MEANING.get(reason, "a reason code this auditor does not know")
        check.fail(f"{count} subject{'s' if count > 1 else ''} complained {reason}: {meaning}")
    for reason, count in sorted(explained.items()):
        check.notes.append(f"{count} subject{'s' if count > 1 else ''} complained {reason}, each a member of a group "
                           "its signed closing shuffle_start suppressed (a dropout, not a deviation)")
    for reason, count in sorted(returned.items()):
        check.notes.append(f"{count} subject{'s' if count > 1 else ''} complained {reason}, each excluded by a signed "
                           "shuffle_start (a dropout who came back; see exclusion_evidence for the timing)")
    reasons = Counter(v.reason if v.reason in VERDICT_REASONS else "(not a reason code)" for v in r.verdicts
                      if not v.accept)
    accepted = sum(1 for v in r.verdicts if v.accept and v.reason == "ok")
    if check.status == "pass":
        check.notes.append(f"{accepted} of {len(r.verdicts)} verdicts accept")
    return dict(sorted(reasons.items()))


def verify_transcript(transcript: Transcript, *, directory: Path | None = None, source: str = "",
                      evidence: Sequence[Evidence] | None = None,
                      others: Sequence[tuple[str, Transcript]] = (), require_final: bool = False) -> VerifyResult:
    """Run every check on ``transcript`` (``directory``: its run directory, for release.csv and manifest.json;
    ``evidence``: the subjects' acknowledged verdicts, `coutil.round.evidence`; None: none given; ``others``: other
    copies of the transcript, (source, transcript), compared with it; ``require_final``: a transcript of a round
    not finished fails `transcript_signature` instead of skipping the comparison of final copies)."""
    r = VerifiedRound(transcript)
    checks = {name: Check(name, catches) for name, catches in CHECKS}
    steps: list[tuple[str, Callable[[VerifiedRound, Check], object]]] = [
        ("signatures", check_signatures),
        ("transcript_signature", lambda rr, c: check_transcript_signature(rr, c, others, require_final)),
        ("parameters", check_parameters),
        ("roster", check_roster),
        ("inclusion", check_inclusion),
        ("grouping", check_grouping),
        ("release", _check_release),
        ("release_files", lambda rr, c: _check_release_files(rr, c, directory)),
        ("privacy_label", lambda rr, c: _check_privacy_label(rr, c, directory)),
        ("membership", _check_membership),
        ("exclusion_evidence", check_exclusion_evidence),
        ("blame_evidence", check_blame_evidence),
        ("verdicts", _check_verdicts),
    ]
    for name, step in steps:
        step(r, checks[name])
    complaints = _check_complaints(r, checks["complaints"])
    published = RosterReceipt(transcript.announce, transcript.roster) if transcript.roster is not None else None
    check_equivocation_evidence(checks["equivocation"], evidence, transcript.round_id, transcript.collector_key,
                                published)
    check_acknowledged_verdicts(r, checks["acknowledged_verdicts"], evidence)
    return VerifyResult(source or transcript.round_id.hex(), transcript.round_id.hex(), list(checks.values()),
                        complaints, transcript.collector_key.hex())


def verify_evidence(evidence: Sequence[Evidence], collector_key: bytes, source: str) -> VerifyResult:
    """What the subjects' evidence proves on its own against ``collector_key`` (the collector's published
    identity: a proof convicts the key that signed it, and anyone can sign an announce), without a transcript
    (a round withheld, or none published): the proofs of equivocation; every other check is skipped."""
    checks = {name: Check(name, catches) for name, catches in CHECKS}
    for name, check in checks.items():
        if name != "equivocation":
            check.skip("no transcript given: only what the subjects' evidence proves on its own is checked")
    proven = check_equivocation_evidence(checks["equivocation"], evidence, None, collector_key)
    return VerifyResult(source, ", ".join(sorted(r.hex() for r in proven)), list(checks.values()), {},
                        collector_key.hex())


def verify_path(path: Path | None, evidence_files: Sequence[Path] = (), collector_key: bytes | None = None,
                other_transcripts: Sequence[Path] = (), require_final: bool = False) -> VerifyResult:
    """Verify a run directory (its transcript.json, release.csv, manifest.json and, if there,
    evidence.json) or a transcript file, with the subjects' evidence in ``evidence_files``; with no
    ``path``, what that evidence proves on its own against ``collector_key`` (`verify_evidence`).
    ``collector_key``: the collector's identity as the auditor knows it (a transcript signed under
    another key is an `InputError`); ``other_transcripts``: other copies of the round's transcript (another
    auditor's), compared with it (`transcript_signature`); ``require_final``: see `verify_transcript`."""
    evidence: list[Evidence] | None = None
    for file in evidence_files:
        evidence = [*(evidence or []), *read_evidence(file)]
    if other_transcripts and path is None:
        raise InputError("--other-transcript needs a transcript to compare it with")
    if path is None:
        if evidence is None:
            raise InputError("nothing to verify: give a run directory, a transcript, or --evidence FILE")
        if collector_key is None:
            raise InputError("--evidence without a transcript needs --collector-key HEX (the collector's published "
                             "key): a proof convicts the key that signed it, and anyone can sign an announce")
        return verify_evidence(evidence, collector_key, ", ".join(str(f) for f in evidence_files))
    others = [(str(file), read_transcript(file)) for file in other_transcripts]
    result = _verify_published(path, evidence, others, require_final)
    if collector_key is not None and result.collector_key != collector_key.hex():
        raise InputError(f"{path}: signed by collector key {result.collector_key}, not the --collector-key given")
    return result


def _verify_published(path: Path, evidence: list[Evidence] | None,
                      others: Sequence[tuple[str, Transcript]], require_final: bool) -> VerifyResult:
    try:
        # is_dir and exists answer False for a missing path or a symlink loop, and raise for the rest (a name too
        # long, a directory the user may not search): the user's path, exit 2.
        is_dir = path.is_dir()
        file = path / TRANSCRIPT_NAME if is_dir else path
        # A symbolic link loop (or one to nothing) is present: read, and refused by name, never taken for absent.
        exists = present(file)
        has_evidence = is_dir and present(path / EVIDENCE_NAME)
    except OSError as exc:
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if is_dir:
        if not exists:
            raise InputError(f"{path}: no {TRANSCRIPT_NAME} (the collector never announced a round, an older coutil "
                             "wrote it, or not a run directory)")
        if has_evidence:
            evidence = [*(evidence or []), *read_evidence(path / EVIDENCE_NAME)]
        return verify_transcript(read_transcript(file), directory=path, source=str(path), evidence=evidence,
                                 others=others, require_final=require_final)
    if not exists:
        raise InputError(f"{path}: no such file or directory")
    return verify_transcript(read_transcript(path), source=str(path), evidence=evidence, others=others,
                             require_final=require_final)
