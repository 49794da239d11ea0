"""The auditor's `exclusion_evidence` check (`coutil.round.verify`): every exclusion the collector
claims is a signed statement of a run the member was in, and every run follows the one before it.

The collector states exclusions in its signed ``shuffle_start`` (SPEC §4 share.1): a new run's
``excluded`` list, or a closing one (no members) when its group dissolves, merges or is suppressed.
The transcript's ``exclusions`` table is its unsigned summary; this check holds the summary to the
statements and the statements to the runs, as stated in `check_exclusion_evidence`'s docstring.
"""

from __future__ import annotations

from coutil.protocol.config import commits_to_evidence
from coutil.protocol.messages import ShuffleStart
from coutil.protocol.topics import sid_of
from coutil.round.verify_roster import Check, VerifiedRound, need


def _check_run_follows(group: int, run: int, start: ShuffleStart, previous: ShuffleStart, merged_in: set[bytes],
                       check: Check) -> None:
    """A run is the one before it minus the members its signed statement excludes (plus members merged in
    from a dissolved group): what each member checks too (SPEC §4 share.1)."""
    kept, stated, before = set(start.members), {key for key, _ in start.excluded}, set(previous.members)
    if not before:
        check.fail(f"group {group} run {run} follows the group's closing shuffle_start (run {run - 1})")
        return
    for key in sorted(stated & kept):
        check.fail(f"group {group} run {run} excludes {sid_of(key)} and keeps her (a statement that clears "
                   "complaints)")
    for key in sorted(before - kept - stated):
        check.fail(f"group {group} run {run} leaves out {sid_of(key)}, a member of run {run - 1}, without a signed "
                   "exclusion")
    for key in sorted(kept - before - merged_in):
        check.fail(f"group {group} run {run} adds {sid_of(key)}, neither in run {run - 1} nor merged in")


def _check_statement(r: VerifiedRound, check: Check, s: ShuffleStart, previous: ShuffleStart | None, key: bytes,
                     reason: str) -> None:
    """One signed exclusion: of a member of the run before (``merged`` at a group's first run: only of a
    member the assigns show moved out of that MDAV group), ``silent`` no sooner than its step deadline."""
    group, run = s.group, s.run
    if reason == "suppressed_class":
        _check_suppressed_class(r, check, s, previous, key)
        if previous is None:
            return
    elif previous is None:
        assign = next((a for a in r.assigns if a.subject == key), None)
        moved_out = reason == "merged" and assign is not None and assign.group != group \
            and key in r.formed.get(group, ())
        if not moved_out:
            what = "a member the assigns show moved out of the group" if reason == "merged" else \
                "a previous run she could have failed in (drop-subject)"
            check.fail(f"group {group} run {run} excludes {sid_of(key)} ({reason}) without {what}")
        return
    if key not in previous.members:
        check.fail(f"group {group} run {run} excludes {sid_of(key)} ({reason}), not a member of run {run - 1}")
    if reason == "merged" and s.members:
        # A merge dissolves the group it leaves: only a closing shuffle_start states it (SPEC §4). In a run that
        # goes on it was no exclusion at all, and let a collector take members of other groups out of a run it
        # had added them to (`cover-run`, found by an attacker).
        check.fail(f"group {group} run {run} states {sid_of(key)} merged in a run that goes on (only a group's "
                   "closing shuffle_start does)")
    if reason == "silent" and r.issued(s) < previous.deadline - 1e-6:
        check.fail(f"group {group} run {run} excludes {sid_of(key)} as silent {previous.deadline - r.issued(s):.3g} "
                   f"s before run {run - 1}'s step deadline (drop-subject)")


def _check_suppressed_class(r: VerifiedRound, check: Check, s: ShuffleStart, previous: ShuffleStart | None,
                            key: bytes) -> None:
    """`suppressed_class` (SPEC §9.1) is SafePub's suppression of a class below k: stated only in a class's closing
    shuffle_start, either before any run (a class formed below k: none of its members assigned, and below k on the
    registrations when they are in) or once its exclusions left it below k (fewer than k members suppressed).
    Anywhere else it would be an exclusion with no deadline and no proof (a live member dropped at once, a silent
    one passed off as suppressed to keep a differential-privacy label: found by an attacker of that label)."""
    group, run = s.group, s.run
    method = r.announce.params.method if r.announce is not None else None
    why = ""
    if method != "safepub":
        why = f"a {method} round suppresses no class"
    elif s.members:
        why = "in a run that goes on (only a class's closing shuffle_start suppresses it)"
    elif previous is None:
        formed = r.formed.get(group)
        if any(a.subject == key for a in r.assigns):
            why = "assigned, yet before any run of her class"
        elif formed is not None and len(formed) >= r.k:
            why = f"before any run of a class of {len(formed)} members, not below k = {r.k}"
    elif sum(1 for _, reason in s.excluded if reason == "suppressed_class") >= r.k:
        why = f"with k = {r.k} or more members left (the class could run again)"
    if why:
        check.fail(f"group {group} run {run} excludes {sid_of(key)} as suppressed_class {why} (drop-subject)")


def check_exclusion_evidence(r: VerifiedRound, check: Check) -> None:
    """With the signed shuffle_starts (else skipped: the exclusions are then the collector's unsigned word):

    - one shuffle_start per (group, run), for a group below the roster's group count, runs numbered
      from 0 without a gap, every run (one with members) of at least k members, sorted and distinct;
    - every run is the one before it minus the members its statement excludes, plus members stated
      `merged` elsewhere; none follows a closing shuffle_start; no statement excludes a member it keeps;
    - every statement names a member of the run before it (`silent`: issued no sooner than that run's
      step deadline); a `merged` one at a group's run 0, only a member the assigns and the recomputed
      grouping show moved out of that group; `suppressed_class` needs no run;
    - every exclusion of the summary has a signed statement whose first reason that is not `merged`
      is the summary's (`merged` alone is no exclusion: she is a member of the group she moved to).
      The one exemption: `blamed_unsolicited` of a member of her group's last run, with no statement,
      which is a blame after her group's reveal_open (no run follows it, the protocol signs nothing):
      her record is then counted among her group's released records (`membership`);
    - every member a statement excludes for a reason other than `merged` is in the summary;
    - every group of the signed release has a run (a shuffle_start with members): the flag says the
      transcript holds them all.
    """
    if not need(r, check):
        return
    summary = r.transcript.exclusions
    if not r.transcript.shuffle_starts_included:
        if r.announce is not None and commits_to_evidence(r.announce.params.manifest):
            check.fail(f"the signed announce commits to publishing every shuffle_start (manifest transcript = "
                       f"{dict(r.announce.params.manifest)['transcript']}), and the transcript holds none: withheld "
                       f"(a downgrade), its {len(summary)} exclusion(s) left unchecked")
            return
        check.skip(f"the transcript holds no shuffle_start (collector export): its {len(summary)} exclusion(s) are "
                   "the collector's unsigned summary, the runs are not checked")
        return
    runs = r.runs()
    if r.release is not None:
        # `shuffle_starts_included` says the transcript holds every shuffle_start the collector published, and
        # no group's records are opened but in a run (SPEC §4 share.1): a released group with none is withheld
        # evidence (an empty list with the flag true passed every check, found by fuzzing the auditor).
        with_runs = {group for (group, _run), s in runs.items() if s.members}
        for group in sorted(set(r.release.group_ids) - with_runs):
            check.fail(f"group {group} is released, and the transcript, which says it holds every shuffle_start "
                       "the collector published (shuffle_starts_included), holds no run of it")
    for s in r.shuffle_starts:
        if runs[(s.group, s.run)] != s:
            check.fail(f"group {s.group} run {s.run}: two different shuffle_starts (split view of the run)")
    n_groups = r.roster.n_groups if r.roster is not None else None
    merged_in = {key for start in runs.values() for key, reason in start.excluded if reason == "merged"}
    for (group, run), s in sorted(runs.items()):
        if n_groups is not None and group >= n_groups:
            check.fail(f"a shuffle_start of group {group} run {run}: the roster has {n_groups} groups")
            continue
        if list(s.members) != sorted(set(s.members)):
            check.fail(f"group {group} run {run}: its members unsorted or repeated (honest members refuse such a "
                       "shuffle_start: bad_shuffle_start)")
        if s.members and len(s.members) < r.k:
            check.fail(f"group {group} run {run} has {len(s.members)} members, below k = {r.k} (run_below_k)")
        previous = runs.get((group, run - 1))
        if run > 0 and previous is None:
            check.fail(f"group {group} run {run}: run {run - 1} is not in the transcript")
        if previous is not None:
            _check_run_follows(group, run, s, previous, merged_in, check)
        for key, reason in s.excluded:
            _check_statement(r, check, s, previous, key, reason)
    # A member is in one group's last run at most: her record is released in one group (a victim added to a
    # second group's run, as merged, is a record of hers the collector holds twice over).
    last: dict[int, ShuffleStart] = {}
    for (group, _run), s in sorted(runs.items()):
        last[group] = s
    in_last: dict[bytes, int] = {}
    for group, s in sorted(last.items()):
        for key in s.members:
            if key in in_last:
                check.fail(f"{sid_of(key)} is in the last run of group {in_last[key]} and of group {group}")
            in_last.setdefault(key, group)
    by_sid = {sid_of(key): (key, items) for key, items in r.statements().items()}
    after_reveal = {sid_of(key) for key in r.post_reveal_blamers()}
    stated = classes = exempt = 0
    for sid, reason in sorted(summary.items()):
        key_items = by_sid.get(sid)
        items = key_items[1] if key_items is not None else []
        firsts = [item for item in items if item[3] != "merged"]
        if reason == "merged":
            check.fail(f"{sid} excluded as merged in the summary: a merged member is a member of the group she "
                       "moved to, not excluded")
        elif not firsts:
            if reason == "blamed_unsolicited" and sid in after_reveal:
                exempt += 1
                continue
            only = " (only `merged` statements)" if items else ""
            check.fail(f"{sid} excluded ({reason}) in the summary, in no signed shuffle_start{only}")
        elif firsts[0][3] != reason:
            _, group, run, first = firsts[0]
            check.fail(f"{sid} excluded as {reason} in the summary, as {first} in group {group} run {run}'s "
                       "signed shuffle_start")
        elif reason == "suppressed_class":
            classes += 1
        else:
            stated += 1
    for sid, (_, items) in sorted(by_sid.items()):
        for _, group, run, reason in items:
            if reason != "merged" and sid not in summary:
                check.fail(f"{sid} excluded ({reason}) by group {group} run {run}'s shuffle_start, not in the summary")
                break
    if check.status == "pass":
        check.notes.append(
            f"{len(runs)} signed shuffle_starts: every run of at least k = {r.k} members and the run before it minus "
            f"its stated exclusions (plus members merged in); {stated} exclusion(s) each stated for a member of the "
            "run before (silent ones no sooner than its step deadline)"
            + (f"; {classes} suppressed_class, each in its class's signed closing notice" if classes else "")
            + (f"; {exempt} blamed_unsolicited after the group's reveal_open, which no statement exists for: "
               "their records counted in their group's release" if exempt else ""))
