"""Median splits: records cut recursively at the median of the attribute of widest spread (k-d style).

Neighbouring records (in the attributes given) end up in the same slice, which is what both users
need: `coutil.sdc.mdav.mdav_partitioned` runs exact MDAV inside blocks of at most ``max_size``
records (`split_in_blocks`), and the multi-process swarm hands each worker process one of N slices
of neighbouring QI vectors so that MDAV groups rarely straddle two processes (`split_in_parts`).

Both are one computation, `_median_splits`, that differs only in where it cuts and when it stops:
at each step the rows are ordered (stably, so ties keep row order) by the attribute whose range
(max - min) is widest, the lower ``cut`` rows go left and the rest right; slices come out left to
right, each in increasing row order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.sdc.stats import zscore

FloatMatrix = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: Given a slice's size and its budget (parts left, or unused), None to keep it whole, or
#: (how many rows go left, the left side's budget, the right side's budget).
CutRule = Callable[[int, int], tuple[int, int, int] | None]


def _median_splits(z: FloatMatrix, rule: CutRule, budget: int) -> list[IntArray]:
    slices: list[IntArray] = []
    stack = [(np.arange(z.shape[0], dtype=np.intp), budget)]
    while stack:  # depth first, left before right: slices come out in order along the cuts
        index, budget = stack.pop()
        step = rule(index.size, budget)
        if step is None:
            slices.append(np.sort(index))
            continue
        cut, left_budget, right_budget = step
        sub = z[index]
        if sub.shape[1] == 0:  # no attribute to order by: keep row order
            order = np.arange(index.size, dtype=np.intp)
        else:
            axis = int(np.argmax(np.ptp(sub, axis=0))) if index.size else 0
            order = np.argsort(sub[:, axis], kind="stable")
        stack.append((index[order[cut:]], right_budget))
        stack.append((index[order[:cut]], left_budget))
    return slices


def split_in_blocks(z: FloatMatrix, max_size: int) -> list[IntArray]:
    """Halve (the lower ``size // 2`` rows left) until every block holds at most ``max_size`` rows.

    ``z`` is used as given: scale the attributes first (MDAV passes its z-scores).
    """
    if max_size < 1:
        raise ValueError(f"bad max_size {max_size}: expected at least 1")

    def halve(size: int, _: int) -> tuple[int, int, int] | None:
        return None if size <= max_size else (size // 2, 0, 0)

    return _median_splits(np.asarray(z, dtype=np.float64), halve, 0)


def split_in_parts(values: Any, parts: int) -> list[IntArray]:
    """The rows of ``values`` in ``parts`` slices of neighbouring records, sizes within one of n / parts.

    The attributes (columns; a 1-D array is one attribute) are z-scored first. Each cut sends
    ``round(size * left / parts)`` rows to the left, ``left = parts // 2`` of the parts, so that
    the sizes stay balanced for any number of parts; with no rows, every slice is empty.
    """
    if parts < 1:
        raise ValueError(f"bad parts {parts}: expected at least 1")
    x = np.asarray(values, dtype=np.float64)
    if x.ndim == 1:
        x = x[:, None]
    if x.shape[0] == 0:
        return [np.empty(0, dtype=np.intp) for _ in range(parts)]

    def proportional(size: int, budget: int) -> tuple[int, int, int] | None:
        left = budget // 2
        return None if budget == 1 else (round(size * left / budget), left, budget - left)

    return _median_splits(zscore(x), proportional, parts)
