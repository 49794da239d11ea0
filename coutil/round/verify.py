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

This module holds the result (`VerifyResult`), the list of checks (`CHECKS`), the driver, and the
checks of what the round released (release, release_files, membership, exclusion_evidence,
verdicts, complaints) and of the subjects' evidence that the collector acknowledged verdicts it left
out of the transcript (acknowledged_verdicts, `coutil.round.evidence`). A check's result (`Check`),
the decoded round and the checks of the roster the round was set up on (signatures, roster,
inclusion, grouping) are in `coutil.round.verify_roster`.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coutil.audit.subject import release_digest
from coutil.errors import InputError
from coutil.protocol import merkle
from coutil.protocol.messages import Release, ShuffleStart
from coutil.protocol.topics import sid_of
from coutil.round.evidence import EVIDENCE_NAME, VerdictEvidence, check_evidence, read_evidence
from coutil.round.transcript import TRANSCRIPT_NAME, Transcript, read_transcript
from coutil.round.verify_roster import (
    Check,
    VerifiedRound,
    check_grouping,
    check_inclusion,
    check_roster,
    check_signatures,
    need,
)

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
}


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
                           "before the run's step deadline or from a run she was not in), a run that is not the one "
                           "before it minus its signed exclusions (split-assign, erase-complaints)"),
    ("verdicts", "split-view-release (verdicts bound to another release digest), split-view-roster (bound to another "
                 "roster root), verdicts from outside the roster"),
    ("complaints", "whatever the subjects detected and complained of (run_below_k, split_view, rerun_after_reveal, "
                   "not_k_anonymous, ...)"),
    ("acknowledged_verdicts", "hide_complaints (a verdict the collector acknowledged, a complaint or one bound to "
                              "another release, left out of the transcript): from the subjects' evidence "
                              "(evidence.json in a run directory, --evidence)"),
)


def _release_matrix(release: Release) -> np.ndarray | None:
    width = 8 * len(release.columns)
    if not release.columns or len(release.rows) % width:
        return None
    return np.frombuffer(release.rows, dtype="<f8").reshape(-1, len(release.columns))


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
    excluded = r.transcript.exclusions
    centroid_of: dict[int, tuple[float, ...]] = {}
    changed: set[int] = set()
    for a in r.assigns:
        if sid_of(a.subject) in excluded:
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
            final = [qi_of[a.subject] for a in r.assigns if a.group == group and sid_of(a.subject) not in excluded
                     and a.subject in qi_of]
            if final and not np.allclose(block[0], np.mean(np.array(final), axis=0), rtol=1e-12, atol=0.0):
                check.fail(f"group {group}: released QIs {tuple(block[0].tolist())} are not the mean of its final "
                           "members' QIs")
    if check.status == "pass":
        check.notes.append(f"{matrix.shape[0]} rows in {len(rel.group_ids)} groups, each of at least k = {params.k} "
                           "with one QI vector (its centroid); rows_root and roster_root hold")


def _check_release_files(r: VerifiedRound, check: Check, directory: Path | None) -> None:
    if directory is None:
        check.skip("a transcript alone: no release.csv to compare")
        return
    if not need(r, check, release=True):
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
    live: dict[int, int] = Counter()
    tolerated: dict[int, int] = Counter()
    for a in r.assigns:
        excluded_for = exclusions.get(sid_of(a.subject))
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


def _check_run_follows(group: int, run: int, start: ShuffleStart, previous: ShuffleStart, merged_in: set[bytes],
                       check: Check) -> None:
    """A run is the one before it minus the members its signed statement excludes (plus members merged in
    from a dissolved group): what each member checks too (SPEC §4 share.1)."""
    kept, stated, before = set(start.members), {key for key, _ in start.excluded}, set(previous.members)
    for key in sorted(stated & kept):
        check.fail(f"group {group} run {run} excludes {sid_of(key)} and keeps her (a statement that clears "
                   "complaints)")
    for key in sorted(before - kept - stated):
        check.fail(f"group {group} run {run} leaves out {sid_of(key)}, a member of run {run - 1}, without a signed "
                   "exclusion")
    for key in sorted(kept - before - merged_in):
        check.fail(f"group {group} run {run} adds {sid_of(key)}, neither in run {run - 1} nor merged in")


def _check_exclusion_evidence(r: VerifiedRound, check: Check) -> None:
    if not need(r, check):
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
    merged_in = {key for start in runs.values() for key, reason in start.excluded if reason == "merged"}
    for (group, run), s in sorted(runs.items()):
        issued = s.deadline if not s.members else s.deadline - step
        previous = runs.get((group, run - 1))
        if previous is not None:
            _check_run_follows(group, run, s, previous, merged_in, check)
        for key, reason in s.excluded:
            signed.setdefault(sid_of(key), (reason, group, run))
            if reason in ("suppressed_class",):
                continue
            if previous is None:
                if reason != "merged" or run > 0:
                    check.fail(f"group {group} run {run} excludes {sid_of(key)} ({reason}) without a previous run "
                               "she could have failed in (drop-subject)")
                continue
            if key not in previous.members:
                check.fail(f"group {group} run {run} excludes {sid_of(key)} ({reason}), not a member of run {run - 1}")
            if reason == "silent" and issued < previous.deadline - 1e-6:
                check.fail(f"group {group} run {run} excludes {sid_of(key)} as silent {previous.deadline - issued:.3g} "
                           f"s before run {run - 1}'s step deadline (drop-subject)")
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


def _check_complaints(r: VerifiedRound, check: Check) -> dict[str, int]:
    reasons = Counter(v.reason for v in r.verdicts if not v.accept)
    for reason, count in sorted(reasons.items()):
        meaning = COMPLAINT_MEANING.get(reason, "a reason code this auditor does not know")
        check.fail(f"{count} subject{'s' if count > 1 else ''} complained {reason}: {meaning}")
    accepted = sum(1 for v in r.verdicts if v.accept)
    if check.status == "pass":
        check.notes.append(f"{accepted} of {len(r.verdicts)} verdicts accept")
    return dict(sorted(reasons.items()))


def _check_acknowledged_verdicts(r: VerifiedRound, check: Check, evidence: Sequence[VerdictEvidence] | None) -> None:
    """Every verdict a subject shows the collector acknowledged (her evidence) is in the transcript."""
    if evidence is None:
        check.skip(f"no subject's evidence given ({EVIDENCE_NAME} in a run directory, or --evidence FILE): each "
                   "subject can check that her acknowledged verdict is in the transcript and bring it")
        return
    published = {v.sender: v for v in r.verdicts}
    valid = 0
    for item in evidence:
        checked = check_evidence(item, r.transcript.round_id, r.transcript.collector_key)
        verdict = checked.verdict
        if verdict is None:
            check.notes.append(f"evidence not taken: {checked.problem}")
            continue
        valid += 1
        sid = sid_of(verdict.sender)
        if published.get(verdict.sender) != verdict:
            what = "an accept" if verdict.accept else f"a complaint ({verdict.reason})"
            bound = "" if verdict.release_digest == r.release_digest else ", bound to another release"
            check.fail(f"{sid}'s verdict, {what}{bound}, acknowledged by the collector, is not in the transcript "
                       "(hide_complaints)")
    if check.status == "pass":
        check.notes.append(f"{valid} acknowledged verdict(s) shown by subjects, each in the transcript")


def verify_transcript(transcript: Transcript, *, directory: Path | None = None, source: str = "",
                      evidence: Sequence[VerdictEvidence] | None = None) -> VerifyResult:
    """Run every check on ``transcript`` (``directory``: its run directory, for release.csv and manifest.json;
    ``evidence``: the subjects' acknowledged verdicts, `coutil.round.evidence`; None: none given)."""
    r = VerifiedRound(transcript)
    checks = {name: Check(name, catches) for name, catches in CHECKS}
    steps: list[tuple[str, Callable[[VerifiedRound, Check], object]]] = [
        ("signatures", check_signatures),
        ("roster", check_roster),
        ("inclusion", check_inclusion),
        ("grouping", check_grouping),
        ("release", _check_release),
        ("release_files", lambda rr, c: _check_release_files(rr, c, directory)),
        ("membership", _check_membership),
        ("exclusion_evidence", _check_exclusion_evidence),
        ("verdicts", _check_verdicts),
    ]
    for name, step in steps:
        step(r, checks[name])
    complaints = _check_complaints(r, checks["complaints"])
    _check_acknowledged_verdicts(r, checks["acknowledged_verdicts"], evidence)
    return VerifyResult(source or transcript.round_id.hex(), transcript.round_id.hex(), list(checks.values()),
                        complaints)


def verify_path(path: Path, evidence_files: Sequence[Path] = ()) -> VerifyResult:
    """Verify a run directory (its transcript.json, release.csv, manifest.json and, if there,
    evidence.json) or a transcript file, with the subjects' evidence in ``evidence_files``."""
    evidence: list[VerdictEvidence] | None = None
    for file in evidence_files:
        evidence = [*(evidence or []), *read_evidence(file)]
    if path.is_dir():
        file = path / TRANSCRIPT_NAME
        if not file.exists():
            raise InputError(f"{path}: no {TRANSCRIPT_NAME} (the collector never announced a round, an older coutil "
                             "wrote it, or not a run directory)")
        if (path / EVIDENCE_NAME).exists():
            evidence = [*(evidence or []), *read_evidence(path / EVIDENCE_NAME)]
        return verify_transcript(read_transcript(file), directory=path, source=str(path), evidence=evidence)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    return verify_transcript(read_transcript(path), source=str(path), evidence=evidence)
