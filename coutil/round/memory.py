"""The in-memory driver: one round on the virtual-time bus, a collector and one subject per record.

`run_memory_round` is the round runner of the tests, ``simulations/swarm.py``, ``coutil simulate``
and the co-utility experiments. Everything random is derived from one integer seed (node keys, the
collector's choices, the network model, which subjects vanish), so a run is reproducible bit for
bit. One round runs in one process; many rounds run in parallel as a sweep, and one round at scale
runs on the real transport (`coutil.round.mqtt`, worker processes against a broker).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, Unpack

from coutil.adversary import broker_strategy
from coutil.adversary.broker import BrokerStrategy, EarlierRound
from coutil.adversary.collector import arrival_delay
from coutil.adversary.outcome import add_verdict_evidence, adversary_section
from coutil.adversary.plan import AdversaryPlan
from coutil.errors import InputError
from coutil.net.memory import DEFAULT_MAX_EVENTS, BusFaults, MemoryBus, NetworkModel, Partition
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import SubjectStateChanged
from coutil.protocol.states import SubjectState
from coutil.protocol.subject import SubjectNode
from coutil.round.nodes import build_round_nodes, distinct_receipts
from coutil.round.report import (
    RoundReport,
    count_duplicates_by_kind,
    count_rejections,
    count_resends_by_kind,
    traffic_stats,
    write_outputs,
)
from coutil.round.simulation import FaultPlan, Outage, vanish_time, vanishing_subjects
from coutil.round.tracker import ProgressCallback, RoundTracker
from coutil.round.transcript import TranscriptRecorder
from coutil.sdc.dataset import Dataset

#: How many bus events between two progress callbacks.
PROGRESS_EVERY = 2000

COLLECTOR_ID = "collector"


@dataclass
class MemoryRound:
    """A finished in-memory round with its bus and nodes, for tests and analyses that look inside
    (what a curious collector saw on the bus, a subject's own audit)."""

    report: RoundReport
    bus: MemoryBus
    collector: CollectorNode
    #: In dataset order, beside ``report.sids``.
    subjects: list[SubjectNode]

    def subject(self, row: int) -> SubjectNode:
        return self.subjects[row]


class SimulationOptions(TypedDict, total=False):
    """The options of an in-memory round (all optional)."""

    #: The simulated network (default: 50 ms latency, 20 ms jitter, no loss).
    network: NetworkModel | None
    #: Subjects who vanish (default: none).
    faults: FaultPlan | None
    #: Transport outages (partitions of everyone, the subjects or the collector; default: none).
    outages: Sequence[Outage]
    #: Write release.csv, manifest.json, audit.json, trace.jsonl, report.json and transcript.json here.
    out_dir: Path | None
    #: Put the registrations (every subject's exact QIs) into transcript.json too (default: left out).
    transcript_registrations: bool
    progress: ProgressCallback | None
    #: Stop at this virtual time (default: both windows plus 200 step timeouts).
    max_virtual_time: float | None
    #: Keep the bus log (who published which bytes when): what a curious collector observes.
    record_publications: bool
    #: Stop after this many bus events (a safety cap).
    max_events: int
    #: Deviating nodes (`coutil.adversary`); the report then has an ``adversary`` section.
    adversary: AdversaryPlan | None
    #: Derive the collector's long-term key from this seed instead (its other round: same key, another round id).
    identity_seed: int | None


def settle_verdicts(bus: MemoryBus, subjects: Sequence[SubjectNode],
                    config: RoundConfig) -> list[tuple[str, tuple[bytes, bytes] | None]]:
    """After the round: a verdict_ack may still be on its way when the collector finishes; the subjects
    waiting for one get one re-send interval to receive it, and then hold their evidence that the
    collector recorded their verdict (`SubjectNode.verdict_evidence`, `coutil.round.evidence`). Run once
    whatever a driver reports was measured: nothing of it moves, only the trace gets their last state
    changes. Returns each subject's sid and evidence, in the order of ``subjects``."""
    bus.run_until(until=bus.now + config.retry_interval,
                  predicate=lambda: all(s.verdict is None or s.verdict_evidence() is not None for s in subjects))
    return [(s.sid, s.verdict_evidence()) for s in subjects]


def run_memory_round(data: Dataset, config: RoundConfig, *, seed: int,
                     **options: Unpack[SimulationOptions]) -> RoundReport:
    """Run one round with one subject per record of ``data`` and return its report (see `simulate_round`)."""
    return simulate_round(data, config, seed=seed, **options).report


def simulate_round(data: Dataset, config: RoundConfig, *, seed: int,
                   **options: Unpack[SimulationOptions]) -> MemoryRound:
    """Run one round in memory (`SimulationOptions`) and keep its bus and nodes.

    The run stops when the collector is finished, at ``max_virtual_time`` or after ``max_events``
    bus events.
    """
    network = options.get("network")
    faults = options.get("faults")
    out_dir = options.get("out_dir")
    progress = options.get("progress")
    max_virtual_time = options.get("max_virtual_time")
    record_publications = options.get("record_publications", False)
    max_events = options.get("max_events", DEFAULT_MAX_EVENTS)
    network = network if network is not None else NetworkModel()
    faults = faults if faults is not None else FaultPlan()
    t0 = time.perf_counter()
    adversary = options.get("adversary")
    built = build_round_nodes(data, config, seed=seed, adversary=adversary, identity_seed=options.get("identity_seed"))
    collector = built.collector
    sids = built.node_ids
    # A deviating broker; one that replays an earlier round gets it recorded, and this round starts after it.
    broker, start = _build_broker(adversary, data, config, seed, network, collector.round_id, sids)
    partitions = tuple(
        Partition(frozenset(([COLLECTOR_ID] if o.who != "subjects" else []) + (sids if o.who != "collector" else [])),
                  start + o.start, start + o.end)
        for o in options.get("outages", ())
    )
    bus = MemoryBus(seed=seed, network=network, faults=BusFaults(partitions=partitions),
                    record_publications=record_publications or broker is not None, record_events=False, broker=broker)
    # With outputs, the driver records the signed transcript (transcript.json) from the collector's outputs.
    recorder = TranscriptRecorder(collector) if out_dir is not None else None
    bus.add_node(COLLECTOR_ID, recorder if recorder is not None else collector, start_at=start)
    for node_id, subject in zip(sids, built.subjects, strict=True):
        bus.add_node(node_id, subject, start_at=start + arrival_delay(collector, subject.public_key))
    vanishing = vanishing_subjects(data.n, faults.vanish_fraction, seed)
    vanish_ids = {sids[i] for i in vanishing}
    setup = time.perf_counter() - t0

    tracker = RoundTracker(data.n, COLLECTOR_ID, keep_events=out_dir is not None or adversary is not None)
    vanish_state = SubjectState(faults.vanish_state)

    def vanish_on_entry(node_id: str, state: SubjectState, event: SubjectStateChanged) -> None:
        if state == vanish_state and node_id in vanish_ids:
            bus.vanish(node_id, vanish_time(seed, node_id, event.at, faults))

    if vanish_ids:
        tracker.on_subject_state(vanish_on_entry)
    bus.event_sink = tracker.on_event
    cap = start + (max_virtual_time if max_virtual_time is not None else (
        config.register_window + config.audit_window + 200 * config.step_timeout
    ))
    stop_reason = "time"
    while True:
        stop_reason = bus.run_until(until=cap, predicate=lambda: collector.finished, max_events=PROGRESS_EVERY)
        tracker.report_progress(progress)
        if stop_reason != "max_events":
            break
        if bus.processed >= max_events:
            break  # the safety cap: a node re-arming a timer in the past forever
    wall = tracker.close()
    wall["setup"] = setup
    wall["run"] = time.perf_counter() - t0 - setup

    traffic = [bus.traffic[s] for s in sids]
    report = RoundReport(
        outcome=collector.outcome(),
        subjects=data.n,
        stop_reason="finished" if stop_reason == "predicate" else stop_reason,
        virtual_time=bus.now - start,
        wall_times=wall,
        traffic=traffic_stats(traffic, [(t.bulletin_received_messages, t.bulletin_received_bytes) for t in traffic]),
        rejections=dict(count_rejections([collector, *built.subjects])),
        events=bus.processed,
        node_events=dict(tracker.kinds),
        duplicates_by_kind=dict(count_duplicates_by_kind([collector, *built.subjects])),
        resends_by_kind=dict(count_resends_by_kind([collector, *built.subjects])),
        dropped=dict(bus.dropped),
        vanished=vanishing,
        subject_states=tracker.subject_states(),
        sids=sids,
    )
    if adversary is not None:
        report.adversary = adversary_section(
            adversary, collector=collector, node_ids=sids, deviants=built.deviants, events=tracker.events,
            qi=data.select(list(config.qi)).values, confidential=data.select(list(config.confidential)).values,
            subjects=built.subjects, broker=broker, publications=bus.publications)
    if stop_reason == "predicate" and (adversary is not None or out_dir is not None):
        evidence = settle_verdicts(bus, built.subjects, config)
        if report.adversary is not None:
            add_verdict_evidence(report.adversary, collector, evidence, built.deviants)
    if out_dir is not None:
        t_out = time.perf_counter()
        transcript = recorder.transcript(include_registrations=options.get("transcript_registrations", False)) \
            if recorder is not None else None
        write_outputs(report, tracker.events, Path(out_dir), transcript,
                      evidence=[subject.verdict_evidence() for subject in built.subjects],
                      equivocations=[e for s in built.subjects if (e := s.equivocation_evidence()) is not None],
                      receipts=[r for _, r in distinct_receipts(built.subjects)],
                      second_transcript=recorder.second_transcript() if recorder is not None else None)
        wall["outputs"] = time.perf_counter() - t_out
    return MemoryRound(report, bus, collector, built.subjects)


def _build_broker(adversary: AdversaryPlan | None, data: Dataset, config: RoundConfig, seed: int,
                  network: NetworkModel, round_id: bytes, sids: Sequence[str]) -> tuple[BrokerStrategy | None, float]:
    """The plan's broker strategy, and when this round starts: after the earlier round the strategy
    replays, if any (its deadlines are then in the past, as a real earlier round's are)."""
    if adversary is None or adversary.broker is None:
        return None, 0.0
    cls = broker_strategy(adversary.broker)
    params = dict(adversary.broker_params)
    victim: str | None = None
    row = adversary.broker_victim_row()
    if row is not None:
        if row >= data.n:
            raise InputError(f"[adversary] broker {adversary.broker}: victim row {row} is not in the data set "
                             f"({data.n} subjects, rows 0..{data.n - 1})")
        victim = sids[row]
    earlier: EarlierRound | None = None
    start = 0.0
    if cls.needs_earlier_round(params):
        offset = params.get("earlier_offset", cls.PARAMS.get("earlier_offset", 1))
        assert isinstance(offset, int)
        # The collector's previous round: the same data and long-term key, another round id and subjects' keys.
        old = simulate_round(data, config, seed=seed + offset, identity_seed=seed, network=network,
                             record_publications=True)
        assert old.bus.publications is not None
        released = old.collector.outcome().rows[:, len(config.qi):]
        earlier = EarlierRound(old.collector.round_id, tuple(old.report.sids), tuple(old.bus.publications),
                               tuple(tuple(float(v) for v in row) for row in released))
        start = old.bus.now + 1.0
    strategy: BrokerStrategy = cls(params, seed=seed, round_id=round_id, node_ids=sids, victim=victim,
                                   earlier=earlier)
    return strategy, start
