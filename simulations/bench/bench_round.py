"""Scale benchmark of a whole protocol round in memory (real cryptography, k = 5).

Reproduce with::

    python simulations/bench/bench_round.py                 # 10^3 and 10^4 subjects
    python simulations/bench/bench_round.py --sizes 100000
    python simulations/bench/bench_round.py --sizes 200 --seed 3   # quick smoke run

Goals: 10^4 subjects in <= 60 s of wall time, 10^5 in <= 15 min (on a 2-core machine). A round runs in
one process (`coutil.round.memory`); one round at scale runs on the real transport instead
(``bench_round_mqtt.py``: worker processes against a broker). Prints a
table (wall time per phase, virtual time, per-subject message and byte counts) and writes the same
numbers, plus the time-per-subject ratios measured in this run, to
``simulations/bench/results/bench_round.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from coutil.protocol.config import RoundConfig
from coutil.round.memory import run_memory_round
from coutil.round.simulation import synthetic_dataset
from coutil.round.tracker import PHASES as ROUND_PHASES

RESULTS = Path(__file__).parent / "results" / "bench_round.json"
GOALS = {10_000: 60.0, 100_000: 900.0}
PHASES = ("setup", *(str(p) for p in ROUND_PHASES), "outputs")


def bench(n: int, k: int, seed: int) -> dict[str, Any]:
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=k)
    data = synthetic_dataset(n, config, seed)
    t0 = time.perf_counter()
    report = run_memory_round(data, config, seed=seed)
    wall = time.perf_counter() - t0
    summary = report.summary()
    return {
        "subjects": n,
        "k": k,
        "completed": summary["completed"],
        "wall_total": wall,
        "wall_per_phase": summary["wall_times"],
        "virtual_time": summary["virtual_time"],
        "events": summary["events"],
        "traffic_per_subject": summary["traffic_per_subject"],
        "goal_seconds": GOALS.get(n),
        "meets_goal": None if n not in GOALS else wall <= GOALS[n],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="scale benchmark of a simulated round")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [bench(n, args.k, args.seed) for n in args.sizes]
    header = (f"{'n':>7} {'ok':>3} {'total s':>8} " + " ".join(f"{p[:8]:>8}" for p in PHASES)
              + f" {'virt s':>7} {'msg/subj':>9} {'max':>5} {'kB/subj':>8} {'kB excl':>8} {'goal':>6}")
    print(header)
    for row in rows:
        t = row["traffic_per_subject"]
        phases = " ".join(f"{row['wall_per_phase'].get(p, 0.0):8.2f}" for p in PHASES)
        goal = "-" if row["goal_seconds"] is None else ("met" if row["meets_goal"] else "MISSED")
        print(f"{row['subjects']:>7} {'y' if row['completed'] else 'n':>3} {row['wall_total']:8.2f} "
              f"{phases} "
              f"{row['virtual_time']:7.1f} {t['total_messages']['mean']:9.1f} {t['total_messages']['max']:5.0f} "
              f"{t['total_bytes']['mean'] / 1e3:8.1f} {t['total_bytes_excl_bulletin']['mean'] / 1e3:8.1f} {goal:>6}")
    base = rows[0]
    ratios = {
        str(row["subjects"]): {
            "subjects_ratio": row["subjects"] / base["subjects"],
            "wall_ratio": row["wall_total"] / base["wall_total"],
            "wall_per_subject_ratio": (row["wall_total"] / row["subjects"]) / (base["wall_total"] / base["subjects"]),
        }
        for row in rows[1:]
    }
    for size, r in ratios.items():
        print(f"n={size}: {r['subjects_ratio']:.0f}x the subjects of the first run took "
              f"{r['wall_ratio']:.1f}x the time "
              f"({r['wall_per_subject_ratio']:.2f}x per subject)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "benchmark": "bench_round",
        "command": "python simulations/bench/bench_round.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
        "runs": rows,
        "ratios_vs_first": ratios,
    }, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0 if all(row["completed"] for row in rows) else 4


if __name__ == "__main__":
    raise SystemExit(main())
