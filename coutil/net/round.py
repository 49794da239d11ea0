"""Run one whole round over MQTT: a collector and N subjects on this machine.

This is what `coutil run` does. The nodes are the very same sans-IO state machines the in-memory
simulation drives (`coutil.simulate.build_round_nodes`); only the transport differs. Without a
broker URL an embedded amqtt broker is started on 127.0.0.1 (a free port), in a child process of its
own (`coutil.net.broker_process`), for the duration of the round, so nothing needs installing; its
multiplexed connections then subscribe to covering filters (`DriverOptions.coarse_subscriptions`).
The collector has its own connection; the subjects share one multiplexed connection by default
(`coutil.net.hosting`), or get one each, in this process or in worker processes (`coutil.net.workers`).

Outputs are those of `coutil simulate` (release.csv, manifest.json, audit.json, trace.jsonl,
report.json): the trace holds event codes, counts and ids, never a confidential value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coutil.net.broker_drops import BrokerDropCounter
from coutil.net.broker_process import BrokerProcess
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, parse_broker_url
from coutil.net.workers import REPORT_GRACE_SECONDS, SubjectSlice, WorkerPool, split_rows_by_qi
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Event, Node
from coutil.sdc.dataset import Dataset
from coutil.simulate import RoundReport, build_collector, build_round_nodes, write_outputs

#: The collector phases reported to the progress callback, in round order.
PHASES = ("registration", "sharing", "auditing")

#: Subject states that count as past each collector phase.
PAST_PHASE: dict[str, frozenset[str]] = {
    "registration": frozenset({"registered", "sharing", "await_release", "verdict_sent", "done", "excluded"}),
    "sharing": frozenset({"await_release", "verdict_sent", "done", "excluded"}),
    "auditing": frozenset({"done", "excluded"}),
}

ProgressCallback = Callable[[str, float], None]

#: The RoundConfig fields `local_swarm_timing` chooses.
TIMING_FIELDS = ("step_timeout", "retry_interval", "audit_window")


def local_swarm_timing(subjects: int) -> dict[str, float]:
    """Protocol timing for ``subjects`` subjects hosted on this one machine (``coutil run``).

    The defaults (20 s steps, 2 s re-sends, 60 s audit) suit subjects on their own devices. When
    one machine hosts them all, every group's messages queue behind everyone else's: at 10^4
    subjects a step of the shuffle waits tens of seconds for the CPU, a 20 s step timeout
    excluded every member as silent, and 2 s re-sends multiplied the load (measured: the round
    released nothing). So the step timeout grows by 12 ms per subject, the first re-send by 0.5 ms
    and the audit window by 30 ms (at 10^4: 120 s, 5 s, 300 s). Timeouts only bound how long a
    truly silent member is waited for; an honest swarm finishes long before them.
    """
    return {
        "step_timeout": max(20.0, 0.012 * subjects),
        "retry_interval": max(2.0, 0.0005 * subjects),
        "audit_window": max(60.0, 0.03 * subjects),
    }


@dataclass
class _Tracker:
    """Subject states and collector phases, fed by the driver's event sink."""

    subjects: int
    collector_id: str
    keep_events: bool
    states: Counter[str] = field(default_factory=Counter)
    previous: dict[str, str] = field(default_factory=dict)
    phase: str = "created"
    phase_since: float = field(default_factory=time.perf_counter)
    wall: dict[str, float] = field(default_factory=dict)
    events: list[tuple[str, Event]] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.states["await_announce"] = self.subjects

    def on_event(self, node_id: str, event: Event) -> None:
        self.kinds[event.kind] += 1
        if self.keep_events:
            self.events.append((node_id, event))
        if node_id == self.collector_id:
            if event.kind == "phase":
                now = time.perf_counter()
                self.wall[self.phase] = self.wall.get(self.phase, 0.0) + now - self.phase_since
                self.phase, self.phase_since = str(dict(event.data).get("phase")), now
            return
        if event.kind == "state":
            new = str(dict(event.data).get("state"))
            self.states[self.previous.get(node_id, "await_announce")] -= 1
            self.states[new] += 1
            self.previous[node_id] = new

    def fraction_past(self) -> float:
        past = PAST_PHASE.get(self.phase, frozenset())
        return sum(self.states[s] for s in past) / max(self.subjects, 1)

    def close(self) -> None:
        now = time.perf_counter()
        self.wall[self.phase] = self.wall.get(self.phase, 0.0) + now - self.phase_since
        self.wall.pop("created", None)


def _traffic(stats: HostStats, collector_id: str) -> dict[str, dict[str, float]]:
    subjects = [t for client, t in stats.per_node.items() if client != collector_id]
    if not subjects:
        return {}
    columns = {
        "sent_messages": [t.sent_messages for t in subjects],
        "sent_bytes": [t.sent_bytes for t in subjects],
        "received_messages": [t.received_messages for t in subjects],
        "received_bytes": [t.received_bytes for t in subjects],
        "total_bytes": [t.sent_bytes + t.received_bytes for t in subjects],
    }
    return {
        name: {"mean": sum(values) / len(values), "max": float(max(values))} for name, values in columns.items()
    }


async def run_mqtt_round_async(
    data: Dataset,
    config: RoundConfig,
    *,
    seed: int,
    broker: str | BrokerAddress | None = None,
    timeout: float | None = None,
    out_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    options: DriverOptions | None = None,
    shared_connection: bool = True,
    workers: int = 0,
) -> tuple[RoundReport, HostStats]:
    """Run one round over ``broker`` (an embedded amqtt broker when None); see the module docstring.

    ``shared_connection``: the subjects share one multiplexed MQTT connection (the collector has its
    own); False gives every subject her own connection, as deployed behind a per-subject ACL.
    ``workers``: host the subjects in that many worker processes (`coutil.net.workers`), each
    multiplexing its slice over one connection; 0 keeps them in this process.
    """
    t0 = time.perf_counter()
    # A fresh collector key and round id: a broker keeps the retained bulletins of earlier rounds.
    if workers > 0:
        collector = build_collector(config, seed=seed, fresh_round=True)
        subjects: list[Any] = []
        node_ids: list[str] = []
    else:
        built = build_round_nodes(data, config, seed=seed, fresh_round=True)
        collector, subjects, node_ids = built.collector, built.subjects, built.node_ids
    tracker = _Tracker(data.n, collector.client_id, keep_events=out_dir is not None)
    setup = time.perf_counter() - t0
    limit = timeout if timeout is not None else (
        config.register_window + config.audit_window + 60 * config.step_timeout
    )
    nodes: list[Node | list[Node]] = [collector]
    if shared_connection:
        nodes.append(list(subjects))
    else:
        nodes.extend(subjects)
    pool: WorkerPool | None = None

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.2)
            if pool is not None:
                pool.poll(tracker.on_event)
            if progress is not None:
                progress(tracker.phase, tracker.fraction_past())

    async def host(url: str | BrokerAddress) -> HostStats:
        nonlocal pool
        address = url if isinstance(url, BrokerAddress) else parse_broker_url(url)
        if workers > 0:
            pool = WorkerPool([
                SubjectSlice(i, address, collector.public_key, config, data, rows, seed, limit,
                             options if options is not None else DriverOptions())
                for i, rows in enumerate(split_rows_by_qi(data.select(list(config.qi)).values, workers))
            ])
            pool.start()
        watcher = asyncio.create_task(watch())
        try:
            stats = await host_nodes(nodes, address,
                                     stop_when=lambda: bool(collector.finished) or (pool is not None and pool.failed),
                                     timeout=limit,
                                     on_event=tracker.on_event, options=options)
            if pool is not None:
                pool.stop()
                await pool.wait(tracker.on_event, REPORT_GRACE_SECONDS)
                pool.poll(tracker.on_event)
            return stats
        finally:
            watcher.cancel()
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
    tracker.close()
    if progress is not None:
        progress(tracker.phase, tracker.fraction_past())
    outcome = collector.outcome()
    rejections: Counter[str] = Counter()
    for node in [collector, *subjects]:
        for rejection in getattr(node, "rejections", ()):
            rejections[rejection.reason] += 1
    if pool is not None:
        rejections.update(pool.rejections())
        stats = pool.merged_stats(stats)
        node_ids = pool.node_ids()
    wall = dict(tracker.wall)
    wall["setup"] = setup
    wall["run"] = stats.elapsed
    report = RoundReport(
        outcome=outcome,
        subjects=data.n,
        stop_reason="finished" if stats.stopped_by == "condition" else "timeout",
        virtual_time=stats.elapsed,
        wall_times=wall,
        traffic=_traffic(stats, collector.client_id),
        rejections=dict(rejections),
        events=sum(tracker.kinds.values()),
        dropped={"driver": stats.drops, **({"broker": broker_drops} if broker_drops is not None else {})},
        vanished=[],
        subject_states={k: v for k, v in tracker.states.items() if v},
        sids=node_ids,
        node_events=dict(tracker.kinds),
    )
    if out_dir is not None:
        write_outputs(report, tracker.events, Path(out_dir))
    return report, stats


def run_mqtt_round(data: Dataset, config: RoundConfig, **kwargs: Any) -> tuple[RoundReport, HostStats]:
    """Synchronous wrapper of `run_mqtt_round_async` (starts its own event loop)."""
    return asyncio.run(run_mqtt_round_async(data, config, **kwargs))
