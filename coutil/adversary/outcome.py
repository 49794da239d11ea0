"""The ``adversary`` section of a round's report: for every deviating node, its strategy, whether it
was detected, by whom, whether it was excluded, and the leak.

*Detected by*: the collector (it excluded the deviator for a fault of hers, `silent` or `blamed_*`, not merely
with her group: `COLLATERAL_EXCLUSIONS`; or found items it could not open in her group); honest subjects who
noticed a fault (a no-go vote, an unpeelable item, a rejected message naming her, a split view, a refused run, a
complaint in their signed verdict); ``auditor`` for what only someone holding the verdicts and the roster sees (a
verdict bound to another release or roster, a grouping that is not MDAV's on the roster).

*Leak*, from the simulation's ground truth (the subjects' true records): the honest subjects whose
exact confidential record the deviating party attributes to them. A collector strategy records
every opening it made (`coutil.adversary.collector.CollectorStrategy.attributions`: its own Sybils'
records taken out, two openings subtracted); a deviating subject knows her own record and her
group's released rows. The *baseline* is what an honest release discloses: a record is attributable
only if its released group holds one record.

A *broker* strategy (`coutil.adversary.broker`) gets an entry too: what it did (dropped, injected,
duplicated, delayed, substituted), what the receivers made of every delivery it made (the reasons of
their rejections and ignores, ``accepted`` when none; ``detected_by`` the receivers that REJECTed one),
the victim's fate when it has one, and its leak: the honest subjects whose exact confidential record
occurs in the bytes it carried (the release aside), found by searching every payload for the record's
wire encoding, plus what the release discloses to anyone.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np

from coutil.adversary.broker import BrokerStrategy, peek
from coutil.adversary.plan import AdversaryPlan
from coutil.protocol import codec, crypto, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.collector_groups import proven_exclusions
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt, check_equivocation, combine_receipts
from coutil.protocol.events import (
    Event,
    GroupMerged,
    GroupOpened,
    MemberExcluded,
    NoGoVoted,
    RunRefused,
    SplitViewSeen,
    SubjectGrouped,
    UnpeelableItem,
    VerdictRecorded,
)
from coutil.protocol.messages import ShuffleStart
from coutil.protocol.node import Publication, SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.sdc.mdav import mdav

#: Verdict reasons that are protocol complaints about the collector (SPEC §7.3), not audit results.
PROTOCOL_COMPLAINTS = frozenset({
    "malformed_release", "rows_root_mismatch", "roster_mismatch", "split_view", "rerun_after_reveal",
    "excluded_after_reveal", "regroup_after_reveal", "run_below_k", "run_not_in_group", "not_k_anonymous",
    "run_not_as_stated", "group_not_as_run", "fellow_not_on_roster",
})
#: A subject's rejection of a collector message that shows the collector deviating.
COLLECTOR_REJECTIONS = frozenset({"roster_changed", "root_mismatch", "bad_inclusion", "bad_assign",
                                  "fellow_not_on_roster", "bad_shuffle_start", "bad_reveal_open"})


#: At most this many detectors are named (their number is reported beside).
MAX_NAMED = 20


#: Above this many (needle x byte) comparisons the broker's leak is measured on a seeded sample of subjects.
MAX_LEAK_WORK = 2 * 10**10


def _capped(names: list[str]) -> list[str]:
    return names[:MAX_NAMED]


def _row_of(node_ids: Sequence[str]) -> dict[str, int]:
    return {node_id.split("-")[0]: row for row, node_id in enumerate(node_ids)}


def adversary_section(
    plan: AdversaryPlan,
    *,
    collector: CollectorNode,
    node_ids: Sequence[str],
    deviants: Mapping[int, str],
    events: Sequence[tuple[str, Event]],
    qi: np.ndarray,
    confidential: np.ndarray,
    subjects: Sequence[SubjectNode] | None = None,
    broker: BrokerStrategy | None = None,
    publications: Sequence[Publication] | None = None,
) -> dict[str, object]:
    """The report's ``adversary`` section (see the module docstring). ``qi`` and ``confidential`` are
    the ground truth, by row; ``subjects`` (by row) when the driver holds the subject nodes; ``broker``
    and the ``publications`` it carried when the bus had a deviating broker."""
    row_of = _row_of(node_ids)
    deviant_sids = {node_ids[r].split("-")[0] for r in deviants}
    honest_rows = [r for r in range(len(node_ids)) if r not in deviants]
    outcome = collector.outcome()
    excluded = {str(e["sid"]): str(e["reason"]) for e in outcome.excluded}
    verdicts = {str(v["sid"]): v for v in outcome.verdicts}
    group_of_sid = {e.sid: e.group for _, e in events if isinstance(e, SubjectGrouped)}
    released = _released_groups(collector)
    entries: list[dict[str, object]] = []
    for row, name in sorted(deviants.items()):
        sid = node_ids[row].split("-")[0]
        node = subjects[row] if subjects is not None else None
        entries.append(_subject_entry(row, sid, name, node, events, excluded, group_of_sid, deviant_sids,
                                      subjects, released, collector, qi, confidential, row_of))
    if plan.collector is not None:
        entries.append(_collector_entry(plan, collector, events, verdicts, deviant_sids, subjects, deviants,
                                        row_of, confidential, qi, released))
    if broker is not None:
        entries.append(_broker_entry(plan, broker, node_ids, deviants, events, excluded, verdicts, released,
                                     confidential, publications or ()))
    honest_sids = {node_ids[r].split("-")[0] for r in honest_rows}
    honest_complaints = Counter(str(v["reason"]) for sid, v in verdicts.items()
                                if sid in honest_sids and not v["accept"])
    baseline = sum(1 for _, records in released.values() if len(records) == 1)
    honest_excluded = {sid: reason for sid, reason in excluded.items() if sid not in deviant_sids}
    return {
        "plan": plan.as_dict(),
        "deviants": entries,
        "honest_subjects": len(honest_rows),
        "honest_excluded": dict(Counter(honest_excluded.values())),
        "honest_complaints": dict(honest_complaints),
        "honest_accepting": sum(1 for sid, v in verdicts.items() if sid in honest_sids and v["accept"]),
        "honest_baseline_leak": baseline,
    }


def add_verdict_evidence(section: dict[str, object], collector: CollectorNode,
                         evidence: Sequence[tuple[str, tuple[bytes, bytes] | None]],
                         deviants: Mapping[int, str]) -> None:
    """After the round, each honest subject checks that her verdict is in what the collector recorded;
    one whose acknowledged verdict is not shows her verdict and its signed verdict_ack to an auditor
    (`coutil.round.evidence`): counted in the collector's entry as ``auditor``
    ``acknowledged_verdict_missing``, detected by the auditor and public (``hide_complaints``).
    ``evidence``: each subject's sid and pair (`SubjectNode.verdict_evidence`) by row, after the driver
    let the last acknowledgements arrive."""
    recorded = {str(v["sid"]) for v in collector.outcome().verdicts}
    hidden = [sid for row, (sid, pair) in enumerate(evidence)
              if row not in deviants and sid not in recorded and pair is not None]
    entries = section.get("deviants")
    if not hidden or not isinstance(entries, list):
        return
    for entry in entries:
        if entry.get("role") != "collector":
            continue
        auditor = entry["auditor"]
        auditor["acknowledged_verdict_missing"] = len(hidden)
        if "auditor" not in entry["detected_by"]:
            entry["detected_by"] = ["auditor", *entry["detected_by"]]
            entry["detectors"] += 1
        entry["detected"] = entry["public"] = True


def proven_by(collector: CollectorNode, held: Iterable[tuple[str, tuple[bytes, bytes, bytes] | None]],
              deviant_sids: Collection[str]) -> list[str]:
    """The honest subjects (sid, `SubjectNode.equivocation_evidence`) whose proof convicts this collector in this
    round (`coutil.protocol.equivocation.check_equivocation`)."""
    return [sid for sid, proof in held if proof is not None and sid not in deviant_sids
            and not check_equivocation(EquivocationEvidence(*proof), collector.round_id, collector.public_key).problem]


def receipts_disagree(collector: CollectorNode, receipts: Iterable[tuple[bytes, bytes]]) -> int:
    """How many roots beyond the first the subjects' receipts (`SubjectNode.roster_receipt`) show this collector
    signed for this round: each a proof of equivocation an auditor makes of two receipts (`combine_receipts`)."""
    unique = {statement: RosterReceipt(announce, statement) for announce, statement in receipts}
    proofs, _ = combine_receipts(list(unique.values()))
    return sum(1 for p in proofs if not check_equivocation(p, collector.round_id, collector.public_key).problem)


def add_equivocation_proofs(section: dict[str, object], collector: CollectorNode,
                            held: Sequence[tuple[str, tuple[bytes, bytes, bytes]]],
                            receipts: Sequence[tuple[str, tuple[bytes, bytes]]], deviant_sids: Collection[str]) -> None:
    """The proofs of equivocation and the receipts the subjects of worker processes hold
    (`WorkerPool.equivocations`, `WorkerPool.receipts`; the collector's entry counts those of subjects in this
    process itself): public, detected by their holders, or by the auditor combining receipts."""
    entries = section.get("deviants")
    holders = proven_by(collector, held, deviant_sids)
    disagree = receipts_disagree(collector, [r for _, r in receipts])
    if not (holders or disagree) or not isinstance(entries, list):
        return
    for entry in entries:
        if entry.get("role") != "collector" or entry.get("equivocation_proofs"):
            continue
        entry["detected"] = entry["public"] = True
        entry["equivocation_proofs"] = len(holders)
        if disagree:
            entry["auditor"]["roster_receipts_disagree"] = disagree
        named = [*holders, *(["auditor"] if disagree else [])]
        entry["detectors"] += len(set(named) - set(entry["detected_by"]))
        entry["detected_by"] = _capped(sorted({*entry["detected_by"], *named}, key=lambda s: (s != "auditor", s)))


def _released_groups(collector: CollectorNode) -> dict[int, tuple[np.ndarray, list[tuple[float, ...]]]]:
    """Released group label -> (its QI centroid, its confidential records)."""
    outcome = collector.outcome()
    n_qi = len(collector.config.qi)
    out: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]] = {}
    start = 0
    for label, size in zip(outcome.group_ids, outcome.group_sizes, strict=False):
        rows = outcome.rows[start:start + size]
        start += size
        if size:
            out[int(label)] = (rows[0, :n_qi], [tuple(float(v) for v in r[n_qi:]) for r in rows])
    return out


#: Exclusions that name no fault of the member (SPEC §7.3): her group merged, left below k with no partner, or
#: suppressed, or her SafePub class below k. They detect nothing of hers (found by a reviewer: a member who
#: suppressed her group at will was reported detected by the collector, `excluded:suppressed`, like its victims).
COLLATERAL_EXCLUSIONS = frozenset({"merged", "below_k_no_partner", "suppressed", "suppressed_class"})


def _subject_entry(row: int, sid: str, name: str, node: SubjectNode | None, events: Sequence[tuple[str, Event]],
                   excluded: dict[str, str], group_of_sid: dict[str, int], deviant_sids: set[str],
                   subjects: Sequence[SubjectNode] | None,
                   released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]], collector: CollectorNode,
                   qi: np.ndarray, confidential: np.ndarray, row_of: dict[str, int]) -> dict[str, object]:
    group = group_of_sid.get(sid)
    by: set[str] = set()
    evidence: Counter[str] = Counter()
    if sid in excluded:
        evidence[f"excluded:{excluded[sid]}"] += 1
        if excluded[sid] not in COLLATERAL_EXCLUSIONS:
            by.add("collector")
    for node_id, event in events:
        if isinstance(event, GroupOpened) and event.undecryptable and event.group == group:
            by.add("collector")
            evidence["undecryptable_item"] += event.undecryptable
        reporter = node_id.split("-")[0]
        if reporter in deviant_sids or reporter == sid or not isinstance(
                event, NoGoVoted | UnpeelableItem | SplitViewSeen):
            continue
        if event.group == group and (not isinstance(event, SplitViewSeen) or event.member == sid):
            by.add(reporter)
            evidence[event.KIND] += 1
    if subjects is not None:
        key = subjects[row].public_key
        for other in subjects:
            if other.sid in deviant_sids:
                continue
            for rejection in other.rejections:
                if rejection.sender == key and not rejection.ignored:
                    by.add(other.sid)
                    evidence[f"rejected:{rejection.reason}"] += 1
    entry: dict[str, object] = {
        "node": sid, "row": row, "role": "subject", "strategy": name,
        "deviated": bool(getattr(node, "deviated", False)) if node is not None else None,
        "group": group,
        "detected": bool(by),
        "detected_by": _capped(sorted(by, key=lambda s: (s != "collector", s))),
        "detectors": len(by),
        "evidence": dict(evidence),
        "excluded": sid in excluded,
        "exclusion_reason": excluded.get(sid),
        "leak": _subject_leak(row, group, released, confidential, row_of, collector, deviant_sids),
    }
    if name in ("misreport-qi", "misreport-confidential"):
        entry["effect"] = _misreport_effect(name, row, group, node, released, qi, confidential)
    return entry


def _subject_leak(row: int, group: int | None, released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]],
                  confidential: np.ndarray, row_of: dict[str, int], collector: CollectorNode,
                  deviant_sids: set[str]) -> list[str]:
    """Honest group-mates whose record she can attribute: her released group holds her own record
    and exactly one other."""
    if group is None or group not in released:
        return []
    own = tuple(float(v) for v in confidential[row])
    records = Counter(released[group][1])
    if records[own] < 1 or sum(records.values()) != 2:
        return []
    records[own] -= 1
    other = next(r for r, c in records.items() if c)
    mates = [topics.sid_of(k) for k, g in collector._group_of.items() if g == group]
    return [s for s in mates if s in row_of and s not in deviant_sids
            and tuple(float(v) for v in confidential[row_of[s]]) == other]


def _misreport_effect(name: str, row: int, group: int | None, node: SubjectNode | None,
                      released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]], qi: np.ndarray,
                      confidential: np.ndarray) -> dict[str, object]:
    """What a misreport does to the release and to her own protection (it cannot be told from the
    truth, so it is measured, not detected)."""
    true_qi = qi[row]
    true_conf = tuple(float(v) for v in confidential[row])
    effect: dict[str, object] = {"released": group in released}
    if group not in released or group is None:
        return effect
    centroid, records = released[group]
    nearest = min(released, key=lambda g: float(np.sum((released[g][0] - true_qi) ** 2)))
    effect["true_qi_distance_to_her_centroid"] = float(np.sqrt(np.sum((centroid - true_qi) ** 2)))
    if name == "misreport-qi" and node is not None:
        reported_qi = np.asarray(node._qi)
        effect["reported_qi_distance_to_her_centroid"] = float(np.sqrt(np.sum((centroid - reported_qi) ** 2)))
    # An intruder who knows her true QIs looks in the released group nearest to them.
    effect["intruder_finds_her_group"] = nearest == group
    effect["true_record_in_release"] = true_conf in records
    if name == "misreport-confidential" and node is not None:
        reported = tuple(node._confidential)
        effect["reported_record_in_release"] = reported in records
        effect["released_value_error"] = float(np.max(np.abs(np.subtract(reported, true_conf))))
    return effect


def _collector_entry(plan: AdversaryPlan, collector: CollectorNode, events: Sequence[tuple[str, Event]],
                     verdicts: dict[str, dict[str, object]], deviant_sids: set[str],
                     subjects: Sequence[SubjectNode] | None, deviants: Mapping[int, str], row_of: dict[str, int],
                     confidential: np.ndarray, qi: np.ndarray,
                     released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]]) -> dict[str, object]:
    own = set(getattr(collector, "own_records", {}))
    own_sids = {topics.sid_of(k) for k in own}
    by: set[str] = set()
    refused: set[tuple[str, str]] = set()  # (subject, reason): a re-sent shuffle_start is refused again
    complaints: Counter[str] = Counter()
    for node_id, event in events:
        reporter = node_id.split("-")[0]
        if reporter in deviant_sids or reporter not in row_of:
            continue
        if isinstance(event, RunRefused):
            refused.add((reporter, event.reason))
            by.add(reporter)
        elif isinstance(event, VerdictRecorded) and not event.accept and event.reason in PROTOCOL_COMPLAINTS \
                and reporter in verdicts:
            # Public once the collector recorded it (one it acknowledged and hid is counted below, from the
            # subject's evidence); a verdict it refused (``split-roster-early``: she is not on its roster)
            # stays on her device.
            complaints[event.reason] += 1
            by.add(reporter)
        elif isinstance(event, SplitViewSeen) and event.member not in row_of:
            by.add(reporter)
    rejections: Counter[str] = Counter()
    proofs: list[str] = []  # honest subjects holding a valid proof that it signed two roster roots
    if subjects is not None:
        proofs = proven_by(collector, [(s.sid, s.equivocation_evidence()) for s in subjects], deviant_sids)
        by.update(proofs)
        for subject in subjects:
            if subject.sid in deviant_sids:
                continue
            for rejection in subject.rejections:
                if rejection.reason in COLLECTOR_REJECTIONS and not rejection.ignored:
                    rejections[rejection.reason] += 1
                    by.add(subject.sid)
    auditor: Counter[str] = Counter()
    for sid, verdict in verdicts.items():
        if verdict["reason"] == "other_release" and sid not in own_sids:
            auditor["verdict_bound_to_another_release_or_roster"] += 1
    if subjects is not None:
        # Whoever brings a receipt, its two envelopes are the collector's signatures: none is left out.
        disagree = receipts_disagree(collector, [r for s in subjects if (r := s.roster_receipt()) is not None])
        if disagree:
            auditor["roster_receipts_disagree"] = disagree
    regrouped = _not_mdav(collector, events)
    if regrouped:
        auditor["groups_not_mdav_on_the_roster"] = regrouped
    unproven = _unproven_blames(collector)
    if unproven:
        auditor["blame_not_proven"] = unproven
    if auditor:
        by.add("auditor")
    refusals = Counter(reason for _, reason in refused)
    truth = {node_id: tuple(float(v) for v in confidential[row]) for node_id, row in row_of.items()}
    attributions: dict[bytes, tuple[float, ...]] = getattr(collector, "attributions", dict)()
    honest_attributed = {topics.sid_of(k): rec for k, rec in attributions.items()
                         if topics.sid_of(k) in row_of and topics.sid_of(k) not in deviant_sids}
    leak = sorted(sid for sid, rec in honest_attributed.items() if truth[sid] == rec)
    entry: dict[str, object] = {
        "node": "collector", "role": "collector", "strategy": plan.collector,
        "params": dict(plan.collector_params),
        "deviated": bool(getattr(collector, "deviated", False)),
        "detected": bool(by),
        "detected_by": _capped(sorted(by, key=lambda s: (s != "auditor", s))),
        "detectors": len(by),
        "refusals": dict(refusals),
        "complaints": dict(complaints),
        "collector_messages_rejected": dict(rejections),
        "auditor": dict(auditor),
        "equivocation_proofs": len(proofs),
        # A signed complaint any auditor can verify (a verdict), evidence only the auditor sees, or a proof of
        # equivocation a subject holds (which needs nothing the collector publishes).
        "public": bool(complaints) or bool(auditor) or bool(proofs),
        "excluded": False,
        "openings": len(getattr(collector, "openings", ())),
        "attributions": len(honest_attributed),
        "leak": leak,
    }
    victim = getattr(collector, "victim_key", None)
    if victim is not None and topics.sid_of(victim) in row_of:
        victim_row = row_of[topics.sid_of(victim)]
        entry["victim"] = _victim_view(collector, victim, own, qi[victim_row], released,
                                       subjects[victim_row] if subjects is not None else None)
    if own:
        entry["fabricated"] = len(own)
    return entry


def _victim_view(collector: CollectorNode, victim: bytes, own: set[bytes], true_qi: np.ndarray,
                 released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]],
                 node: SubjectNode | None) -> dict[str, object]:
    """The victim's group as the collector made it, and what she can see of it herself: no member is
    verifiable to her (per-round keys are unlinkable by design); a centroid equal to her own QIs
    means every other member registered exactly her QIs, which her audit notices on her device
    (``she_noticed``: `coutil.audit.subject.SubjectAudit.centroid_is_own_qi`, a local warning)."""
    group = collector._group_of.get(victim)
    members = [k for k, g in collector._group_of.items() if g == group]
    view: dict[str, object] = {"node": topics.sid_of(victim), "group": group, "members": len(members),
                               "own_members": sum(1 for k in members if k in own),
                               "members_she_can_verify": 0}
    if group in released:
        # Up to rounding (the centroid is a mean): every other member registered exactly her QIs.
        view["centroid_equals_her_qi"] = bool(np.allclose(released[group][0], true_qi, rtol=1e-12, atol=1e-9))
    audit = getattr(node, "audit", None) if node is not None else None
    if audit is not None:
        view["she_noticed"] = bool(getattr(audit, "centroid_is_own_qi", False))
    return view


def _unproven_blames(collector: CollectorNode) -> int:
    """`blamed_*` exclusions that the signed messages of the run they ended do not prove: the auditor's
    `blame_evidence` replay (`proven_exclusions`) over what the collector keeps as the evidence of its blames."""
    evidence = collector.run_evidence()
    count = 0
    for (group, run), culprits in collector.run_blames().items():
        # Member messages among them came over the wire: decoded as received (verified), not as its own bytes.
        messages = [(codec.decode(e).message, e) for e in evidence.get((group, run), ())]
        start = next((m for m, _ in messages if isinstance(m, ShuffleStart) and (m.group, m.run) == (group, run)
                      and m.sender == collector.public_key), None)
        if start is None:
            count += len(culprits)
            continue
        # Without the merges' statements a message for a group a merge moved her out of would count as proof
        # here: over-generous to the collector, never a false count against it.
        proven = proven_exclusions(start, messages, collector.announce_digest, collector.roster_root, {})
        count += sum(1 for key, reason in culprits if reason not in proven.get(key, set()))
    return count


def _not_mdav(collector: CollectorNode, events: Sequence[tuple[str, Event]]) -> int:
    """Released groups whose centroid is not MDAV's on the roster, among groups nobody left (an
    auditor holding the roster recomputes MDAV: it is deterministic)."""
    matrix = collector._qi_matrix
    if matrix is None or collector.config.grouping != "mdav" or matrix.shape[0] < collector.config.k:
        return 0
    changed = {e.group for _, e in events if isinstance(e, MemberExcluded)}
    changed |= {e.into for _, e in events if isinstance(e, GroupMerged)}
    grouping = mdav(matrix, collector.config.k)
    centroids = {tuple(np.round(np.asarray(c, dtype=np.float64), 9)) for c in grouping.centroids}
    count = 0
    for label, (centroid, _) in _released_groups(collector).items():
        if label not in changed and tuple(np.round(centroid, 9)) not in centroids:
            count += 1
    return count


def _broker_entry(plan: AdversaryPlan, broker: BrokerStrategy, node_ids: Sequence[str], deviants: Mapping[int, str],
                  events: Sequence[tuple[str, Event]], excluded: dict[str, str],
                  verdicts: dict[str, dict[str, object]],
                  released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]], confidential: np.ndarray,
                  publications: Sequence[Publication]) -> dict[str, object]:
    honest_rows = [r for r in range(len(node_ids)) if r not in deviants]
    detectors = sorted((receiver.split("-")[0] for receiver in broker.rejected_by),
                       key=lambda s: (s != "collector", s))
    truth = {node_ids[r].split("-")[0]: confidential[r] for r in honest_rows}
    attributed, measure = plaintext_hits(publications, truth, broker.rng.fork("leak"))
    entry: dict[str, object] = {
        "node": "broker", "role": "broker", "strategy": plan.broker, "params": dict(plan.broker_params),
        "deviated": broker.deviated,
        "actions": dict(broker.actions),
        "made_by_kind": dict(broker.made_by_kind),
        # What the receivers made of each delivery it made: a rejection reason, or accepted.
        "received": dict(broker.received),
        "accepted_by_kind": dict(broker.accepted_by_kind),
        # Of those, REJECTs (the rest were IGNOREd: a replay or a copy, as expected).
        "rejected": sum(broker.rejected_by.values()),
        "detected": bool(detectors),
        "detected_by": _capped(detectors),
        "detectors": len(detectors),
        "excluded": False,  # nobody can exclude the broker
        "leak": sorted(attributed),
        "leak_measure": measure,
        "release_discloses": sum(1 for _, records in released.values() if len(records) == 1),
    }
    if broker.victim is not None:
        sid = broker.victim.split("-")[0]
        grouped = any(isinstance(e, SubjectGrouped) and e.sid == sid for _, e in events)
        verdict = verdicts.get(sid)
        entry["victim"] = {"node": sid, "row": node_ids.index(broker.victim), "grouped": grouped,
                           "excluded": excluded.get(sid),
                           "verdict": None if verdict is None else
                           ("accept" if verdict["accept"] else str(verdict["reason"]))}
    if broker.earlier is not None:
        entry["across_rounds"] = _across_rounds(broker, node_ids, released, confidential)
    return entry


def _across_rounds(broker: BrokerStrategy, node_ids: Sequence[str],
                   released: dict[int, tuple[np.ndarray, list[tuple[float, ...]]]],
                   confidential: np.ndarray) -> dict[str, object]:
    """The difference attack on two public releases over the same records (SPEC §3, the known limit
    across rounds): the records of the earlier round's release that this one lacks. The broker knows
    whom it kept out of this round (its victim: her network identity, her QIs in her registration);
    a difference of exactly one record is hers."""
    assert broker.earlier is not None
    now = Counter(record for _, records in released.values() for record in records)
    difference = Counter(broker.earlier.released) - now
    attributed: list[str] = []
    leak: list[str] = []
    if broker.victim is not None and sum(difference.values()) == 1:
        row = node_ids.index(broker.victim)
        sid = broker.victim.split("-")[0]
        attributed.append(sid)
        if next(iter(difference)) == tuple(float(v) for v in confidential[row]):
            leak.append(sid)
    return {"earlier_released": len(broker.earlier.released), "released": sum(now.values()),
            "difference": sum(difference.values()), "attributed": attributed, "leak": leak}


def plaintext_hits(publications: Sequence[Publication], truth: Mapping[str, np.ndarray],
                    rng: SeededRandom) -> tuple[list[str], dict[str, object]]:
    """Honest subjects whose confidential record, in its wire encoding (SPEC §8.2), occurs in a payload
    the broker carried other than a release (which shows records only by group, to everyone)."""
    payloads = []
    for pub in publications:
        seen = peek(pub.payload)
        if seen is None or seen.tag != "release":
            payloads.append(pub.payload)
    starts: list[int] = []
    offset = 0
    for payload in payloads:
        starts.append(offset)
        offset += len(payload)
    buffer = b"".join(payloads)
    sids = sorted(truth)
    sampled = False
    if sids and len(sids) * max(1, len(buffer)) > MAX_LEAK_WORK:
        keep = max(1, MAX_LEAK_WORK // max(1, len(buffer)))
        pool = list(sids)
        sids = sorted(pool.pop(rng.below(len(pool))) for _ in range(min(keep, len(pool))))
        sampled = True
    attributed: list[str] = []
    for sid in sids:
        needle = crypto.encode_record([float(v) for v in truth[sid]])
        at = buffer.find(needle)
        while at >= 0:
            i = bisect.bisect_right(starts, at) - 1
            if at + len(needle) <= starts[i] + len(payloads[i]):  # within one payload, not across two
                attributed.append(sid)
                break
            at = buffer.find(needle, at + 1)
    return attributed, {"payloads_searched": len(payloads), "bytes_searched": len(buffer),
                        "subjects_searched": len(sids), "sampled": sampled}
