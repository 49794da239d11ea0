"""What a round produced, whichever driver ran it: `RoundReport`, traffic statistics, output files.

Outputs (`write_outputs`) never contain a confidential value outside ``release.csv``: the trace
holds only event codes, counts and ids (see `coutil.protocol.events`). They are written into a
temporary directory beside the output directory, which then replaces it whole (`coutil.fileio`):
an interrupted write leaves the output directory untouched, a finished one holds nothing of an
older run.
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from coutil.audit.subject import manifest_fields
from coutil.fileio import atomic_write, staged_directory, write_text_atomic
from coutil.protocol.collector_release import RoundOutcome
from coutil.protocol.config import RoundConfig
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt
from coutil.protocol.events import Event
from coutil.protocol.node import RejectionLog
from coutil.round.evidence import EVIDENCE_NAME, missing_from, write_evidence
from coutil.round.privacy_label import round_privacy_label
from coutil.round.transcript import SECOND_TRANSCRIPT_NAME, TRANSCRIPT_NAME, Transcript, write_transcript
from coutil.sdc.dataset import format_number, write_csv


class TrafficCounters(Protocol):
    """One node's message counters (`coutil.net.memory.Traffic`, `coutil.net.mqtt.NodeTraffic`)."""

    @property
    def sent_messages(self) -> int: ...

    @property
    def sent_bytes(self) -> int: ...

    @property
    def received_messages(self) -> int: ...

    @property
    def received_bytes(self) -> int: ...


def traffic_stats(traffic: Sequence[TrafficCounters],
                  bulletins: Sequence[tuple[int, int]] | None = None) -> dict[str, dict[str, float]]:
    """Mean and max per subject of messages and bytes.

    ``bulletins``: per subject, the (messages, bytes) received on bulletin topics (announce, roster,
    release), when the driver counts them apart; the statistics then also exclude them.
    """
    if not traffic:
        return {}
    columns: dict[str, list[int]] = {
        "sent_messages": [t.sent_messages for t in traffic],
        "sent_bytes": [t.sent_bytes for t in traffic],
        "received_messages": [t.received_messages for t in traffic],
        "received_bytes": [t.received_bytes for t in traffic],
    }
    if bulletins is not None:
        columns["received_messages_excl_bulletin"] = [
            t.received_messages - b[0] for t, b in zip(traffic, bulletins, strict=True)]
        columns["received_bytes_excl_bulletin"] = [
            t.received_bytes - b[1] for t, b in zip(traffic, bulletins, strict=True)]
    columns["total_messages"] = [t.sent_messages + t.received_messages for t in traffic]
    columns["total_bytes"] = [t.sent_bytes + t.received_bytes for t in traffic]
    if bulletins is not None:
        columns["total_bytes_excl_bulletin"] = [
            t.sent_bytes + t.received_bytes - b[1] for t, b in zip(traffic, bulletins, strict=True)]
    return {name: {"mean": sum(values) / len(values), "max": float(max(values))} for name, values in columns.items()}


@dataclass
class RoundReport:
    """Everything a round produced, beside the collector's `RoundOutcome`."""

    outcome: RoundOutcome
    subjects: int
    #: Why the driver stopped: "finished" (the collector finished), "time", "timeout", "max_events".
    stop_reason: str
    #: Seconds of protocol time (virtual in memory, wall over MQTT).
    virtual_time: float
    wall_times: dict[str, float]
    traffic: dict[str, dict[str, float]]
    rejections: dict[str, int]
    #: Events processed by the driver (bus events in memory, node events over MQTT).
    events: int
    dropped: dict[str, int]
    vanished: list[int]
    subject_states: dict[str, int]
    #: Subject ids (sids) in dataset order; row i of the dataset is subject ``sids[i]``.
    sids: list[str] = field(default_factory=list)
    #: Events the nodes reported, by kind (collector and subjects together).
    node_events: dict[str, int] = field(default_factory=dict)
    #: Deviating nodes and what came of them (`coutil.adversary.outcome`); None: an honest round.
    adversary: dict[str, object] | None = None
    #: Duplicates received (IGNORE ``duplicate``), by message type: which re-sends arrived twice.
    duplicates_by_kind: dict[str, int] = field(default_factory=dict)
    #: Messages re-sent by the nodes' re-send timers, by kind (sender side; relays not included).
    resends_by_kind: dict[str, int] = field(default_factory=dict)

    @property
    def completed(self) -> bool:
        return self.outcome.completed

    def summary(self) -> dict[str, object]:
        """A JSON-able summary (no confidential values)."""
        out = self.outcome
        accepted = sum(1 for v in out.verdicts if v["accept"])
        return {
            "completed": out.completed,
            "phase": out.phase,
            "round_id": out.round_id,
            "subjects": self.subjects,
            "registered": out.registered,
            "released_rows": int(out.rows.shape[0]),
            "groups": len(out.group_sizes),
            "group_sizes": {str(k): v for k, v in sorted(Counter(out.group_sizes).items())},
            "excluded": dict(Counter(str(e["reason"]) for e in out.excluded)),
            "verdicts": len(out.verdicts),
            "accepted": accepted,
            "vanished": len(self.vanished),
            "stop_reason": self.stop_reason,
            "virtual_time": self.virtual_time,
            "virtual_phase_times": dict(out.phase_times),
            "wall_times": self.wall_times,
            "traffic_per_subject": self.traffic,
            "rejections": dict(sorted(self.rejections.items())),
            "dropped": self.dropped,
            "events": self.events,
            "node_events": dict(sorted(self.node_events.items())),
            "duplicates_by_kind": dict(sorted(self.duplicates_by_kind.items())),
            "resends_by_kind": dict(sorted(self.resends_by_kind.items())),
            "subject_states": dict(sorted(self.subject_states.items())),
            **({"adversary": self.adversary} if self.adversary is not None else {}),
        }


def count_rejections(nodes: Iterable[object]) -> Counter[str]:
    """Rejections by reason over nodes that record them (a ``rejections`` list of `Rejection`)."""
    counts: Counter[str] = Counter()
    for node in nodes:
        rejections = getattr(node, "rejections", ())
        if isinstance(rejections, RejectionLog):
            counts.update(rejections.counts())  # every one, not only those kept one by one
            continue
        for rejection in rejections:
            counts[rejection.reason] += 1
    return counts


def count_duplicates_by_kind(nodes: Iterable[object]) -> Counter[str]:
    """IGNORE ``duplicate`` rejections by message type (``run_keys``, ``assign``, ...) over nodes."""
    counts: Counter[str] = Counter()
    for node in nodes:
        for rejection in getattr(node, "rejections", ()):
            if rejection.reason == "duplicate":
                counts[getattr(rejection, "kind", "") or "?"] += 1
    return counts


def count_resends_by_kind(nodes: Iterable[object]) -> Counter[str]:
    """Messages re-sent by the nodes' re-send timers, by kind (nodes with a ``resends`` mapping)."""
    counts: Counter[str] = Counter()
    for node in nodes:
        counts.update(getattr(node, "resends", {}))
    return counts


#: What each field of a verdict in audit.json means (written into audit.json beside the verdicts).
VERDICT_FIELDS = {
    "sid": "the subject's per-round id (hex of the first 16 bytes of her round key); not linked to her data",
    "accept": "true: her own audit found the release acceptable; false: she complains, for the reason given",
    "reason": "'ok', or why she complains (e.g. not_k_anonymous, not_included, permutation_distance_too_small, "
              "match_not_plausible)",
    "included": "whether her own confidential values are in the release",
    "permutation_distance": "d: how far (in ranks) the release record closest to hers is from her own values; "
                            "0 means an intruder who knows her values finds her record exactly; the round's "
                            "min_permutation_distance is the collector's promise",
    "plausible": "whether the match an intruder would make for her is plausible as a random match (the "
                 "maximum-knowledge intruder test at the round's alpha): true means the match proves nothing",
}


def privacy_label(outcome: RoundOutcome) -> dict[str, object]:
    """What the release may claim (`round_privacy_label`, the function the auditor recomputes it with)."""
    return round_privacy_label(outcome.manifest, outcome.group_sizes, (str(e["reason"]) for e in outcome.excluded),
                               outcome.completed)


def typed_manifest(entries: Iterable[tuple[str, str]]) -> dict[str, object]:
    """The signed manifest's text entries with the types of their `RoundConfig` fields (k an int, qi a
    list, ...); entries that are not config fields (method, protocol) stay text."""
    hints = typing.get_type_hints(RoundConfig)
    out: dict[str, object] = {}
    for key, text in entries:
        kind = hints.get(key)
        if kind is int:
            out[key] = int(text)
        elif kind is float:
            out[key] = float(text)
        elif key == "safepub_bins":
            out[key] = json.loads(text)
        elif typing.get_origin(kind) is tuple:
            out[key] = [name for name in text.split(",") if name]
        else:
            out[key] = text
    return out


#: The files of a round's output directory (`write_outputs`).
ROUND_OUTPUT_NAMES = ("release.csv", "manifest.json", "audit.json", "trace.jsonl", "report.json", TRANSCRIPT_NAME,
                      EVIDENCE_NAME, SECOND_TRANSCRIPT_NAME)
#: What an output directory may hold and still be replaced whole by a new round: its files, and the page
#: ``coutil report DIR`` writes into it by default (`coutil.round.html_report`), stale once the round is.
ROUND_REPLACEABLE_NAMES = (*ROUND_OUTPUT_NAMES, "report.html")


def write_outputs(report: RoundReport, events: Iterable[tuple[str, Event]], out_dir: Path,
                  transcript: Transcript | None = None,
                  evidence: Iterable[tuple[bytes, bytes] | None] | None = None,
                  equivocations: Iterable[tuple[bytes, bytes, bytes]] = (),
                  receipts: Iterable[tuple[bytes, bytes]] = (),
                  second_transcript: Transcript | None = None) -> None:
    """release.csv, manifest.json, audit.json, trace.jsonl, report.json and (when given) the signed
    ``transcript.json`` (`coutil.round.transcript`, what ``coutil verify`` checks) under ``out_dir``
    (and ``transcript.second.json``, a deviating collector's other transcript, `two_transcripts`);
    with the subjects' acknowledged verdicts (``evidence``: each subject's pair, or None) also
    ``evidence.json``, the pairs whose verdict the transcript lacks and the proofs of equivocation the
    subjects hold (``equivocations``, `SubjectNode.equivocation_evidence`) and their receipts (``receipts``,
    `SubjectNode.roster_receipt`, written once per distinct receipt; `coutil.round.evidence`).

    All or nothing: they are written into a temporary directory beside ``out_dir`` which replaces
    ``out_dir`` whole when they are complete. An existing ``out_dir`` holding anything but these
    files (and the ``report.html`` of ``coutil report``) is refused (`InputError`) rather than replaced.
    """
    with staged_directory(out_dir, replaceable=ROUND_REPLACEABLE_NAMES) as staging:
        _write_outputs(report, events, staging)
        if transcript is not None:
            write_transcript(staging / TRANSCRIPT_NAME, transcript)
            if second_transcript is not None:  # a collector's deviation (`two_transcripts`), for a second auditor
                write_transcript(staging / SECOND_TRANSCRIPT_NAME, second_transcript)
            if evidence is not None:
                write_evidence(staging / EVIDENCE_NAME, [*missing_from(transcript.verdicts, evidence),
                                                         *(EquivocationEvidence(*e) for e in equivocations),
                                                         *dict.fromkeys(RosterReceipt(*r) for r in receipts)])


def _write_outputs(report: RoundReport, events: Iterable[tuple[str, Event]], out_dir: Path) -> None:
    outcome = report.outcome
    write_csv(out_dir / "release.csv", outcome.columns,
              ([format_number(float(v)) for v in row] for row in outcome.rows))
    write_text_atomic(out_dir / "manifest.json", json.dumps({
        "round_id": outcome.round_id,
        "manifest": typed_manifest(outcome.manifest.items()),
        "group_sizes": list(outcome.group_sizes),
        # What `coutil audit --record-values --manifest` needs to re-run a subject's audit exactly:
        # the released groups' labels and the digest the subject seeded her random records with.
        **manifest_fields(bytes.fromhex(outcome.round_id), outcome.columns, outcome.group_ids,
                          outcome.group_sizes, outcome.rows),
        # The release lists the groups one after the other, not the subjects' data order: compare it
        # with an original data set through a record mapping, never row by row.
        "row_order": "group",
        "privacy": privacy_label(outcome),
    }, indent=2) + "\n")
    distances = Counter(int(str(v["permutation_distance"])) for v in outcome.verdicts if "permutation_distance" in v)
    present = {key for verdict in outcome.verdicts for key in verdict}
    audit = {
        "fields": {key: text for key, text in VERDICT_FIELDS.items() if key in present},
        "verdicts": outcome.verdicts,
        "excluded": outcome.excluded,
        "accepted": sum(1 for v in outcome.verdicts if v["accept"]),
        "reasons": dict(Counter(str(v["reason"]) for v in outcome.verdicts)),
    }
    if distances:
        audit["permutation_distance_distribution"] = {str(d): c for d, c in sorted(distances.items())}
    write_text_atomic(out_dir / "audit.json", json.dumps(audit, indent=2) + "\n")
    with atomic_write(out_dir / "trace.jsonl") as trace:
        for node_id, event in events:
            trace.write(json.dumps({"node": node_id, **event.as_dict()}, default=str) + "\n")
    write_text_atomic(out_dir / "report.json", json.dumps(report.summary(), indent=2) + "\n")
