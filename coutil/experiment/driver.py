"""The collaborative round of a cell: the in-memory driver with per-subject plans and ground truth.

Like `coutil.round.memory.simulate_round` (same nodes from the same seed, same bus, same vanishing
rule) but the harness decides *which* subjects go silent and when (a strategy's ``vanish_state``,
or a `FaultPlan`'s random fraction), measures each subject node's CPU time, and reads back from the
bus log what the analysis needs:

- the ground truth: which released row carries each subject's values (her ``Assign`` gives her
  group label, the ``Release`` the row block of each label, her shared values the row within it);
- what a curious collector saw: the order and time of every member's ``submit`` and ``reveal``;
- with an ``adversary`` plan (the deviation library's nodes for chosen subjects and the collector), the
  round report's ``adversary`` section (`coutil.adversary.outcome`): who deviated, who detected it,
  who was excluded, and what each deviating party can attribute.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.adversary.collector import arrival_delay
from coutil.adversary.outcome import add_verdict_evidence, adversary_section
from coutil.adversary.plan import AdversaryPlan
from coutil.net.memory import MemoryBus, NetworkModel
from coutil.protocol import codec
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import SubjectStateChanged
from coutil.protocol.messages import Assign, Reveal, Submit
from coutil.protocol.states import SubjectState
from coutil.round.memory import settle_verdicts
from coutil.round.nodes import build_round_nodes
from coutil.round.report import RoundReport, count_rejections, traffic_stats
from coutil.round.simulation import FaultPlan, vanish_time, vanishing_subjects
from coutil.round.tracker import RoundTracker
from coutil.sdc.dataset import Dataset

COLLECTOR_ID = "collector"
FloatMatrix = NDArray[np.float64]
_LIMITS = codec.Limits(max_message_bytes=1 << 30, max_array_entries=1 << 24)


class TimedNode:
    """A node proxy that adds up the CPU seconds its node spends in every call the bus makes."""

    def __init__(self, node: Any) -> None:
        self.node = node
        self.cpu = 0.0

    def _timed(self, call: Any, *args: Any) -> Any:
        start = time.process_time()
        try:
            return call(*args)
        finally:
            self.cpu += time.process_time() - start

    def subscriptions(self) -> frozenset[str]:
        result: frozenset[str] = self.node.subscriptions()
        return result

    def start(self, now: float) -> Any:
        return self._timed(self.node.start, now)

    def receive(self, topic: str, payload: bytes, now: float) -> Any:
        return self._timed(self.node.receive, topic, payload, now)

    def on_timer(self, now: float) -> Any:
        return self._timed(self.node.on_timer, now)

    def next_timer(self) -> float | None:
        result: float | None = self.node.next_timer()
        return result

    def drain_events(self) -> Any:
        return self.node.drain_events()

    @property
    def finished(self) -> bool:
        return bool(self.node.finished)


@dataclass
class SubjectCost:
    messages: int
    bytes: int
    cpu_seconds: float


@dataclass
class CollaborativeRun:
    """A finished collaborative round with its ground truth and the collector's view of the bus."""

    report: RoundReport
    #: Released matrix (QI centroids, then confidential values), rows in group order.
    release: FloatMatrix
    #: Per subject (dataset row): her released row, or -1 when her values are not in the release.
    row_of_subject: NDArray[np.intp]
    #: Per subject: the release block (0..G-1) she is in, or -1.
    block_of_subject: NDArray[np.intp]
    #: Per release block: its size.
    block_sizes: list[int]
    cost: list[SubjectCost]
    #: Per release block, per strategy of the curious collector: the subjects (dataset rows) in the order
    #: that strategy lines up with the block's rows (see `coutil.experiment.measures.collector_risk`).
    collector_orders: dict[int, dict[str, list[int]]] = field(default_factory=dict)
    #: The report's ``adversary`` section when the round had deviating nodes (`coutil.adversary.outcome`).
    adversary: dict[str, object] | None = None


def run_collaborative(submitted: Dataset, config: RoundConfig, *, seed: int, vanish: dict[int, str] | None = None,
                      faults: FaultPlan | None = None, network: NetworkModel | None = None,
                      adversary: AdversaryPlan | None = None) -> CollaborativeRun:
    """One round over ``submitted`` (what each subject registers and shares), row i = subject i.

    ``vanish``: row -> subject state on whose entry she goes silent for good. ``faults`` adds its own
    random fraction of vanishing subjects (as `simulate_round` would choose them). ``adversary``: the
    nodes that run a strategy of the deviation library (rows of ``submitted``).
    """
    faults = faults if faults is not None else FaultPlan()
    plan = dict(vanish or {})
    for row in vanishing_subjects(submitted.n, faults.vanish_fraction, seed):
        plan.setdefault(row, faults.vanish_state)
    adversary = adversary if adversary is not None and not adversary.empty else None
    built = build_round_nodes(submitted, config, seed=seed, adversary=adversary)
    collector = built.collector
    bus = MemoryBus(seed=seed, network=network if network is not None else NetworkModel(),
                    record_publications=True, record_events=False)
    bus.add_node(COLLECTOR_ID, collector)
    timed = [TimedNode(s) for s in built.subjects]
    sids = built.node_ids
    for node_id, node, subject in zip(sids, timed, built.subjects, strict=True):
        bus.add_node(node_id, node, start_at=arrival_delay(collector, subject.public_key))
    row_of_id = {sid: i for i, sid in enumerate(sids)}
    tracker = RoundTracker(submitted.n, COLLECTOR_ID, keep_events=adversary is not None)

    def vanish_on_entry(node_id: str, state: SubjectState, event: SubjectStateChanged) -> None:
        row = row_of_id.get(node_id)
        if row is not None and plan.get(row) == str(state):
            bus.vanish(node_id, vanish_time(seed, node_id, event.at, faults))

    if plan:
        tracker.on_subject_state(vanish_on_entry)
    bus.event_sink = tracker.on_event
    cap = config.register_window + config.audit_window + 200 * config.step_timeout
    stop = bus.run_until(until=cap, predicate=lambda: collector.finished)
    wall = tracker.close()
    traffic = [bus.traffic[s] for s in sids]
    report = RoundReport(
        outcome=collector.outcome(), subjects=submitted.n,
        stop_reason="finished" if stop == "predicate" else stop, virtual_time=bus.now, wall_times=wall,
        traffic=traffic_stats(traffic, [(t.bulletin_received_messages, t.bulletin_received_bytes) for t in traffic]),
        rejections=dict(count_rejections([collector, *built.subjects])), events=bus.processed,
        node_events=dict(tracker.kinds), dropped=dict(bus.dropped), vanished=sorted(plan),
        subject_states=tracker.subject_states(), sids=sids,
    )
    cost = [SubjectCost(t.sent_messages + t.received_messages, t.sent_bytes + t.received_bytes, node.cpu)
            for t, node in zip(traffic, timed, strict=True)]
    run = _analyse(bus, report, submitted, config, row_of_id, cost)
    if adversary is not None:
        run.adversary = adversary_section(
            adversary, collector=collector, node_ids=sids, deviants=built.deviants, events=tracker.events,
            qi=submitted.select(list(config.qi)).values,
            confidential=submitted.select(list(config.confidential)).values, subjects=built.subjects)
        if stop == "predicate":
            add_verdict_evidence(run.adversary, collector, settle_verdicts(bus, built.subjects, config),
                                 built.deviants)
    return run


def _analyse(bus: MemoryBus, report: RoundReport, submitted: Dataset, config: RoundConfig,
             row_of_id: dict[str, int], cost: list[SubjectCost]) -> CollaborativeRun:
    group_of: dict[bytes, int] = {}
    # The release the collector holds (a deviating one may show some subjects another one).
    block_ids = tuple(report.outcome.group_ids)
    submits: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    reveals: dict[int, list[tuple[float, int, int]]] = defaultdict(list)
    key_row: dict[bytes, int] = {}
    for publication in bus.publications or ():
        if not publication.payload:
            continue
        message = codec.decode_own(publication.payload, _LIMITS)
        if publication.sender == COLLECTOR_ID:
            if isinstance(message, Assign):
                group_of[bytes(message.subject)] = message.group
            continue
        row = row_of_id.get(publication.sender)
        if row is None:
            continue
        if isinstance(message, Submit):
            key_row[bytes(message.sender)] = row
            submits[message.group].append((publication.at, row, message.run))
        elif isinstance(message, Reveal):
            reveals[message.group].append((publication.at, row, message.run))
    release = np.asarray(report.outcome.rows, dtype=np.float64)
    sizes = list(report.outcome.group_sizes)
    n = submitted.n
    row_of_subject = np.full(n, -1, dtype=np.intp)
    block_of_subject = np.full(n, -1, dtype=np.intp)
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(int)
    block_of_label = {label: b for b, label in enumerate(block_ids)}
    members: dict[int, list[int]] = defaultdict(list)
    for key, row in key_row.items():
        label = group_of.get(key)
        if row >= 0 and label is not None and label in block_of_label:
            members[block_of_label[label]].append(row)
    n_qi = len(config.qi)
    conf = submitted.select(list(config.confidential)).values
    for b, rows in members.items():
        block = release[starts[b]:starts[b + 1], n_qi:]
        free = list(range(block.shape[0]))
        for row in sorted(rows):
            for position in free:
                if np.array_equal(block[position], conf[row]):
                    free.remove(position)
                    row_of_subject[row] = starts[b] + position
                    block_of_subject[row] = b
                    break
    orders: dict[int, dict[str, list[int]]] = {}
    for label, b in block_of_label.items():
        by_submit = _last_run(submits.get(label, []))
        orders[b] = {
            "submission_order": by_submit,
            "reverse_submission_order": by_submit[::-1],
            "reveal_order": _last_run(reveals.get(label, [])),
            # The mixing order: members sorted by their round key (what the shuffle's first mixer uses).
            "mixing_order": [key_row[k] for k in sorted(key_row) if key_row[k] in set(by_submit)],
        }
    return CollaborativeRun(report, release, row_of_subject, block_of_subject, sizes, cost, orders)


def _last_run(entries: list[tuple[float, int, int]]) -> list[int]:
    """Members of the group's last shuffle run in the order of their first message (re-sends ignored)."""
    if not entries:
        return []
    run = max(e[2] for e in entries)
    seen: dict[int, float] = {}
    for at, row, r in entries:
        if r == run and row not in seen:
            seen[row] = at
    return [row for row, _ in sorted(seen.items(), key=lambda kv: (kv[1], kv[0]))]
