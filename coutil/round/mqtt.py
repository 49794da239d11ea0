"""The MQTT driver: one whole round over a broker, a collector and N subjects on this machine.

This is what `coutil run` does. The nodes are the very same sans-IO state machines the in-memory
driver runs (`coutil.round.nodes`); only the transport differs. Without a broker URL an embedded
amqtt broker is started on 127.0.0.1 (a free port), in a child process of its own
(`coutil.net.broker_process`), for the duration of the round, so nothing needs installing; its
multiplexed connections then subscribe to covering filters (`DriverOptions.coarse_subscriptions`).
The collector has its own connection; the subjects share one multiplexed connection by default
(`coutil.net.hosting`), or get one each, in this process or in worker processes
(`coutil.round.workers`). Outputs are those of the in-memory driver (`coutil.round.report`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import TypedDict, Unpack

from coutil.adversary.outcome import add_equivocation_proofs, add_verdict_evidence, adversary_section
from coutil.adversary.plan import AdversaryPlan
from coutil.errors import InputError
from coutil.net.broker_drops import BrokerDropCounter
from coutil.net.broker_process import BrokerProcess
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, client_id_of, parse_broker_url
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SERIAL_POOL, Node
from coutil.protocol.subject import SubjectNode
from coutil.round.heap import long_lived_heap
from coutil.round.nodes import build_collector, build_round_nodes, distinct_receipts
from coutil.round.parallel import PROCESS_POOL_FROM, ProcessPool, signature_prechecker
from coutil.round.report import (
    RoundReport,
    count_duplicates_by_kind,
    count_rejections,
    count_resends_by_kind,
    traffic_stats,
    write_outputs,
)
from coutil.round.tracker import ProgressCallback, RoundTracker
from coutil.round.transcript import TranscriptRecorder
from coutil.round.workers import REPORT_GRACE_SECONDS, SubjectSlice, WorkerPool, split_rows_by_qi
from coutil.sdc.dataset import Dataset


class MqttRoundOptions(TypedDict, total=False):
    """The options of a round over MQTT (all optional)."""

    #: The broker (default: an embedded amqtt broker on 127.0.0.1, in a child process).
    broker: str | BrokerAddress | None
    #: Give up after this many seconds (default: both windows plus 60 step timeouts).
    timeout: float | None
    #: Write release.csv, manifest.json, audit.json, trace.jsonl, report.json and transcript.json here.
    out_dir: Path | None
    #: Put the registrations (every subject's exact QIs) into transcript.json too (default: left out).
    transcript_registrations: bool
    progress: ProgressCallback | None
    options: DriverOptions | None
    #: The subjects share one multiplexed MQTT connection (the collector has its own); False gives
    #: every subject her own connection, as deployed behind a per-subject ACL. Default True.
    shared_connection: bool
    #: Host the subjects in that many worker processes (`coutil.round.workers`), each multiplexing
    #: its slice over one connection; 0 (the default) keeps them in this process.
    workers: int
    #: Deviating nodes (`coutil.adversary`); the report then has an ``adversary`` section.
    adversary: AdversaryPlan | None


async def run_mqtt_round_async(data: Dataset, config: RoundConfig, *, seed: int,
                               **kwargs: Unpack[MqttRoundOptions]) -> tuple[RoundReport, HostStats]:
    """Run one round over a broker (`MqttRoundOptions`); see the module docstring."""
    broker = kwargs.get("broker")
    timeout = kwargs.get("timeout")
    out_dir = kwargs.get("out_dir")
    progress = kwargs.get("progress")
    options = kwargs.get("options")
    shared_connection = kwargs.get("shared_connection", True)
    workers = kwargs.get("workers", 0)
    adversary = kwargs.get("adversary")
    if adversary is not None and adversary.broker is not None:
        raise InputError(f"[adversary] broker = {adversary.broker!r} needs the in-memory bus (coutil simulate): "
                         "a round over MQTT runs on a real broker")
    t0 = time.perf_counter()
    # A fresh collector key and round id: a broker keeps the retained bulletins of earlier rounds.
    # Spare cores open the groups' records at the end of sharing, when the subjects wait (`ProcessPool`);
    # a small round opens them in a fraction of the second the pool's processes take to start.
    opener = ProcessPool() if data.n >= PROCESS_POOL_FROM else None
    pool_or_serial = opener if opener is not None else SERIAL_POOL
    if workers > 0:
        collector = build_collector(config, seed=seed, fresh_round=True, adversary=adversary, data=data,
                                    pool=pool_or_serial)
        subjects: list[SubjectNode] = []
        node_ids: list[str] = []
    else:
        built = build_round_nodes(data, config, seed=seed, fresh_round=True, adversary=adversary,
                                  pool=pool_or_serial)
        collector, subjects, node_ids = built.collector, built.subjects, built.node_ids
    tracker = RoundTracker(data.n, collector.client_id, keep_events=out_dir is not None or adversary is not None)
    setup = time.perf_counter() - t0
    limit = timeout if timeout is not None else (
        config.register_window + config.audit_window + 60 * config.step_timeout
    )
    # With outputs, the driver records the signed transcript (transcript.json) from the collector's outputs.
    recorder = TranscriptRecorder(collector) if out_dir is not None else None
    collector_node: Node = recorder if recorder is not None else collector
    nodes: list[Node | list[Node]] = [collector_node]
    if shared_connection:
        nodes.append(list(subjects))
    else:
        nodes.extend(subjects)
    # The same processes verify the signatures of the collector's bursts (registrations, verdicts) ahead of it.
    checks = {} if opener is None else {client_id_of(collector_node): signature_prechecker(opener, collector)}
    pool: WorkerPool | None = None

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.2)
            if pool is not None:
                pool.poll(tracker.on_event)
            tracker.report_progress(progress)

    # With outputs or deviations, the subjects get one re-send interval after the collector finished for
    # the last verdict_acks to arrive, as in memory (`settle_verdicts`): their evidence (`coutil.round.evidence`).
    settle = out_dir is not None or adversary is not None
    settling: list[SubjectNode] = list(subjects)  # in this process: those that may still get an ack
    finished_at: list[float] = []

    def over() -> bool:
        if pool is not None and pool.failed:
            return True
        if not collector.finished:
            return False
        if not settle or not settling:
            return True
        if not finished_at:
            finished_at.append(time.monotonic())
        while settling and (settling[-1].verdict is None or settling[-1].verdict_evidence() is not None):
            settling.pop()
        return not settling or time.monotonic() - finished_at[0] >= config.retry_interval

    async def host(url: str | BrokerAddress) -> HostStats:
        nonlocal pool
        address = url if isinstance(url, BrokerAddress) else parse_broker_url(url)
        if workers > 0:
            pool = WorkerPool([
                SubjectSlice(i, address, collector.public_key, config, data, rows, seed, limit,
                             options if options is not None else DriverOptions(), adversary, fresh_round=True)
                for i, rows in enumerate(split_rows_by_qi(data.select(list(config.qi)).values, workers))
            ])
            pool.start()
        watcher = asyncio.create_task(watch())
        try:
            with long_lived_heap():
                stats = await host_nodes(nodes, address, stop_when=over, timeout=limit,
                                         on_event=tracker.on_event, options=options, checks=checks)
            if pool is not None:
                if settle:  # the workers stop on their own once each of their subjects is done
                    await pool.wait(tracker.on_event, config.retry_interval)
                pool.stop()
                await pool.wait(tracker.on_event, REPORT_GRACE_SECONDS)
                pool.poll(tracker.on_event)
            return stats
        finally:
            watcher.cancel()
            if opener is not None:
                opener.close()
            if pool is not None:
                pool.close()

    broker_drops: int | None = None
    if broker is None:
        # amqtt matches every message against every subscription: subscribe to covers (see DriverOptions).
        options = dataclasses.replace(options if options is not None else DriverOptions(), coarse_subscriptions=True)
        # Its own process: the nodes of this one would starve it (see `coutil.net.broker_process`).
        async with BrokerProcess() as embedded:
            stats = await host(embedded.url)
    else:
        # The broker's own drop counter, when it publishes one: the protocol recovers dropped
        # messages by re-sending, so a user would otherwise see only a slow round.
        address = broker if isinstance(broker, BrokerAddress) else parse_broker_url(broker)
        counter = BrokerDropCounter(address)
        async with counter.following():
            stats = await host(address)
        broker_drops = counter.dropped
    wall = tracker.close()
    tracker.report_progress(progress)
    outcome = collector.outcome()
    rejections = count_rejections([collector, *subjects])
    duplicates = count_duplicates_by_kind([collector, *subjects])
    resends = count_resends_by_kind([collector, *subjects])
    if pool is not None:
        rejections.update(pool.rejections())
        duplicates.update(pool.duplicates_by_kind())
        resends.update(pool.resends_by_kind())
        stats = pool.merged_stats(stats)
        node_ids = pool.node_ids()
    wall["setup"] = setup
    wall["run"] = stats.elapsed
    report = RoundReport(
        outcome=outcome,
        subjects=data.n,
        stop_reason="finished" if stats.stopped_by == "condition" else "timeout",
        virtual_time=stats.elapsed,
        wall_times=wall,
        traffic=traffic_stats([t for client, t in stats.per_node.items() if client != collector.client_id]),
        rejections=dict(rejections),
        events=sum(tracker.kinds.values()),
        dropped={"driver": stats.drops, **({"broker": broker_drops} if broker_drops is not None else {})},
        vanished=[],
        subject_states=tracker.subject_states(),
        sids=node_ids,
        node_events=dict(tracker.kinds),
        duplicates_by_kind=dict(duplicates),
        resends_by_kind=dict(resends),
    )
    # Each subject's acknowledged verdict, by row: from this process, or as the workers reported them.
    evidence = pool.evidence() if pool is not None else [(s.sid, s.verdict_evidence()) for s in subjects]
    equivocations = pool.equivocations() if pool is not None else \
        [(s.sid, e) for s in subjects if (e := s.equivocation_evidence()) is not None]
    receipts = pool.receipts() if pool is not None else distinct_receipts(subjects)
    if adversary is not None:
        deviants = {r: a.strategy for r, a in adversary.subject_rows(data.n, seed).items()}
        report.adversary = adversary_section(
            adversary, collector=collector, node_ids=node_ids, deviants=deviants, events=tracker.events,
            qi=data.select(list(config.qi)).values, confidential=data.select(list(config.confidential)).values,
            subjects=subjects if len(subjects) == data.n else None)
        add_verdict_evidence(report.adversary, collector, evidence, deviants)
        if pool is not None:
            add_equivocation_proofs(report.adversary, collector, equivocations, receipts,
                                    {node_ids[row].split("-")[0] for row in deviants if row < len(node_ids)})
    if out_dir is not None:
        transcript = recorder.transcript(include_registrations=kwargs.get("transcript_registrations", False)) \
            if recorder is not None else None
        write_outputs(report, tracker.events, Path(out_dir), transcript, evidence=[pair for _, pair in evidence],
                      equivocations=[proof for _, proof in equivocations], receipts=[r for _, r in receipts],
                      second_transcript=recorder.second_transcript() if recorder is not None else None)
    return report, stats


def run_mqtt_round(data: Dataset, config: RoundConfig, *, seed: int,
                   **kwargs: Unpack[MqttRoundOptions]) -> tuple[RoundReport, HostStats]:
    """Synchronous wrapper of `run_mqtt_round_async` (starts its own event loop)."""
    return asyncio.run(run_mqtt_round_async(data, config, seed=seed, **kwargs))
