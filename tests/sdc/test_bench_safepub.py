"""The SafePub benchmark's helpers (the benchmark itself runs outside the test suite; it needs scikit-learn)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.sdc.hierarchy import IntervalHierarchy

SCRIPT = Path(__file__).resolve().parents[2] / "simulations" / "bench" / "bench_safepub.py"


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    assert SCRIPT.is_file(), f"{SCRIPT} is missing"
    return runpy.run_path(str(SCRIPT))


def test_midpoints_of_released_labels(bench: dict[str, Any]) -> None:
    midpoint = bench["_midpoint"]
    assert midpoint("[0, 500[", 0, 8000) == 250
    assert midpoint("[4000, 8000]", 0, 8000) == 6000
    assert midpoint("*", 0, 8000) == 4000
    assert midpoint("1234", 0, 8000) == 1234


def test_domains_cover_the_census_file(bench: dict[str, Any]) -> None:
    from coutil.sdc.dataset import read_csv_table

    table = read_csv_table(bench["DATA"])
    for column, (low, high, widths) in bench["QI_DOMAINS"].items():
        j = table.header.index(column)
        h = IntervalHierarchy.from_widths(column, "bench", low, high, widths)
        h.encode([row[j] for row in table.rows])  # raises if a value is outside the domain


def test_nothing_released_predicts_a_constant(bench: dict[str, Any]) -> None:
    accuracy = bench["_accuracy"]
    test_y = np.array([True, False, False, False])
    assert accuracy(np.zeros((0, 2)), np.zeros(0, dtype=bool), np.zeros((4, 2)), test_y) == 0.75
    assert accuracy(np.zeros((3, 2)), np.ones(3, dtype=bool), np.zeros((4, 2)), test_y) == 0.25
