"""Median splits (`coutil.sdc.partition`): the blocks of `mdav_partitioned` and the N balanced slices of
the multi-process swarm, checked against the two separate implementations they replace."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from coutil.sdc.mdav import mdav_partitioned, standardize_to_grid
from coutil.sdc.partition import split_in_blocks, split_in_parts


def _reference_blocks(z: NDArray[np.float64], block_size: int) -> list[NDArray[np.intp]]:
    """mdav.py's former `_split_blocks`, verbatim."""
    blocks: list[NDArray[np.intp]] = []
    stack = [np.arange(z.shape[0], dtype=np.intp)]
    while stack:
        index = stack.pop()
        if index.size <= block_size:
            blocks.append(np.sort(index))
            continue
        sub = z[index]
        dim = int(np.argmax(np.ptp(sub, axis=0)))
        half = index.size // 2
        order = np.argsort(sub[:, dim], kind="stable")
        stack.append(index[order[half:]])
        stack.append(index[order[:half]])
    return blocks


def _reference_parts(qi: NDArray[np.float64], workers: int) -> list[tuple[int, ...]]:
    """coutil/net/workers.py's `split_rows_by_qi` (recursive), verbatim but for the worker check."""
    values = np.asarray(qi, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    if values.shape[0] == 0:
        return [() for _ in range(workers)]
    spread = values.std(axis=0)
    z = (values - values.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    slices: list[tuple[int, ...]] = []

    def split(index: NDArray[np.intp], parts: int) -> None:
        if parts == 1:
            slices.append(tuple(int(i) for i in np.sort(index)))
            return
        left_parts = parts // 2
        cut = round(index.size * left_parts / parts)
        sub = z[index]
        axis = int(np.argmax(np.ptp(sub, axis=0))) if sub.shape[1] and index.size else 0
        order = np.argsort(sub[:, axis], kind="stable") if sub.shape[1] else np.arange(index.size)
        split(index[order[:cut]], left_parts)
        split(index[order[cut:]], parts - left_parts)

    split(np.arange(values.shape[0], dtype=np.intp), workers)
    return slices


def _tuples(slices: list[NDArray[np.intp]]) -> list[tuple[int, ...]]:
    return [tuple(int(i) for i in rows) for rows in slices]


def test_parts_are_the_swarm_worker_slices() -> None:
    assert _tuples(split_in_parts(np.array([[5.0], [1.0], [4.0], [2.0], [3.0]]), 2)) == [(1, 3), (0, 2, 4)]
    assert _tuples(split_in_parts(np.array([5.0, 1.0, 4.0]), 3)) == [(1,), (2,), (0,)]
    assert _tuples(split_in_parts(np.zeros((0, 2)), 2)) == [(), ()]
    assert _tuples(split_in_parts(np.ones((4, 2)), 2)) == [(0, 1), (2, 3)]  # all equal: halves, in row order
    assert _tuples(split_in_parts(np.ones((3, 0)), 2)) == [(0, 1), (2,)]  # no attribute: row order, round(1.5) = 2
    rng = np.random.default_rng(3)
    for n, parts in ((2, 3), (7, 2), (1001, 4), (10, 1), (500, 7), (64, 16)):
        # Ties too: integers on a small range.
        for values in (rng.normal(size=(n, 2)), rng.integers(0, 4, size=(n, 3)).astype(float)):
            slices = split_in_parts(values, parts)
            assert _tuples(slices) == _reference_parts(values, parts)
            sizes = [rows.size for rows in slices]
            assert len(slices) == parts and max(sizes) - min(sizes) <= 1
            assert sorted(int(i) for rows in slices for i in rows) == list(range(n))
    with pytest.raises(ValueError, match="parts"):
        split_in_parts(np.ones((3, 1)), 0)


def test_blocks_are_the_former_mdav_blocks() -> None:
    rng = np.random.default_rng(5)
    for n, m, block_size in ((1000, 3, 100), (999, 2, 37), (50, 1, 50), (300, 4, 2)):
        for values in (rng.normal(size=(n, m)), rng.integers(0, 3, size=(n, m)).astype(float)):
            z = standardize_to_grid(values).values
            blocks = split_in_blocks(z, block_size)
            assert _tuples(blocks) == _tuples(_reference_blocks(z, block_size))
            assert max(b.size for b in blocks) <= block_size
            assert sorted(int(i) for b in blocks for i in b) == list(range(n))
    with pytest.raises(ValueError, match="max_size"):
        split_in_blocks(np.ones((3, 1)), 0)


def test_the_cut_is_at_the_median_of_the_widest_attribute() -> None:
    # Column 1 spreads over 100, column 0 over 3: the first cut orders by column 1.
    values = np.array([[0.0, 50.0], [1.0, 0.0], [2.0, 100.0], [3.0, 10.0]])
    assert _tuples(split_in_blocks(values, 2)) == [(1, 3), (0, 2)]


def test_mdav_partitioned_still_groups_inside_the_blocks() -> None:
    rng = np.random.default_rng(8)
    x = rng.normal(size=(400, 3))
    result = mdav_partitioned(x, 3, block_size=100)
    for block in split_in_blocks(standardize_to_grid(x).values, 100):
        inside = set(int(g) for g in result.groups[block])
        outside = set(int(g) for g in np.delete(result.groups, block))
        assert not inside & outside  # no group straddles two blocks
