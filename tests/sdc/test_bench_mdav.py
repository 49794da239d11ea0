"""The MDAV benchmark's goal bookkeeping (the benchmark itself runs outside the test suite)."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "simulations" / "bench" / "bench_mdav.py"


@pytest.fixture(scope="module")
def bench() -> dict[str, Any]:
    # The script is part of the repository: a missing script is a failure, not a skip.
    assert SCRIPT.is_file(), f"{SCRIPT} is missing"
    return runpy.run_path(str(SCRIPT))


def _exact(n: int, seconds: float, identical: bool | None) -> dict[str, Any]:
    return {"n": n, "fast_s": seconds, "identical": identical}


def _partitioned(n: int, seconds: float, ratio: float | None) -> dict[str, Any]:
    return {"n": n, "partitioned_s": seconds, "ratio_to_exact": ratio}


def test_goals_are_checked_against_the_issue_thresholds(bench: dict[str, Any]) -> None:
    evaluate = bench["evaluate_goals"]
    met = evaluate([_exact(100_000, 4.0, True)], [_partitioned(100_000, 3.0, 1.03), _partitioned(1_000_000, 50, None)])
    assert [g["met"] for g in met] == [True, True, True, True, True]
    assert met[1]["measured"] == pytest.approx(57.0 / 4.0)
    missed = evaluate(
        [_exact(100_000, 6.0, False)], [_partitioned(100_000, 3.0, 1.06), _partitioned(1_000_000, 61, None)]
    )
    assert [g["met"] for g in missed] == [False, False, False, False, False]
    # Quick runs have none of the goal sizes: nothing is claimed.
    assert evaluate([_exact(2000, 0.1, True)], [_partitioned(5000, 0.1, 1.0)]) == []
