"""What a round produced, whichever driver ran it: `RoundReport`, traffic statistics, output files.

Outputs (`write_outputs`) never contain a confidential value outside ``release.csv``: the trace
holds only event codes, counts and ids (see `coutil.protocol.events`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from coutil.protocol.collector import RoundOutcome
from coutil.protocol.events import Event
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
            "subject_states": dict(sorted(self.subject_states.items())),
        }


def count_rejections(nodes: Iterable[object]) -> Counter[str]:
    """Rejections by reason over nodes that record them (a ``rejections`` list of `Rejection`)."""
    counts: Counter[str] = Counter()
    for node in nodes:
        for rejection in getattr(node, "rejections", ()):
            counts[rejection.reason] += 1
    return counts


def write_outputs(report: RoundReport, events: Iterable[tuple[str, Event]], out_dir: Path) -> None:
    """release.csv, manifest.json, audit.json, trace.jsonl and report.json under ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    outcome = report.outcome
    write_csv(out_dir / "release.csv", outcome.columns,
              ([format_number(float(v)) for v in row] for row in outcome.rows))
    manifest = dict(outcome.manifest)
    (out_dir / "manifest.json").write_text(json.dumps(
        {"round_id": outcome.round_id, "manifest": manifest, "group_sizes": list(outcome.group_sizes)},
        indent=2) + "\n")
    # Protocol v2: a verdict is accept or a complaint's reason, nothing else (d stays with the subject).
    audit = {
        "verdicts": outcome.verdicts,
        "excluded": outcome.excluded,
        "accepted": sum(1 for v in outcome.verdicts if v["accept"]),
        "reasons": dict(Counter(str(v["reason"]) for v in outcome.verdicts)),
    }
    (out_dir / "audit.json").write_text(json.dumps(audit, indent=2) + "\n")
    with (out_dir / "trace.jsonl").open("w") as trace:
        for node_id, event in events:
            trace.write(json.dumps({"node": node_id, **event.as_dict()}, default=str) + "\n")
    (out_dir / "report.json").write_text(json.dumps(report.summary(), indent=2) + "\n")
