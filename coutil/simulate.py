"""Run one protocol round in memory: a collector and one subject per record on the virtual-time bus.

`run_memory_round` is the single round runner shared by the tests, ``simulations/swarm.py`` and
``coutil simulate``. Everything random is derived from one integer seed (node keys, the collector's
choices, the network model, which subjects vanish), so a run is reproducible bit for bit.

A simulation file (TOML) holds the ``[round]`` table of `RoundConfig` plus optional tables::

    [data]                 # either a CSV file (relative paths: relative to the TOML file) ...
    csv = "data.csv"
    rows = 500             # optional: the first N records only
    # ... or synthetic records: subjects = 200
    [network]              # NetworkModel fields: latency, jitter, loss, duplicate
    loss = 0.1
    [faults]               # FaultPlan fields
    vanish_fraction = 0.05

Outputs (with ``out_dir``) never contain a confidential value outside ``release.csv``: the trace
holds only event codes, counts and ids.
"""

from __future__ import annotations

import json
import math
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from coutil.errors import InputError
from coutil.net.memory import DEFAULT_MAX_EVENTS, MemoryBus, NetworkModel, Traffic
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Event, SeededRandom
from coutil.sdc.dataset import Dataset, format_number, load_csv, write_csv

#: Subject states that count as "past" each collector phase (for progress reporting).
_PAST_PHASE: dict[str, frozenset[str]] = {
    "registration": frozenset({"registered", "sharing", "await_release", "verdict_sent", "done", "excluded"}),
    "sharing": frozenset({"await_release", "verdict_sent", "done", "excluded"}),
    "auditing": frozenset({"done", "excluded"}),
}

#: How many bus events between two progress callbacks.
PROGRESS_EVERY = 2000

ProgressCallback = Callable[[str, float], None]


@dataclass(frozen=True)
class FaultPlan:
    """Round-level fault injection: a fraction of subjects vanish shortly after they start sharing."""

    #: Fraction of subjects (chosen with the seed) that vanish for good.
    vanish_fraction: float = 0.0
    #: The subject state whose entry starts a vanishing subject's clock ("sharing": mid-shuffle).
    vanish_state: str = "sharing"
    #: She vanishes at a uniform time in ``[entry, entry + vanish_window)``.
    vanish_window: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.vanish_fraction < 1.0:
            raise InputError(f"faults: vanish_fraction must be in [0, 1), got {self.vanish_fraction!r}")
        if not math.isfinite(self.vanish_window) or self.vanish_window < 0:
            raise InputError("faults: vanish_window must be a non-negative number of seconds")


@dataclass
class _PhaseClock:
    """The collector's current phase and the wall-clock time it was entered."""

    name: str
    since: float


@dataclass
class RoundReport:
    """Everything a simulated round produced, beside the collector's `RoundOutcome`."""

    outcome: Any  # coutil.protocol.collector.RoundOutcome
    subjects: int
    stop_reason: str
    virtual_time: float
    wall_times: dict[str, float]
    traffic: dict[str, dict[str, float]]
    rejections: dict[str, int]
    #: Bus events processed (starts, deliveries, timers).
    events: int
    dropped: dict[str, int]
    vanished: list[int]
    subject_states: dict[str, int]
    #: Subject ids (sids) in dataset order; row i of the dataset is subject ``sids[i]``.
    sids: list[str] = field(default_factory=list)
    #: Events the nodes reported, by kind (collector and subjects together).
    node_events: dict[str, int] = field(default_factory=dict)
    bus: MemoryBus | None = None
    collector: Any = None

    @property
    def completed(self) -> bool:
        return bool(self.outcome.completed)

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary (no confidential values)."""
        out = self.outcome
        accepted = sum(1 for v in out.verdicts if v["accept"])
        return {
            "completed": bool(out.completed),
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


def traffic_stats(traffic: list[Traffic]) -> dict[str, dict[str, float]]:
    """Mean and max per subject of messages and bytes, with and without the bulletin messages."""
    if not traffic:
        return {}
    columns = {
        "sent_messages": [t.sent_messages for t in traffic],
        "sent_bytes": [t.sent_bytes for t in traffic],
        "received_messages": [t.received_messages for t in traffic],
        "received_bytes": [t.received_bytes for t in traffic],
        "received_messages_excl_bulletin": [t.received_messages - t.bulletin_received_messages for t in traffic],
        "received_bytes_excl_bulletin": [t.received_bytes - t.bulletin_received_bytes for t in traffic],
        "total_messages": [t.sent_messages + t.received_messages for t in traffic],
        "total_bytes": [t.sent_bytes + t.received_bytes for t in traffic],
        "total_bytes_excl_bulletin": [t.sent_bytes + t.received_bytes - t.bulletin_received_bytes for t in traffic],
    }
    return {
        name: {"mean": float(np.mean(values)), "max": float(np.max(values))} for name, values in columns.items()
    }


def vanishing_subjects(n: int, fraction: float, seed: int) -> list[int]:
    """The rows of the subjects who vanish (a function of the seed)."""
    rng = SeededRandom(seed).fork("faults")
    count = round(fraction * n)
    chosen: set[int] = set()
    while len(chosen) < count:
        chosen.add(rng.below(n))
    return sorted(chosen)


def vanish_time(seed: int, node_id: str, entered: float, faults: FaultPlan) -> float:
    """When a vanishing subject who entered ``faults.vanish_state`` at ``entered`` stops: uniform in
    the vanish window, drawn from her own stream (the same whichever process hosts her)."""
    draw = SeededRandom(seed).fork("vanish-times").fork(node_id).below(10**6)
    return entered + faults.vanish_window * draw / 10**6


@dataclass
class RoundNodes:
    """One collector and one subject node per record, all keys derived from one seed."""

    collector: Any  # coutil.protocol.collector.CollectorNode
    subjects: list[Any]  # coutil.protocol.subject.SubjectNode, in dataset order
    #: Node ids in dataset order (the subject's sid, suffixed when two sids collide).
    node_ids: list[str]


def build_round_nodes(data: Dataset, config: RoundConfig, *, seed: int, fresh_round: bool = False) -> RoundNodes:
    """The nodes of one round over ``data`` (shared by the in-memory and the MQTT runners).

    Every key derives from ``seed``. ``fresh_round`` draws the collector's key and the round id from
    the operating system instead: a real broker keeps the retained announce and bulletins of an
    earlier round, which a seeded collector would have signed with the very same key.
    """
    from coutil.protocol.subject_audit import SharedCaches

    # One decode cache for every node of the process: each message is verified once, not once per receiver.
    caches = SharedCaches()
    collector = build_collector(config, seed=seed, fresh_round=fresh_round, caches=caches)
    subjects, node_ids = build_subject_nodes(data, config, collector.public_key, seed=seed, rows=range(data.n),
                                             caches=caches)
    return RoundNodes(collector, subjects, node_ids)


def build_collector(config: RoundConfig, *, seed: int, fresh_round: bool = False, caches: Any = None) -> Any:
    """The round's collector (see `build_round_nodes` for ``seed`` and ``fresh_round``)."""
    # Imported here: the protocol nodes pull in the crypto stack, which `coutil.simulate`'s
    # configuration helpers (used by the CLI to validate options) do not need.
    from coutil.protocol import crypto
    from coutil.protocol.collector import CollectorNode

    root = SeededRandom(seed)
    collector_rng = root.fork("collector")
    if fresh_round:
        from coutil.protocol.node import SystemRandom

        identity = crypto.SigningKey.generate(SystemRandom())
        round_id = SystemRandom().bytes(16)
    else:
        identity = crypto.SigningKey.generate(collector_rng.fork("identity"))
        round_id = root.fork("round").bytes(16)
    return CollectorNode(config, identity=identity, rng=collector_rng, round_id=round_id,
                         decode_cache=None if caches is None else caches.decode_cache)


def build_subject_nodes(
    data: Dataset, config: RoundConfig, collector_key: bytes, *, seed: int, rows: Iterable[int], caches: Any = None,
) -> tuple[list[Any], list[str]]:
    """Subject nodes for the given rows of ``data``, with their node ids (the sid, suffixed when two
    collide). A row's keys depend only on ``seed`` and the row number, so any process can build any
    subject: a worker process hosting a slice of them gets the very subjects a single process would."""
    from coutil.protocol.subject import SubjectNode
    from coutil.protocol.subject_audit import SharedCaches

    caches = caches if caches is not None else SharedCaches()
    qi_values = data.select(list(config.qi)).values
    conf_values = data.select(list(config.confidential)).values
    subject_rng = SeededRandom(seed).fork("subjects")
    subjects: list[Any] = []
    node_ids: list[str] = []
    seen: set[str] = set()
    for i in rows:
        subject = SubjectNode(collector_key=collector_key, qi=qi_values[i], confidential=conf_values[i],
                              rng=subject_rng.fork(str(i)), caches=caches, retry_interval=config.retry_interval)
        node_id = subject.sid if subject.sid not in seen else f"{subject.sid}-{i}"
        seen.add(node_id)
        subjects.append(subject)
        node_ids.append(node_id)
    return subjects, node_ids


def run_memory_round(
    data: Dataset,
    config: RoundConfig,
    *,
    seed: int,
    network: NetworkModel | None = None,
    faults: FaultPlan | None = None,
    out_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    max_virtual_time: float | None = None,
    record_publications: bool = False,
    keep_nodes: bool = False,
    max_events: int = DEFAULT_MAX_EVENTS,
    shards: int = 1,
) -> RoundReport:
    """Run one round with one subject per record of ``data`` and return its report.

    ``record_publications`` keeps the bus log (who published which bytes when), which is what a
    curious collector observes; ``keep_nodes`` keeps the bus and the collector in the report.
    ``shards`` > 1 spreads the nodes over that many processes (`coutil.net.shards`). The
    run stops when the collector is finished, at ``max_virtual_time`` (default: both windows plus
    200 step timeouts) or after ``max_events`` bus events.
    """
    network = network if network is not None else NetworkModel()
    faults = faults if faults is not None else FaultPlan()
    if shards > 1:
        if record_publications or keep_nodes:
            raise ValueError("the bus log and the nodes are kept only when the round runs in one process")
        from coutil.net.shards import run_sharded_round

        report: RoundReport = run_sharded_round(data, config, seed=seed, shards=shards, network=network,
                                                faults=faults, out_dir=out_dir, progress=progress,
                                                max_virtual_time=max_virtual_time)
        return report
    wall: dict[str, float] = {}
    t0 = time.perf_counter()
    built = build_round_nodes(data, config, seed=seed)
    collector = built.collector
    bus = MemoryBus(seed=seed, network=network, record_publications=record_publications,
                    record_events=out_dir is not None)
    bus.add_node("collector", collector)
    sids = built.node_ids
    for node_id, subject in zip(sids, built.subjects, strict=True):
        bus.add_node(node_id, subject)
    vanishing = vanishing_subjects(data.n, faults.vanish_fraction, seed)
    vanish_ids = {sids[i] for i in vanishing}
    wall["setup"] = time.perf_counter() - t0

    states: Counter[str] = Counter({"await_announce": data.n})
    phase = _PhaseClock("created", time.perf_counter())
    previous_state: dict[str, str] = {}
    event_counts: Counter[str] = Counter()

    def on_event(node_id: str, event: Event) -> None:
        event_counts[event.kind] += 1
        if node_id == "collector":
            if event.kind == "phase":
                now = time.perf_counter()
                wall[phase.name] = wall.get(phase.name, 0.0) + now - phase.since
                phase.name, phase.since = str(dict(event.data).get("phase")), now
            return
        if event.kind == "state":
            new = str(dict(event.data).get("state"))
            # Counted by transition: every subject starts in await_announce.
            previous = previous_state.get(node_id, "await_announce")
            states[previous] -= 1
            states[new] += 1
            previous_state[node_id] = new
            if node_id in vanish_ids and new == faults.vanish_state:
                bus.vanish(node_id, vanish_time(seed, node_id, event.at, faults))

    bus.event_sink = on_event
    cap = max_virtual_time if max_virtual_time is not None else (
        config.register_window + config.audit_window + 200 * config.step_timeout
    )
    stop_reason = "time"
    while True:
        stop_reason = bus.run_until(until=cap, predicate=lambda: collector.finished, max_events=PROGRESS_EVERY)
        if progress is not None:
            past = _PAST_PHASE.get(phase.name, frozenset())
            progress(phase.name, sum(states[s] for s in past) / max(data.n, 1))
        if stop_reason != "max_events":
            break
        if bus.processed >= max_events:
            break  # the safety cap: a node re-arming a timer in the past forever
    end = time.perf_counter()
    wall[phase.name] = wall.get(phase.name, 0.0) + end - phase.since
    wall.pop("created", None)
    wall["run"] = end - t0 - wall["setup"]

    outcome = collector.outcome()
    rejections: Counter[str] = Counter()
    for node_id in bus.node_ids:
        for rejection in getattr(bus.node(node_id), "rejections", ()):
            rejections[rejection.reason] += 1
    report = RoundReport(
        outcome=outcome,
        subjects=data.n,
        stop_reason=stop_reason,
        virtual_time=bus.now,
        wall_times=wall,
        traffic=traffic_stats([bus.traffic[s] for s in sids]),
        rejections=dict(rejections),
        events=bus.processed,
        node_events=dict(event_counts),
        dropped=dict(bus.dropped),
        vanished=vanishing,
        subject_states={k: v for k, v in states.items() if v},
        sids=sids,
        bus=bus if keep_nodes else None,
        collector=collector if keep_nodes else None,
    )
    if out_dir is not None:
        t_out = time.perf_counter()
        write_outputs(report, bus.events or (), Path(out_dir))
        wall["outputs"] = time.perf_counter() - t_out
    return report


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
    distances = Counter(int(v["permutation_distance"]) for v in outcome.verdicts)
    audit = {
        "verdicts": outcome.verdicts,
        "excluded": outcome.excluded,
        "accepted": sum(1 for v in outcome.verdicts if v["accept"]),
        "reasons": dict(Counter(str(v["reason"]) for v in outcome.verdicts)),
        "permutation_distance_distribution": {str(d): c for d, c in sorted(distances.items())},
    }
    (out_dir / "audit.json").write_text(json.dumps(audit, indent=2) + "\n")
    with (out_dir / "trace.jsonl").open("w") as trace:
        for node_id, event in events:
            trace.write(json.dumps({"node": node_id, **event.as_dict()}, default=str) + "\n")
    (out_dir / "report.json").write_text(json.dumps(report.summary(), indent=2) + "\n")


# ---------------------------------------------------------------------- simulation files
@dataclass(frozen=True)
class Simulation:
    """A simulation file: round parameters, data source, network model and faults."""

    config: RoundConfig
    network: NetworkModel
    faults: FaultPlan
    csv: Path | None = None
    rows: int | None = None
    subjects: int | None = None

    def dataset(self, seed: int) -> Dataset:
        """The records to simulate: the CSV's (first ``rows``) or synthetic ones drawn with ``seed``."""
        if self.csv is not None:
            data = load_csv(self.csv, list(self.config.columns))
            if self.rows is not None:
                data = data.with_values(data.values[: self.rows])
            return data
        assert self.subjects is not None
        return synthetic_dataset(self.subjects, self.config, seed)


def _dataclass_from(cls: Any, table: Mapping[str, Any], where: str) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(table) - known)
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    try:
        return cls(**table)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{where}: {exc}") from None


def load_simulation(path: str | Path, *, data_override: str | Path | None = None,
                    subjects_override: int | None = None) -> Simulation:
    """Parse a simulation TOML file (see the module docstring); errors are `InputError`s."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such simulation file") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: invalid TOML ({exc})") from None
    unknown = sorted(set(doc) - {"round", "data", "network", "faults"})
    if unknown:
        raise InputError(f"{path}: unknown table(s) {', '.join(unknown)}")
    if not isinstance(doc.get("round"), dict):
        raise InputError(f"{path}: a [round] table is required")
    try:
        config = RoundConfig.from_mapping(doc["round"])
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None
    network = _dataclass_from(NetworkModel, doc.get("network", {}), f"{path} [network]")
    faults = _dataclass_from(FaultPlan, doc.get("faults", {}), f"{path} [faults]")
    data_table = dict(doc.get("data", {}))
    unknown = sorted(set(data_table) - {"csv", "rows", "subjects"})
    if unknown:
        raise InputError(f"{path} [data]: unknown key(s) {', '.join(unknown)}")
    csv: Path | None = None
    if data_override is not None:
        csv = Path(data_override)
    elif "csv" in data_table:
        csv = Path(str(data_table["csv"]))
        csv = csv if csv.is_absolute() else p.parent / csv
    rows = data_table.get("rows")
    subjects = subjects_override if subjects_override is not None else data_table.get("subjects")
    if csv is not None and subjects_override is not None:
        rows = subjects_override
    for name, value in (("rows", rows), ("subjects", subjects)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise InputError(f"{path} [data]: {name} must be a positive integer")
    if csv is None and subjects is None:
        raise InputError(f"{path} [data]: give csv = \"file.csv\" or subjects = N (synthetic records)")
    return Simulation(config, network, faults, csv, rows, subjects if csv is None else None)


def synthetic_dataset(n: int, config: RoundConfig, seed: int) -> Dataset:
    """``n`` synthetic records: correlated QIs (age-like scales) and confidential values that depend on them.

    Values are rounded to cents, as survey answers would be; the correlation makes the released
    groups' confidential values informative, like real microdata.
    """
    rng = np.random.default_rng([seed, 0x5EED])
    latent = rng.normal(size=(n, 1))
    qi = 40.0 + 12.0 * (0.7 * latent + 0.7 * rng.normal(size=(n, len(config.qi))))
    conf = 30000.0 * np.exp(0.4 * latent + 0.5 * rng.normal(size=(n, len(config.confidential))))
    values = np.round(np.hstack([qi, conf]), 2).astype(np.float64)
    return Dataset(config.columns, values, f"<synthetic n={n} seed={seed}>")
