"""Run one whole round over MQTT: a collector and N subjects in this process, one client each.

This is what `coutil run` does. The nodes are the very same sans-IO state machines the in-memory
simulation drives (`coutil.simulate.build_round_nodes`); only the transport differs. Without a
broker URL an embedded amqtt broker is started on 127.0.0.1 (a free port) for the duration of the
round, so nothing needs installing.

Outputs are those of `coutil simulate` (release.csv, manifest.json, audit.json, trace.jsonl,
report.json): the trace holds event codes, counts and ids, never a confidential value.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coutil.net.broker import EmbeddedBroker
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, host_nodes
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Event
from coutil.sdc.dataset import Dataset
from coutil.simulate import RoundReport, build_round_nodes, write_outputs

#: The collector phases reported to the progress callback, in round order.
PHASES = ("registration", "sharing", "auditing")

#: Subject states that count as past each collector phase.
PAST_PHASE: dict[str, frozenset[str]] = {
    "registration": frozenset({"registered", "sharing", "await_release", "verdict_sent", "done", "excluded"}),
    "sharing": frozenset({"await_release", "verdict_sent", "done", "excluded"}),
    "auditing": frozenset({"done", "excluded"}),
}

ProgressCallback = Callable[[str, float], None]


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
) -> tuple[RoundReport, HostStats]:
    """Run one round over ``broker`` (an embedded amqtt broker when None); see the module docstring."""
    t0 = time.perf_counter()
    built = build_round_nodes(data, config, seed=seed)
    collector = built.collector
    tracker = _Tracker(data.n, collector.client_id, keep_events=out_dir is not None)
    setup = time.perf_counter() - t0
    limit = timeout if timeout is not None else (
        config.register_window + config.audit_window + 60 * config.step_timeout
    )
    nodes = [collector, *built.subjects]

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.2)
            if progress is not None:
                progress(tracker.phase, tracker.fraction_past())

    async def host(url: str | BrokerAddress) -> HostStats:
        watcher = asyncio.create_task(watch())
        try:
            return await host_nodes(nodes, url, stop_when=lambda: bool(collector.finished), timeout=limit,
                                    on_event=tracker.on_event, options=options)
        finally:
            watcher.cancel()

    if broker is None:
        async with EmbeddedBroker() as embedded:
            stats = await host(embedded.url)
    else:
        stats = await host(broker)
    tracker.close()
    if progress is not None:
        progress(tracker.phase, tracker.fraction_past())
    outcome = collector.outcome()
    rejections: Counter[str] = Counter()
    for node in nodes:
        for rejection in getattr(node, "rejections", ()):
            rejections[rejection.reason] += 1
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
        dropped={"driver": stats.drops},
        vanished=[],
        subject_states={k: v for k, v in tracker.states.items() if v},
        sids=built.node_ids,
        node_events=dict(tracker.kinds),
    )
    if out_dir is not None:
        write_outputs(report, tracker.events, Path(out_dir))
    return report, stats


def run_mqtt_round(data: Dataset, config: RoundConfig, **kwargs: Any) -> tuple[RoundReport, HostStats]:
    """Synchronous wrapper of `run_mqtt_round_async` (starts its own event loop)."""
    return asyncio.run(run_mqtt_round_async(data, config, **kwargs))
