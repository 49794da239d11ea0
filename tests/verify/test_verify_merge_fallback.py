"""A collector that forces the auditor's merge-order search (`_check_instant`, b410e13) into its weaker fallback, found
by an attacker of that commit: beyond 12 merges of one instant that depend on one another, each merge was compared
under any state the others may have left, which is the check two swapped merges had passed before the search.

The round is built so: a group X, a group Y, a group A nearest to X and a group B nearest to Y, and `ring` groups each
nearest to X (one axis each, so they are nearer to X than to one another); one member of every group but X and Y
goes silent, and the collector handles every timeout at one `now` (a grid of 15 s, as in
tests/verify/test_verify_merge_order.py), so that every merge is of one instant. The deviating collector swaps A's and
B's movers (A into Y, B into X) and merges B into X first: each swapped merge is then excused by a state of the other
target that only the other order has (X after B's movers for A, Y after A's for B), and no order of the instant takes
each merge to its nearest group. With 10 ring groups (12 merges) the search caught it; with 14 (16 merges) the swap
passed verify. The search then ran for any number of merges within the work 12 may take: many merges into one group
leave few orders (X's signed run order fixes theirs), and it ends. Since, beyond the work the auditor grants a
transcript, the check fails rather than falling back (tests/verify/test_verify_merge_budget.py).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol import crypto
from coutil.protocol.collector import CollectorNode
from coutil.protocol.collector_groups import GroupState
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.round.report import RoundReport, write_outputs
from coutil.round.transcript import TranscriptRecorder
from tests.verify.test_verify import failed, verify

GRID = 15.0


def _data(ring: int) -> tuple[RoundConfig, np.ndarray, list[str]]:
    """Groups of exactly k = 3 identical records but for a 0.01 step: (config, QIs, each record's group name)."""
    dims = 2 + ring
    places = {"X": (0.0, 0.0), "Y": (40.0, 0.0), "A": (15.0, 30.0), "B": (25.0, -30.0)}
    centres: list[tuple[str, np.ndarray]] = []
    for name, (a, b) in places.items():
        centre = np.zeros(dims)
        centre[:2] = a, b
        centres.append((name, centre))
    for i in range(ring):
        centre = np.zeros(dims)
        centre[2 + i] = 25.0
        centres.append((f"R{i}", centre))
    qi = np.array([centre + np.eye(dims)[0] * 0.01 * m for _, centre in centres for m in range(3)])
    names = [name for name, _ in centres for _ in range(3)]
    config = RoundConfig(qi=tuple(f"q{i}" for i in range(dims)), confidential=("income",), k=3, random_records=50,
                         step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)
    return config, qi, names


class NamedOnGrid(CollectorNode):
    """A crafting collector: groups named by their MDAV members (``name_of``), every timeout moved to a multiple of
    `GRID` seconds so that several groups time out at one `now` (shared with test_verify_merge_budget.py)."""

    name_of: dict[bytes, str]
    names: dict[int, str]

    def _label_name(self, label: int) -> str:
        """A group's name by its MDAV members (read at its first timeout, before any merge)."""
        if not hasattr(self, "names"):
            self.names = {g.label: self.name_of[g.members[0]] for g in self._groups.values()}
        return self.names[label]

    def _named(self, name: str) -> GroupState:
        return next(g for g in self._groups.values() if self._label_name(g.label) == name)

    def _off_grid(self, group: GroupState, now: float) -> bool:
        """A timeout with silent members before the grid: moved to the next multiple of `GRID` (True)."""
        if group.silent_members() and now % GRID != 0.0:
            group.deadline = math.ceil(now / GRID) * GRID
            return True
        return False


class _SwapOnGrid(NamedOnGrid):
    """Every timeout at a multiple of 15 s; with ``swap``, B's timeout handled first at that `now` and A's and B's
    movers routed to each other's nearest group."""

    swap = False
    merges: list[tuple[str, str, str]]

    def _group_timeout(self, group: GroupState, now: float) -> list[Outgoing]:
        if self._off_grid(group, now):
            return []
        out: list[Outgoing] = []
        if self.swap and not getattr(self, "b_first", False) and now % GRID == 0.0:
            b = self._named("B")
            if b is not group and b.active and not b.reveal_sent and b.silent_members():
                self.b_first = True
                out += super()._group_timeout(b, now)
        return out + (super()._group_timeout(group, now) if group.active else [])

    def _merge_target(self, group: GroupState) -> GroupState | None:
        nearest = super()._merge_target(group)
        name = self._label_name(group.label)
        chosen = self._named({"A": "Y", "B": "X"}[name]) if self.swap and name in ("A", "B") else nearest
        assert nearest is not None and chosen is not None
        self.merges = [*getattr(self, "merges", []), (name, self._label_name(chosen.label),
                                                       self._label_name(nearest.label))]
        return chosen


def _run(tmp_path: Path, ring: int, swap: bool, seed: int = 1) -> tuple[Path, _SwapOnGrid]:
    config, qi, names = _data(ring)
    root = SeededRandom(seed)
    rng = root.fork("collector")
    collector = _SwapOnGrid(config, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                            round_id=root.fork("round").bytes(16))
    collector.swap = swap
    silent = [i for i, name in enumerate(names) if name not in ("X", "Y") and i % 3 == 2]
    return play_on_grid(collector, qi, names, silent, 6.0, tmp_path / f"ring-{ring}-{'swap' if swap else 'honest'}",
                        seed), collector


def play_on_grid(collector: NamedOnGrid, qi: np.ndarray, names: list[str], silent: list[int], vanish_at: float,
                 directory: Path, seed: int) -> Path:
    """One in-memory round of ``collector`` with a subject per row of ``qi`` (named ``names``), the ``silent`` ones
    registered and then gone at ``vanish_at``; its run directory written by the round layer's `write_outputs`."""
    n = len(qi)
    root = SeededRandom(seed)
    recorder = TranscriptRecorder(collector)
    caches = SharedCaches()
    subjects = [SubjectNode(collector_key=collector.public_key, qi=qi[i], confidential=np.array([1000.0 + 10 * i]),
                            rng=root.fork(f"subject-{i}"), caches=caches, retry_interval=1.0) for i in range(n)]
    collector.name_of = {s.public_key: names[i] for i, s in enumerate(subjects)}
    bus = MemoryBus(seed=seed)
    bus.add_node("collector", recorder)
    for subject in subjects:
        bus.add_node(subject.sid, subject)
    for i in silent:
        bus.vanish(subjects[i].sid, vanish_at)
    bus.run_until(until=3000.0, predicate=lambda: collector.finished and all(
        s.finished for i, s in enumerate(subjects) if i not in silent))
    report = RoundReport(outcome=collector.outcome(), subjects=n, stop_reason="finished", virtual_time=bus.now,
                         wall_times={}, traffic={}, rejections={}, events=0, dropped={}, vanished=[],
                         subject_states={})
    transcript = recorder.transcript(include_registrations=True)
    assert transcript is not None
    write_outputs(report, [], directory, transcript, evidence=[s.verdict_evidence() for s in subjects])
    return directory


@pytest.mark.parametrize("ring", [10, 14])
def test_two_swapped_merges_among_many_of_one_instant_are_caught(
        ring: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    honest, collector = _run(tmp_path, ring, swap=False)
    assert ("A", "X", "X") in collector.merges and ("B", "Y", "Y") in collector.merges, collector.merges
    assert len(collector.merges) == ring + 2
    code, result, _ = verify(honest, capsys)
    assert code == 0, failed(result)
    grouping = next(c for c in result["checks"] if c["check"] == "grouping")
    assert not any("other than the one the transcript lists" in note for note in grouping["notes"]), grouping["notes"]
    swapped, collector = _run(tmp_path, ring, swap=True)
    assert ("A", "Y", "X") in collector.merges and ("B", "X", "Y") in collector.merges, collector.merges
    code, result, _ = verify(swapped, capsys)
    problems = failed(result)
    assert code == 3 and list(problems) == ["grouping"], problems
    assert any("not the nearest group" in p for p in problems["grouping"]), problems
