"""Cells per minute of a co-utility study with 1 and 2 Dask workers (and in process, for the ratio).

    python simulations/bench/bench_experiment.py [--cells 8] [--n 100]

Prints a table on stdout and writes simulations/bench/results/bench_experiment.json. Each run uses a
fresh result directory; the cells are the deviations study's (synthetic records, k = 5, the
collaborative round with five focal subjects).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

STUDY = """
[study]
name = "bench"
seeds = {seeds}
methods = ["collaborative"]
focal = 5
intruder_random_records = 1000
[grid]
dataset = ["synthetic"]
n = [{n}]
k = [5]
deviation = ["honest", "misreport-qi"]
[round]
random_records = 100
"""


def main() -> None:
    from coutil.experiment.config import load_study
    from coutil.experiment.runner import run_study

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cells", type=int, default=8, help="cells per run (even)")
    parser.add_argument("--n", type=int, default=100, help="subjects per cell")
    args = parser.parse_args()
    seeds = list(range(1, args.cells // 2 + 1))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "bench.toml"
        config.write_text(STUDY.format(seeds=seeds, n=args.n))
        study = load_study(config)
        for workers in (0, 1, 2):
            start = time.perf_counter()
            stats = run_study(study, Path(tmp) / f"out{workers}", workers=workers)
            wall = time.perf_counter() - start
            rows.append({"workers": workers, "cells": stats.computed, "wall_s": wall,
                         "cells_per_minute": 60.0 * stats.computed / wall})
    base = rows[0]["cells_per_minute"]
    print(f"{'workers':>8} {'cells':>6} {'wall s':>8} {'cells/min':>10} {'vs in-process':>14}")
    for row in rows:
        row["ratio_vs_in_process"] = row["cells_per_minute"] / base
        label = "in-process" if row["workers"] == 0 else str(row["workers"])
        print(f"{label:>8} {row['cells']:>6} {row['wall_s']:>8.1f} {row['cells_per_minute']:>10.1f} "
              f"{row['ratio_vs_in_process']:>13.2f}x")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_experiment.json"
    out.write_text(json.dumps({"n": args.n, "runs": rows, "date": time.strftime("%Y-%m-%d")}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
