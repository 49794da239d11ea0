"""Every `coutil anonymize` method through the shared skeleton: the file written and the --json summary
are exactly what a direct call of the library's masking function gives (cell for cell, figure for figure),
and the run without --json writes the same bytes and says so in one line."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from coutil.cli import main
from coutil.sdc.dataset import format_number, load_csv
from coutil.sdc.infoloss import il1s, sse_sst_percent_groups, sse_sst_percent_pair
from coutil.sdc.masking import (
    additive_noise,
    local_anonymization,
    multiplicative_noise,
    rank_swap,
    rank_swap_window,
    synthetic_normal,
)
from coutil.sdc.mdav import mdav

Mask = Callable[[NDArray[np.float64]], NDArray[np.float64]]
COLUMNS = ["a", "b"]
N = 30

#: method -> (its options, the direct call, the expected "parameters" of --json)
METHODS: dict[str, tuple[list[str], Mask, dict[str, Any]]] = {
    "mdav": (["--k", "4"], lambda v: mdav(v, 4).masked(), {"k": 4}),
    "rankswap": (["--p", "20", "--seed", "4"], lambda v: rank_swap(v, 20.0, 4),
                 {"p": 20.0, "seed": 4, "window_ranks": rank_swap_window(N, 20.0)}),
    "noise": (["--a", "0.2", "--seed", "3"], lambda v: additive_noise(v, 0.2, 3), {"a": 0.2, "seed": 3}),
    "mult-noise": (["--a", "0.3"], lambda v: multiplicative_noise(v, 0.3, 0), {"a": 0.3, "seed": 0}),
    "synthetic": (["--seed", "2"], lambda v: synthetic_normal(v, 2), {"seed": 2}),
    "local": (["--a", "0.2", "--scales", "1.5,2", "--seed", "7"],
              lambda v: local_anonymization(v, [1.5, 2.0], 0.2, 7),
              {"a": 0.2, "seed": 7, "scales": [1.5, 2.0], "scales_from": "--scales"}),
}


@pytest.fixture
def data_csv(tmp_path: Path) -> Path:
    rng = np.random.default_rng(11)
    path = tmp_path / "in.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "a", "note", "b"])
        for i in range(N):
            writer.writerow([f"p{i}", round(float(rng.normal(50, 10)), 2), f"n{i % 3}", int(rng.integers(0, 100))])
    return path


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


@pytest.mark.parametrize("method", list(METHODS))
def test_release_and_summary_are_the_library_call(
    method: str, data_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options, direct, parameters = METHODS[method]
    out = tmp_path / "out.csv"
    common = ["--columns", ",".join(COLUMNS), "--decimals", "2", "-o", str(out)]
    assert main(["anonymize", method, str(data_csv), *options, *common, "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)

    x = load_csv(data_csv, COLUMNS).values
    released = np.round(direct(x), 2) + 0.0
    original = _rows(data_csv)
    expected = [original[0]] + [
        [row[0], format_number(released[i, 0]), row[2], format_number(released[i, 1])]
        for i, row in enumerate(original[1:])
    ]
    assert _rows(out) == expected
    extra: dict[str, Any] = {}
    if method == "mdav":
        result = mdav(x, 4)
        extra = {"k": 4, "groups": result.n_groups, "min_group_size": int(result.sizes.min()),
                 "max_group_size": int(result.sizes.max()), "exact": True}
    summary = {
        "n": N, "method": method, "parameters": parameters, "columns": COLUMNS, "input": str(data_csv),
        "output": str(out), **extra, "sse_sst_percent": sse_sst_percent_pair(x, released),
        "il1s": il1s(x, released), "sse_sst_basis": "values as written",
    }
    if method == "mdav":
        summary["partition_sse_sst_percent"] = sse_sst_percent_groups(x, np.asarray(mdav(x, 4).groups))
    assert report == summary
    assert list(report) == list(summary)  # the keys in their documented order

    written = out.read_bytes()
    out.unlink()
    assert main(["anonymize", method, str(data_csv), *options, *common]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert out.read_bytes() == written
    partition = (
        f" (partition before rounding: {summary['partition_sse_sst_percent']:.2f}%)" if method == "mdav" else ""
    )
    assert " ".join(captured.err.split()) == (
        f"wrote {out}: {N} records, {method} on a, b; SSE/SST = {summary['sse_sst_percent']:.2f}%{partition}, "
        f"IL1s = {summary['il1s']:.4f}"
    )
