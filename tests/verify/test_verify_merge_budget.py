"""The auditor's merge-order search bounded over the whole transcript (`_SEARCH_WORK`), and the order the transcript
lists an instant's merges in tried first (an honest collector lists them in the order it issued them).

Before, each set of dependent merges of one instant had its own allowance (the work of an exhaustive search of 12),
about 1.9 s of verify each, so a collector publishing hundreds of them made `coutil verify` take minutes; and beyond
it each merge was compared under any state the others may have left, which two swapped merges pass.

The crafted round, per structure: groups X, Y, A (nearest X) and B (nearest Y), as in
tests/verify/test_verify_merge_fallback.py, whose collector swaps A's and B's movers (A into Y, B into X: no order of
the instant takes each to its nearest group); and ``ring`` groups R_i, each with a group T_i of its own on its own
axis, nearer to R_i than X is, but farther than X once X holds B's movers. Every R_i falls below k at the same `now`
as A and B and merges, honestly, into T_i: each R_i depends on B's merge (X after it would have taken R_i's movers
first) without its order being fixed by it, so every one of the 2^ring sets of R_i can come first and the search
goes through all of them before it finds that A and B cannot follow. With ring = 13 the old allowance ran out and
the swap passed the weaker check; with two structures at one instant the old search went through both.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.protocol import crypto
from coutil.protocol.collector_groups import GroupState
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.round import verify_grouping
from tests.verify.test_verify import failed, verify
from tests.verify.test_verify_merge_fallback import GRID, NamedOnGrid, play_on_grid


def _data(ring: int, structures: int) -> tuple[RoundConfig, np.ndarray, list[str]]:
    """Groups of exactly k = 3 records 0.01 apart: (config, QIs, each record's group name, "<structure>:<group>")."""
    dims = 2 + ring + 1  # the last axis puts the structures 1000 apart
    centres: list[tuple[str, np.ndarray]] = []
    for n in range(structures):
        def at(a: float, b: float, axis: int | None = None, along: float = 0.0, n: int = n) -> np.ndarray:
            centre = np.zeros(dims)
            centre[:2] = a, b
            centre[-1] = 1000.0 * n
            if axis is not None:
                centre[2 + axis] = along
            return centre

        centres += [(f"{n}:X", at(0.0, 0.0)), (f"{n}:Y", at(40.0, 0.0)), (f"{n}:A", at(15.0, 30.0)),
                    (f"{n}:B", at(25.0, -30.0))]
        # X after B's two movers is at (10, -12): R_i is 30 from it (900), T_i 32 from R_i (1024), X before B's
        # movers sqrt(244 + 900) (1144); B's movers stay nearest Y (1125) before R_i (1449) and X (1525).
        centres += [(f"{n}:R{i}", at(10.0, -12.0, i, 30.0)) for i in range(ring)]
        centres += [(f"{n}:T{i}", at(10.0, -12.0, i, 62.0)) for i in range(ring)]
    qi = np.array([centre + np.eye(dims)[0] * 0.01 * m for _, centre in centres for m in range(3)])
    names = [name for name, _ in centres for _ in range(3)]
    config = RoundConfig(qi=tuple(f"q{i}" for i in range(dims)), confidential=("income",), k=3, random_records=50,
                         step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)
    return config, qi, names


class _Crafted(NamedOnGrid):
    """Every timeout at a multiple of 15 s; with ``swap``, at the first such `now`, each structure's R_i handled
    first (honestly, into T_i), then B (into X), then A (into Y), and the transcript lists them so."""

    swap = False
    ring = 0
    structures = 0
    merges: list[tuple[str, str]]

    def _group_timeout(self, group: GroupState, now: float) -> list[Outgoing]:
        if self._off_grid(group, now):
            return []
        out: list[Outgoing] = []
        if self.swap and not getattr(self, "ordered", False) and now % GRID == 0.0:
            self.ordered = True
            for n in range(self.structures):
                for name in [*(f"{n}:R{i}" for i in range(self.ring)), f"{n}:B", f"{n}:A"]:
                    other = self._named(name)
                    if other.active and not other.reveal_sent and other.silent_members():  # ``group`` too
                        out += super()._group_timeout(other, now)
        return out + (super()._group_timeout(group, now) if group.active else [])

    def _merge_target(self, group: GroupState) -> GroupState | None:
        nearest = super()._merge_target(group)
        name = self._label_name(group.label)
        structure, own = name.split(":")
        swapped = {"A": "Y", "B": "X"}.get(own) if self.swap else None
        chosen = self._named(f"{structure}:{swapped}") if swapped is not None else nearest
        assert chosen is not None
        self.merges = [*getattr(self, "merges", []), (name, self._label_name(chosen.label))]
        return chosen


def _run(tmp_path: Path, ring: int, structures: int, swap: bool, seed: int = 1) -> tuple[Path, _Crafted]:
    config, qi, names = _data(ring, structures)
    root = SeededRandom(seed)
    rng = root.fork("collector")
    collector = _Crafted(config, identity=crypto.SigningKey.generate(rng.fork("identity")), rng=rng,
                         round_id=root.fork("round").bytes(16))
    collector.swap, collector.ring, collector.structures = swap, ring, structures
    # One member of each A, B and R_i, registered, nothing of her run sent.
    silent = [i for i, name in enumerate(names) if name.split(":")[1][0] in "ABR" and i % 3 == 2]
    directory = tmp_path / f"ring-{ring}-{structures}-{'swap' if swap else 'honest'}"
    return play_on_grid(collector, qi, names, silent, 5.0, directory, seed), collector


def _expected(ring: int, structures: int, swap: bool) -> list[tuple[str, str]]:
    pair = [("A", "Y"), ("B", "X")] if swap else [("A", "X"), ("B", "Y")]
    return sorted((f"{n}:{a}", f"{n}:{b}") for n in range(structures)
                  for a, b in [*((f"R{i}", f"T{i}") for i in range(ring)), *pair])


def _counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of ``verify_grouping.<name>`` (the old code's too: the test must be able to fail on it)."""
    calls = [0]
    real: Callable[..., Any] = getattr(verify_grouping, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(verify_grouping, name, counted)
    return calls


def test_two_swapped_merges_behind_thirteen_free_ones_are_caught(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """15 dependent merges at one instant: the old allowance ran out (2^13 sets) and each merge was compared under
    any state of the others, which the swap passes (verify exit 0)."""
    directory, collector = _run(tmp_path, ring=13, structures=1, swap=True)
    assert sorted(collector.merges) == _expected(13, 1, swap=True), collector.merges
    code, result, _ = verify(directory, capsys)
    problems = failed(result)
    assert code == 3 and list(problems) == ["grouping"], problems


def test_the_order_search_is_bounded_over_the_whole_transcript(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Two such structures at one instant, under a search allowance of 300 units for the transcript: the first part
    spends it, the second is not searched; each fails naming the instant. Before, each part had its own allowance
    (2^8 sets each, well within it): about 2 x 1,500 `_blocker` calls."""
    ring, structures, work = 8, 2, 300
    monkeypatch.setattr(verify_grouping, "_SEARCH_WORK", work, raising=False)
    directory, collector = _run(tmp_path, ring=ring, structures=structures, swap=True)
    assert sorted(collector.merges) == _expected(ring, structures, swap=True), collector.merges
    calls = _counting(monkeypatch, "_blocker")
    code, result, _ = verify(directory, capsys)
    problems = failed(result)
    assert code == 3 and list(problems) == ["grouping"], problems
    merges = structures * (ring + 2)
    # Each call costs at least one unit of the allowance; the listed order takes at most one call per merge.
    assert calls[0] <= work + merges, calls[0]
    budget = [p for p in problems["grouping"] if "more search than" in p]
    instants = {p.split(" into and out of")[0].split(" issued at ")[1] for p in budget}
    assert len(budget) == structures and len(instants) == 1, problems  # one instant, its two parts


def test_an_honest_round_of_many_dependent_merges_at_one_instant_needs_no_search(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The same round with an honest collector (its own order of the step, `fair_order`): the order the transcript
    lists the merges in fits, and nothing is searched (before, every part of every instant was)."""
    ring, structures = 8, 2
    directory, collector = _run(tmp_path, ring=ring, structures=structures, swap=False)
    assert sorted(collector.merges) == _expected(ring, structures, swap=False), collector.merges
    searches = _counting(monkeypatch, "_longest_order")
    code, result, _ = verify(directory, capsys)
    assert code == 0, failed(result)
    assert searches[0] == 0
