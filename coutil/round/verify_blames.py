"""The auditor's `blame_evidence` check (`coutil.round.verify`): every `blamed_*` exclusion the collector
signed is proven by the signed messages of the run it ended.

A `silent` exclusion is timed against the run's deadline (`exclusion_evidence`); a blame names a deviation,
and the deviation is in the members' own signed messages: two different messages for one slot, a view or
key nobody was given, a message for a run never started, a blame without a no-go vote, or a run re-executed
from the members' blames (SPEC §4 share.6, §7.3). The collector keeps those messages when it excludes
(`CollectorCore.run_evidence`) and the transcript carries them (version 3, ``run_evidence``): the auditor
replays them with the collector's own rules (`coutil.protocol.collector_groups.proven_exclusions`). A
collector that excludes a live honest member as a deviator, at once and with nothing to show (a false
blame), fails here; before, nothing timed or proved such an exclusion.

What the evidence discloses is what the run's members saw between them: their run keys, onions (each its
first mixer's), batches (each its next mixer's), votes and blames. A blame reveals the member's outer secret,
permutation and commitment salt, never her inner key: the evidence links her to her inner-sealed item of that
run, which nobody can open (no record of the run was).
"""

from __future__ import annotations

from collections import defaultdict

from coutil.errors import RemoteProtocolError
from coutil.protocol import codec
from coutil.protocol.collector_groups import proven_exclusions
from coutil.protocol.config import commits_to_evidence
from coutil.protocol.messages import Message, ShuffleStart
from coutil.protocol.topics import sid_of
from coutil.round.verify_roster import Check, VerifiedRound, need


def _blamed(r: VerifiedRound) -> list[tuple[ShuffleStart, ShuffleStart, bytes, str]]:
    """(statement, the run it ended, member, reason) for every `blamed_*` exclusion of a run that has a run
    before it (one at a group's first run is `exclusion_evidence`'s failure)."""
    runs = r.runs()
    out: list[tuple[ShuffleStart, ShuffleStart, bytes, str]] = []
    for (group, run), start in sorted(runs.items()):
        previous = runs.get((group, run - 1))
        if previous is None:
            continue
        out.extend((start, previous, key, reason) for key, reason in start.excluded if reason.startswith("blamed_"))
    return out


def _decoded(envelopes: tuple[bytes, ...], where: str, check: Check) -> list[tuple[Message, bytes]] | None:
    messages: list[tuple[Message, bytes]] = []
    for i, envelope in enumerate(envelopes):
        try:
            decoded = codec.decode(envelope, codec.Limits())
        except RemoteProtocolError as exc:
            check.fail(f"{where}, envelope {i}: {exc.reason} ({exc.detail})")
            return None
        messages.append((decoded.message, envelope))
    return messages


def check_blame_evidence(r: VerifiedRound, check: Check) -> None:
    """With the signed shuffle_starts and the run evidence (else skipped, saying how many blames are then
    the collector's word): every `blamed_*` exclusion a signed statement makes is one that the signed messages
    of the run before it prove, replayed with the collector's rules; evidence whose envelopes do not verify
    fails too."""
    if not need(r, check):
        return
    t = r.transcript
    if not t.shuffle_starts_included:
        summary = sum(1 for reason in t.exclusions.values() if reason.startswith("blamed_"))
        if summary:
            check.skip(f"the transcript holds no shuffle_start: its {summary} `blamed_*` exclusion(s) are the "
                       "collector's unsigned word")
        else:
            check.notes.append("no `blamed_*` exclusion")
        return
    blamed = _blamed(r)
    if not blamed:
        check.notes.append("no signed `blamed_*` exclusion")
        return
    if not t.run_evidence_included:
        if r.announce is not None and commits_to_evidence(r.announce.params.manifest):
            check.fail(f"{len(blamed)} signed `blamed_*` exclusion(s), and the transcript holds no run evidence "
                       "although the signed announce commits to it (manifest transcript = "
                       f"{dict(r.announce.params.manifest)['transcript']}): withheld (a downgrade)")
            return
        check.skip(f"{len(blamed)} signed `blamed_*` exclusion(s), and the transcript holds no run evidence "
                   f"(transcript version {t.version}: an older coutil's, or the evidence withheld): they are the "
                   "collector's word")
        return
    announce_digest = codec.payload_digest_of(t.announce, codec.Limits())
    roster_root = r.roster.merkle_root if r.roster is not None else b""
    moved_from: dict[bytes, set[int]] = defaultdict(set)
    for (group, _run), start in r.runs().items():
        for key, reason in start.excluded:
            if reason == "merged":
                moved_from[key].add(group)
    proven: dict[tuple[int, int], dict[bytes, set[str]] | None] = {}
    held = 0
    for start, previous, key, reason in blamed:
        where = (previous.group, previous.run)
        if where not in proven:
            envelopes = t.run_evidence.get(where)
            messages = None if envelopes is None else _decoded(
                envelopes, f"group {where[0]} run {where[1]}'s evidence", check)
            proven[where] = None if messages is None else proven_exclusions(
                previous, messages, announce_digest, roster_root, moved_from)
        shown = proven[where]
        what = f"group {start.group} run {start.run} excludes {sid_of(key)} ({reason})"
        if shown is None:
            if where not in t.run_evidence:
                check.fail(f"{what}: the transcript holds no evidence of run {previous.run} (a blame with nothing to "
                           "show)")
        elif reason not in shown.get(key, set()):
            also = shown.get(key)
            check.fail(f"{what}, which run {previous.run}'s signed messages do not prove (a false blame)"
                       + (f"; they prove {', '.join(sorted(also))}" if also else ""))
        else:
            held += 1
    if check.status == "pass":
        check.notes.append(f"{held} `blamed_*` exclusion(s), each proven by the signed messages of the run it ended "
                           f"({len(proven)} run(s) replayed)")
