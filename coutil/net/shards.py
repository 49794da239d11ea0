"""An in-memory round spread over several processes: one virtual-time bus per shard of the nodes.

One process runs a simulated round as fast as one core computes: at 10^4 subjects, about 4 ms of
the 10 ms a subject costs is cryptography, the rest Python. `run_sharded_round` splits the nodes
into shards, each hosted by its own `ShardBus` in its own process (shard 0, with the collector, in
the calling process), and advances them together by *conservative synchronisation*: no delivery
takes less than the network model's minimum delay ``L`` (half the latency: up-link plus down-link,
each at least a quarter of it), so the shards can all process the events of the window
``[T, T + L)`` independently, then exchange what was published in it (it cannot be delivered before
``T + L``), and move on to the next window (idle stretches are skipped). Everything stays
deterministic for a given seed and number of shards: imports are applied in a fixed order, each
shard draws network randomness from its own stream, and a subject's keys, vanishing and link
latency do not depend on where she is hosted. The release is the one a single process produces
(same keys, same groups, same records); timings, re-sends and traffic can differ slightly.

Each message is verified once, as in one process whose nodes share a decode cache: the shard that
publishes it verifies it as it leaves and says so, and the shards that receive it remember its
envelope as verified (`coutil.protocol.codec.VerifiedEnvelopes`).

Not supported with several shards: the bus log (``record_publications``) and keeping the nodes.
"""

from __future__ import annotations

import itertools
import multiprocessing
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coutil.errors import RemoteProtocolError
from coutil.net.memory import _DELIVER, MemoryBus, NetworkModel, Traffic
from coutil.protocol import codec, topics
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Event, Outgoing
from coutil.sdc.dataset import Dataset

#: (time, shard, sequence, sender up-link delay, sender id, topic, payload, retain, verified)
RemotePublication = tuple[float, int, int, float, str, str, bytes, bool, bool]

#: The collector's work relative to all subjects' work, for splitting the rows: shard 0 (which
#: hosts it) gets correspondingly fewer subjects. Measured at 10^4 subjects: about 0.2 during the
#: shuffle, more while registering and collecting verdicts.
COLLECTOR_SHARE = 0.3


class ShardBus(MemoryBus):
    """A `MemoryBus` hosting one shard: publications also leave for the other shards."""

    def __init__(self, *, shard: int, decode_cache: codec.DecodeCache | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shard = shard
        self.exports: list[RemotePublication] = []
        self._decode_cache = decode_cache
        self._limits = codec.Limits()
        self._sequence = 0

    def _verified(self, topic: str, payload: bytes) -> bool:
        """Verify a leaving message here, so that its receivers elsewhere need not; except for a
        message to one subject's inbox, verified where she is (one receiver: no work saved here, and
        the collector's shard, which sends them all, is the busiest at the start and the end)."""
        if self._decode_cache is None or not payload or topics.INBOX_MARK in topic:
            return False
        try:
            self._decode_cache.decode(payload, self._limits)
        except RemoteProtocolError:
            return False
        return True

    def _publish(self, sender: int, out: Outgoing) -> None:
        if self._cut(sender, self.now) is None:
            self.exports.append((self.now, self.shard, self._sequence, self._link[sender], self._ids[sender],
                                 out.topic, out.payload, out.retain, self._verified(out.topic, out.payload)))
            self._sequence += 1
        super()._publish(sender, out)

    def take_exports(self) -> list[RemotePublication]:
        exports, self.exports = self.exports, []
        return exports

    def import_publications(self, records: Sequence[RemotePublication]) -> None:
        """Route what the other shards published to this shard's subscribers (``records`` sorted)."""
        net = self.network
        for at, _, _, up, _, topic, payload, retain, verified in records:
            if verified and self._decode_cache is not None:
                self._decode_cache.remember_verified(payload)
            if retain:
                if payload:
                    self._retained[topic] = (-1, payload)
                else:
                    self._retained.pop(topic, None)
            for receiver in sorted(self._subscribers(topic)):
                if net.loss and self._draw() < net.loss:
                    self.dropped["loss"] += 1
                    continue
                copies = 2 if net.duplicate and self._draw() < net.duplicate else 1
                for _ in range(copies):
                    delay = up + self._link[receiver] + net.jitter * self._draw()
                    self._push(at + delay, _DELIVER, receiver, (-1, topic, payload))

    def run_window(self, end: float) -> None:
        """Process every event earlier than ``end``."""
        heap = self._heap
        while heap and heap[0][0] < end:
            self._step_top()

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None


@dataclass(frozen=True)
class ShardSpec:
    """What a shard needs to build its nodes (the same way in every process)."""

    shard: int
    data: Dataset
    config: RoundConfig
    seed: int
    rows: tuple[int, ...]
    network: NetworkModel
    faults: Any  # coutil.simulate.FaultPlan
    vanishing: frozenset[int]
    record_events: bool


@dataclass
class ShardState:
    """One shard's bus and nodes, with the bookkeeping the round report needs."""

    spec: ShardSpec
    bus: ShardBus
    collector: Any
    subjects: list[Any]
    node_ids: list[str]
    states: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    previous: dict[str, str] = field(default_factory=dict)
    #: (wall-clock time, phase) of the collector's phase changes (shard 0 only).
    phase_walls: list[tuple[float, str]] = field(default_factory=list)


def build_shard(spec: ShardSpec) -> ShardState:
    """The shard's bus with its nodes (the collector only in shard 0)."""
    from coutil.protocol.subject_audit import SharedCaches
    from coutil.simulate import build_collector, build_subject_nodes, vanish_time

    caches = SharedCaches()
    collector = build_collector(spec.config, seed=spec.seed, caches=caches if spec.shard == 0 else None)
    subjects, node_ids = build_subject_nodes(spec.data, spec.config, collector.public_key, seed=spec.seed,
                                             rows=spec.rows, caches=caches)
    bus = ShardBus(shard=spec.shard, decode_cache=caches.decode_cache, seed=spec.seed * 1009 + spec.shard,
                   network=spec.network, record_events=spec.record_events)
    if spec.shard == 0:
        bus.add_node("collector", collector)
    for node_id, subject in zip(node_ids, subjects, strict=True):
        bus.add_node(node_id, subject)
    state = ShardState(spec, bus, collector if spec.shard == 0 else None, subjects, node_ids)
    state.states["await_announce"] = len(subjects)
    vanish_ids = {node_ids[i] for i, row in enumerate(spec.rows) if row in spec.vanishing}
    faults = spec.faults

    def on_event(node_id: str, event: Event) -> None:
        state.kinds[event.kind] += 1
        if node_id == "collector":
            if event.kind == "phase":
                state.phase_walls.append((time.perf_counter(), str(dict(event.data).get("phase"))))
            return
        if event.kind == "state":
            new = str(dict(event.data).get("state"))
            state.states[state.previous.get(node_id, "await_announce")] -= 1
            state.states[new] += 1
            state.previous[node_id] = new
            if node_id in vanish_ids and new == faults.vanish_state:
                bus.vanish(node_id, vanish_time(spec.seed, node_id, event.at, faults))

    bus.event_sink = on_event
    return state


@dataclass
class ShardResult:
    """What a shard reports when the round is over."""

    shard: int
    node_ids: list[str]
    traffic: dict[str, Traffic]
    rejections: Counter[str]
    kinds: Counter[str]
    states: Counter[str]
    dropped: dict[str, int]
    processed: int
    now: float
    events: list[tuple[str, Event]]


def shard_result(state: ShardState) -> ShardResult:
    rejections: Counter[str] = Counter()
    for node in state.subjects:
        for rejection in node.rejections:
            rejections[rejection.reason] += 1
    bus = state.bus
    return ShardResult(state.spec.shard, state.node_ids, {i: bus.traffic[i] for i in state.node_ids}, rejections,
                       state.kinds, state.states, dict(bus.dropped), bus.processed, bus.now, list(bus.events or ()))


def shard_main(spec: ShardSpec, connection: Any) -> None:
    """Entry point of a shard process: build, then serve windows until told to finish."""
    try:
        state = build_shard(spec)
        connection.send(("ready", None))
        bus = state.bus
        while True:
            command, end, imports = connection.recv()
            if command == "finish":
                connection.send(("final", shard_result(state)))
                return
            bus.import_publications(imports)
            bus.run_window(end)
            connection.send(("window", (bus.take_exports(), bus.next_time(), dict(state.states))))
    except BaseException as exc:  # reported to the coordinator, which raises it
        connection.send(("error", f"{type(exc).__name__}: {exc}"))


def shard_rows(n: int, shards: int) -> list[tuple[int, ...]]:
    """Rows of each shard: shard 0 (with the collector) gets fewer, the others equal parts.

    With the collector worth c times all subjects' work, every shard gets (1 + c) / W of the total
    when shard 0 hosts n ((1 + c) / W - c) subjects (none when that is negative)."""
    if shards < 1:
        raise ValueError("at least one shard")
    if shards == 1:
        return [tuple(range(n))]
    first = min(n, max(0, round(n * ((1.0 + COLLECTOR_SHARE) / shards - COLLECTOR_SHARE))))
    rest = n - first
    bounds = [first + round(i * rest / (shards - 1)) for i in range(shards)]
    starts = [0, *bounds[:-1]]
    return [tuple(range(a, b)) for a, b in zip(starts, bounds, strict=True)]


class Coordinator:
    """Shard 0 in this process, the other shards in spawned processes, advanced window by window."""

    def __init__(self, specs: Sequence[ShardSpec]) -> None:
        context = multiprocessing.get_context("spawn")
        self.local = build_shard(specs[0])
        self._connections: list[Any] = []
        self._processes: list[Any] = []
        for spec in specs[1:]:
            parent, child = context.Pipe()
            process = context.Process(target=shard_main, args=(spec, child), daemon=True,
                                      name=f"coutil-shard-{spec.shard}")
            process.start()
            child.close()
            self._connections.append(parent)
            self._processes.append(process)
        for connection in self._connections:
            self._expect(connection, "ready")
        self.window = specs[0].network.latency / 2.0
        self.states: Counter[str] = Counter(self.local.states)
        self._imports: list[list[RemotePublication]] = [[] for _ in range(len(specs))]
        self._worker_states: list[dict[str, int]] = [{} for _ in self._connections]

    @staticmethod
    def _expect(connection: Any, kind: str) -> Any:
        got, payload = connection.recv()
        if got == "error":
            raise RuntimeError(f"simulation shard failed: {payload}")
        if got != kind:
            raise RuntimeError(f"simulation shard sent {got!r}, expected {kind!r}")
        return payload

    def run(self, *, cap: float, finished: Callable[[], bool],
            progress: Callable[[], None] | None = None) -> str:
        """Advance every shard until ``finished()``, the time cap, or nothing is left to do."""
        start = 0.0
        windows = 0
        while True:
            end = start + self.window
            for index, connection in enumerate(self._connections, start=1):
                connection.send(("window", end, self._imports[index]))
            local = self.local.bus
            local.import_publications(self._imports[0])
            local.run_window(end)
            exports = [local.take_exports()]
            next_times = [local.next_time()]
            for index, connection in enumerate(self._connections):
                shard_exports, next_time, states = self._expect(connection, "window")
                exports.append(shard_exports)
                next_times.append(next_time)
                self._worker_states[index] = states
            for shard in range(len(exports)):
                merged = [record for other, records in enumerate(exports) if other != shard for record in records]
                merged.sort(key=lambda record: (record[0], record[1], record[2]))
                self._imports[shard] = merged
            earliest = [record[0] + self.window for records in exports for record in records]
            candidates = [t for t in (*next_times, *earliest) if t is not None]
            windows += 1
            if progress is not None and windows % 20 == 0:
                self._sum_states()
                progress()
            if finished():
                return "predicate"
            if not candidates:
                return "idle"
            start = max(end, min(candidates))
            if start > cap:
                return "time"

    def _sum_states(self) -> None:
        total: Counter[str] = Counter(self.local.states)
        for states in self._worker_states:
            total.update(states)
        self.states = total

    def finish(self) -> list[ShardResult]:
        results = [shard_result(self.local)]
        for connection in self._connections:
            connection.send(("finish", 0.0, []))
            results.append(self._expect(connection, "final"))
        self._sum_states()
        return results

    def close(self) -> None:
        for connection in self._connections:
            connection.close()
        for process in self._processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)


def run_sharded_round(
    data: Dataset,
    config: RoundConfig,
    *,
    seed: int,
    shards: int,
    network: NetworkModel,
    faults: Any,
    out_dir: Any = None,
    progress: Callable[[str, float], None] | None = None,
    max_virtual_time: float | None = None,
) -> Any:
    """`coutil.simulate.run_memory_round` over ``shards`` processes; returns its `RoundReport`."""
    from pathlib import Path

    from coutil.simulate import _PAST_PHASE, RoundReport, traffic_stats, vanishing_subjects, write_outputs

    if network.latency <= 0:
        raise ValueError("a sharded simulation needs a positive network latency (its synchronisation window)")
    t0 = time.perf_counter()
    vanishing = frozenset(vanishing_subjects(data.n, faults.vanish_fraction, seed))
    specs = [ShardSpec(i, data, config, seed, rows, network, faults, vanishing, out_dir is not None)
             for i, rows in enumerate(shard_rows(data.n, shards))]
    coordinator = Coordinator(specs)
    try:
        local = coordinator.local
        collector = local.collector
        setup = time.perf_counter() - t0
        cap = max_virtual_time if max_virtual_time is not None else (
            config.register_window + config.audit_window + 200 * config.step_timeout
        )

        def report_progress() -> None:
            if progress is None:
                return
            phase = local.phase_walls[-1][1] if local.phase_walls else "created"
            past = _PAST_PHASE.get(phase, frozenset())
            progress(phase, sum(coordinator.states[s] for s in past) / max(data.n, 1))

        stop_reason = coordinator.run(cap=cap, finished=lambda: bool(collector.finished), progress=report_progress)
        results = coordinator.finish()
    finally:
        coordinator.close()
    end = time.perf_counter()
    wall: dict[str, float] = {"setup": setup}
    marks = [*local.phase_walls, (end, "")]
    for (since, phase), (until, _) in itertools.pairwise(marks):
        wall[phase] = wall.get(phase, 0.0) + until - since
    wall["run"] = end - t0 - setup
    report_progress()
    traffic: dict[str, Traffic] = {}
    rejections: Counter[str] = Counter(r.reason for r in collector.rejections)
    kinds: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    events: list[tuple[str, Event]] = []
    for result in results:
        traffic.update(result.traffic)
        rejections.update(result.rejections)
        kinds.update(result.kinds)
        dropped.update(result.dropped)
        events.extend(result.events)
    events.sort(key=lambda item: item[1].at)  # stable: each shard's own order within a time
    sids = [node_id for result in results for node_id in result.node_ids]
    report = RoundReport(
        outcome=collector.outcome(),
        subjects=data.n,
        stop_reason=stop_reason,
        virtual_time=max(result.now for result in results),
        wall_times=wall,
        traffic=traffic_stats([traffic[s] for s in sids]),
        rejections=dict(rejections),
        events=sum(result.processed for result in results),
        node_events=dict(kinds),
        dropped=dict(dropped),
        vanished=sorted(vanishing),
        subject_states={k: v for k, v in coordinator.states.items() if v},
        sids=sids,
    )
    if out_dir is not None:
        t_out = time.perf_counter()
        write_outputs(report, events, Path(out_dir))
        wall["outputs"] = time.perf_counter() - t_out
    return report
