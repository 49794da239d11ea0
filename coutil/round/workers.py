"""Subjects hosted in worker processes, so that a round on one machine uses every core.

``coutil run --workers N`` (`coutil.round.mqtt`) keeps the collector (and the embedded broker, if any)
in the main process and hands the subjects, in N slices of neighbouring QI vectors (`split_rows_by_qi`), to N worker
processes. Each worker builds its subjects exactly as a single process would
(`coutil.round.nodes.build_subject_nodes`: a subject's keys depend only on the seed and her row), hosts
them multiplexed over MQTT (one connection per `DriverOptions.subjects_per_connection` subjects, in
slices of neighbouring QIs: `connection_slices`), streams their events (state changes, verdicts: never
a confidential value) to the main process for the progress display and the trace, and reports its
traffic counters and rejections when its subjects are done. The broker between them is the same as
for a single process; only the CPU work is spread. Crossing a process boundary costs something: a
message verified once by a process hosting both the collector and the subjects is verified once in
each process that receives it here.

Workers are started with the ``spawn`` method (no fork of a process running an event loop and the
broker's threads). A worker that fails reports its error; the main process raises it.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import queue
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

from coutil.adversary.plan import AdversaryPlan
from coutil.errors import CoutilError, ExitCode, NetworkError
from coutil.net.broker_process import children_ignore_sigint, ignore_sigint
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress, DriverOptions, HostStats, NodeTraffic
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import Event
from coutil.round.heap import long_lived_heap
from coutil.round.nodes import build_subject_nodes, distinct_receipts
from coutil.round.report import count_duplicates_by_kind, count_rejections, count_resends_by_kind
from coutil.sdc.dataset import Dataset
from coutil.sdc.partition import split_in_parts

#: Seconds between two batches of events sent by a worker.
EVENT_BATCH_SECONDS = 0.2
#: Seconds the main process waits for the workers' reports once the collector has finished.
REPORT_GRACE_SECONDS = 60.0
#: Seconds `WorkerPool.close` gives the workers to exit before it terminates them.
CLOSE_SECONDS = 10.0

EventSink = Callable[[str, Event], None]


@dataclass(frozen=True)
class SubjectSlice:
    """What one worker needs: the round's public facts and its rows of the data set."""

    worker: int
    broker: BrokerAddress
    collector_key: bytes
    config: RoundConfig
    data: Dataset
    rows: tuple[int, ...]
    seed: int
    timeout: float
    options: DriverOptions
    #: Deviating subjects (`coutil.adversary`): each worker builds the strategies of its rows.
    adversary: AdversaryPlan | None = None
    #: The collector's key is fresh (`coutil.round.nodes.build_subject_nodes`): the subjects' keys depend on it.
    fresh_round: bool = False


@dataclass
class WorkerReport:
    """What a worker sends back when its subjects are done (or it failed)."""

    worker: int
    node_ids: list[str] = field(default_factory=list)
    per_node: dict[str, NodeTraffic] = field(default_factory=dict)
    wire: dict[str, NodeTraffic] = field(default_factory=dict)
    rejections: Counter[str] = field(default_factory=Counter)
    duplicates_by_kind: Counter[str] = field(default_factory=Counter)
    resends_by_kind: Counter[str] = field(default_factory=Counter)
    stopped_by: str = "timeout"
    unsent: int = 0
    elapsed: float = 0.0
    error: str | None = None
    exit_code: int | None = None
    #: Each subject's signed verdict and the collector's signed verdict_ack of it (None: not
    #: acknowledged), in the order of ``node_ids``: the evidence she would bring to an auditor
    #: (`coutil.round.evidence`).
    evidence: list[tuple[bytes, bytes] | None] = field(default_factory=list)
    #: The proofs of equivocation her subjects hold, with their sids (`SubjectNode.equivocation_evidence`).
    equivocations: list[tuple[str, tuple[bytes, bytes, bytes]]] = field(default_factory=list)
    #: Her subjects' receipts (`SubjectNode.roster_receipt`), one per distinct statement, with a holder's sid.
    receipts: list[tuple[str, tuple[bytes, bytes]]] = field(default_factory=list)


def connection_slices(qi: NDArray[np.float64], per_connection: int) -> list[list[int]]:
    """Positions of a worker's subjects (rows of ``qi``, in its order) in slices of neighbouring QI
    vectors, one slice per multiplexed connection, at most about ``per_connection`` in each."""
    n = len(qi)
    parts = max(1, -(-n // per_connection))
    if parts == 1:
        return [list(range(n))]
    return [[int(j) for j in part] for part in split_in_parts(qi, parts)]


def split_rows_by_qi(qi: NDArray[np.float64], workers: int) -> list[tuple[int, ...]]:
    """The rows in ``workers`` slices of neighbouring QI vectors (sizes within one of n / workers).

    A group message reaches every process that hosts one of the group's members, and each of them
    receives and verifies it. MDAV groups neighbours in QI space, so slices cut by median splits
    of the z-scored QIs (on the attribute of widest spread, recursively, in proportion to the
    number of workers on each side) keep most groups inside one process: measured at 10^4 subjects
    with two workers, a group message then reaches one worker instead of both. Which process
    hosts a subject changes nothing else: her keys and messages depend only on the seed and her row.
    """
    if workers < 1:
        raise ValueError("at least one worker")
    # The median split of `coutil.sdc.partition` (the one mdav_partitioned uses for its blocks).
    return [tuple(int(i) for i in rows) for rows in split_in_parts(qi, workers)]


#: What a worker sends to the main process: ("events", [(node id, event), ...]) or ("done", WorkerReport).
# A string: multiprocessing's Queue is not subscriptable at run time.
Channel: TypeAlias = "multiprocessing.queues.Queue[tuple[str, list[tuple[str, Event]] | WorkerReport]]"


def worker_main(task: SubjectSlice, channel: Channel, stop: multiprocessing.synchronize.Event) -> None:
    """Entry point of a worker process: host the slice's subjects until they are done or ``stop``
    (a multiprocessing event) is set, report, exit. SIGINT is ignored: the main process stops its workers."""
    ignore_sigint()
    try:
        report = asyncio.run(_host_slice(task, channel, stop))
    except CoutilError as exc:
        report = WorkerReport(task.worker, error=str(exc), exit_code=int(exc.exit_code))
    except BaseException as exc:  # reported, then re-raised in the main process as a bug
        report = WorkerReport(task.worker, error=f"{type(exc).__name__}: {exc}")
    channel.put(("done", report))


async def _host_slice(task: SubjectSlice, channel: Channel, stop: multiprocessing.synchronize.Event) -> WorkerReport:
    nodes, node_ids = build_subject_nodes(task.data, task.config, task.collector_key, seed=task.seed,
                                          rows=task.rows, adversary=task.adversary, fresh_round=task.fresh_round)
    pending: list[tuple[str, Event]] = []

    async def forward_events() -> None:
        while True:
            await asyncio.sleep(EVENT_BATCH_SECONDS)
            if pending:
                channel.put(("events", list(pending)))
                pending.clear()

    remaining = list(nodes)
    qi = task.data.select(list(task.config.qi)).values[list(task.rows)]
    connections = [[nodes[j] for j in part] for part in connection_slices(qi, task.options.subjects_per_connection)]

    def finished() -> bool:
        while remaining and remaining[-1].finished:
            remaining.pop()
        return not remaining or stop.is_set()

    forwarder = asyncio.create_task(forward_events())
    try:
        with long_lived_heap():
            stats = await host_nodes(connections, task.broker, stop_when=finished, timeout=task.timeout,
                                     on_event=lambda node_id, event: pending.append((node_id, event)),
                                     options=task.options)
    finally:
        forwarder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await forwarder
    if pending:
        channel.put(("events", list(pending)))
    rejections = count_rejections(nodes)
    return WorkerReport(task.worker, node_ids, dict(stats.per_node), dict(stats.wire), rejections,
                        count_duplicates_by_kind(nodes), count_resends_by_kind(nodes),
                        stats.stopped_by, stats.unsent, stats.elapsed,
                        evidence=[node.verdict_evidence() for node in nodes],
                        equivocations=[(node.sid, e) for node in nodes
                                       if (e := node.equivocation_evidence()) is not None],
                        receipts=distinct_receipts(nodes))


class WorkerPool:
    """The worker processes of one round, as seen from the main process."""

    def __init__(self, tasks: Sequence[SubjectSlice]) -> None:
        context = multiprocessing.get_context("spawn")
        self._channel: Channel = context.Queue()
        self._stop = context.Event()
        self._processes = [context.Process(target=worker_main, args=(task, self._channel, self._stop), daemon=True,
                                           name=f"coutil-subjects-{task.worker}") for task in tasks]
        self._rows = {task.worker: task.rows for task in tasks}
        self.reports: dict[int, WorkerReport] = {}

    def start(self) -> None:
        with children_ignore_sigint():
            for process in self._processes:
                process.start()

    def poll(self, on_event: EventSink) -> None:
        """Hand the events received so far to ``on_event`` and keep the reports that arrived."""
        while True:
            try:
                _kind, payload = self._channel.get_nowait()
            except queue.Empty:
                return
            if isinstance(payload, WorkerReport):
                self.reports[payload.worker] = payload
            else:
                for node_id, event in payload:
                    on_event(node_id, event)

    def stop(self) -> None:
        """Tell the workers to stop hosting and report (the collector has finished: a subject still
        waiting for it would wait in vain, as in a single process that stops with the collector)."""
        self._stop.set()

    @property
    def done(self) -> bool:
        return len(self.reports) == len(self._processes)

    @property
    def failed(self) -> bool:
        """A worker reported an error or exited without a report: the round cannot complete."""
        return any(report.error is not None for report in self.reports.values()) or any(
            index not in self.reports and not process.is_alive() and process.exitcode is not None
            for index, process in enumerate(self._processes))

    async def wait(self, on_event: EventSink, seconds: float) -> None:
        """Poll until every worker reported, a worker died without reporting, or ``seconds`` pass."""
        limit = time.monotonic() + seconds
        while True:
            self.poll(on_event)
            for report in self.reports.values():
                self._raise_if_failed(report)
            if self.done or time.monotonic() >= limit:
                return
            for index, process in enumerate(self._processes):
                if index not in self.reports and not process.is_alive():
                    self.poll(on_event)  # its report may have been the last thing it did
                    if index not in self.reports:
                        raise NetworkError(f"subject worker {index} exited with code {process.exitcode} "
                                           "without a report")
            await asyncio.sleep(0.05)

    def close(self) -> None:
        """Stop the workers (also when the round was interrupted) and wait for them to exit.

        The channel is drained meanwhile: a worker exits only once its report has left its queue.
        """
        self._stop.set()
        limit = time.monotonic() + CLOSE_SECONDS
        while any(p.is_alive() for p in self._processes) and time.monotonic() < limit:
            self.poll(lambda node_id, event: None)
            for process in self._processes:
                process.join(timeout=0.05)
        for process in self._processes:
            if process.is_alive():
                process.terminate()
                process.join(timeout=5)
        self._channel.close()
        self._channel.join_thread()

    @staticmethod
    def _raise_if_failed(report: WorkerReport) -> None:
        if report.error is None:
            return
        if report.exit_code is not None:
            error = CoutilError(f"subject worker {report.worker}: {report.error}")
            error.exit_code = ExitCode(report.exit_code)
            raise error
        raise RuntimeError(f"subject worker {report.worker} failed: {report.error}")

    def merged_stats(self, main: HostStats) -> HostStats:
        """The main process's counters (the collector's) with every worker's."""
        per_node = dict(main.per_node)
        wire = dict(main.wire)
        unsent = main.unsent
        for report in self.reports.values():
            per_node.update(report.per_node)
            wire.update(report.wire)
            unsent += report.unsent
        return HostStats(per_node, main.elapsed, main.stopped_by, unsent, wire)

    def node_ids(self) -> list[str]:
        """Subject ids in data set order (a worker reports its ids in the order of its rows)."""
        placed = [(row, node_id) for worker, report in self.reports.items()
                  for row, node_id in zip(self._rows[worker], report.node_ids, strict=False)]
        return [node_id for _, node_id in sorted(placed)]

    def equivocations(self) -> list[tuple[str, tuple[bytes, bytes, bytes]]]:
        """Every proof of equivocation the workers' subjects hold (`WorkerReport.equivocations`)."""
        return [e for report in self.reports.values() for e in report.equivocations]

    def receipts(self) -> list[tuple[str, tuple[bytes, bytes]]]:
        """The workers' subjects' receipts (`WorkerReport.receipts`)."""
        return [r for report in self.reports.values() for r in report.receipts]

    def evidence(self) -> list[tuple[str, tuple[bytes, bytes] | None]]:
        """Each subject's id and verdict evidence (`WorkerReport.evidence`), by row of the data set (a row
        whose worker did not report: no id, no evidence)."""
        rows: list[tuple[str, tuple[bytes, bytes] | None]] = [("", None)] * sum(map(len, self._rows.values()))
        for worker, report in self.reports.items():
            for row, node_id, pair in zip(self._rows[worker], report.node_ids, report.evidence, strict=False):
                rows[row] = (node_id, pair)
        return rows

    def rejections(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for report in self.reports.values():
            total.update(report.rejections)
        return total

    def duplicates_by_kind(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for report in self.reports.values():
            total.update(report.duplicates_by_kind)
        return total

    def resends_by_kind(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for report in self.reports.values():
            total.update(report.resends_by_kind)
        return total
