"""Shuffle traffic per subject against the group size k (protocol v2: O(k) bytes per member per step).

Reproduce with::

    python simulations/bench/bench_shuffle_traffic.py              # k = 3, 10, 20, 40
    python simulations/bench/bench_shuffle_traffic.py --k 3 10     # a quick run

One round in memory (`coutil.round.memory.run_memory_round`, real cryptography) per k, with
``groups`` x k subjects so that every group has exactly k members; measures the bytes each subject
*received* excluding bulletins (announce, roster, release: the same for everyone and independent of
k). Protocol v2 sends a submission only to the first mixer and batch j only to mixer j + 1 (the final
batch to all, since all vote on it), so a subject receives O(k) items instead of O(k^2).
Goals: k = 10 at most 15 KB, k = 40 at most 250 KB (protocol v1 measured 4.9 KB at k = 3, 43 KB at
k = 10, 249 KB at k = 20, 1.7 MB at k = 40). Prints a table and writes
``simulations/bench/results/bench_shuffle_traffic.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, cast

from coutil.protocol.config import RoundConfig
from coutil.round.memory import run_memory_round
from coutil.round.simulation import synthetic_dataset

RESULTS = Path(__file__).parent / "results" / "bench_shuffle_traffic.json"
#: Bytes received per subject (excluding bulletins): the goals of issue 12.
GOALS = {10: 15_000, 40: 250_000}
#: Protocol v1 on the same measure, for the ratio column.
V1 = {3: 4_900, 10: 43_000, 20: 249_000, 40: 1_700_000}


def bench(k: int, groups: int, seed: int) -> dict[str, Any]:
    config = RoundConfig(qi=("age", "height"), confidential=("income",), k=k, random_records=100)
    n = groups * k
    data = synthetic_dataset(n, config, seed)
    t0 = time.perf_counter()
    report = run_memory_round(data, config, seed=seed)
    wall = time.perf_counter() - t0
    summary = report.summary()
    traffic = cast(dict[str, dict[str, float]], summary["traffic_per_subject"])
    received = traffic["received_bytes_excl_bulletin"]
    messages = traffic["received_messages_excl_bulletin"]
    goal = GOALS.get(k)
    return {
        "k": k,
        "subjects": n,
        "completed": summary["completed"],
        "wall_seconds": wall,
        "received_bytes_excl_bulletin_mean": received["mean"],
        "received_bytes_excl_bulletin_max": received["max"],
        "received_messages_excl_bulletin_mean": messages["mean"],
        "v1_bytes": V1.get(k),
        "ratio_to_v1": None if k not in V1 else received["mean"] / V1[k],
        "goal_bytes": goal,
        "meets_goal": None if goal is None else received["mean"] <= goal,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="bytes received per subject in the shuffle, against k")
    parser.add_argument("--k", type=int, nargs="+", default=[3, 10, 20, 40])
    parser.add_argument("--groups", type=int, default=3, help="groups per round (subjects = groups x k)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [bench(k, args.groups, args.seed) for k in args.k]
    print(f"{'k':>4} {'n':>5} {'ok':>3} {'KB recv/subj':>13} {'max KB':>8} {'msgs':>6} {'v1 KB':>8} "
          f"{'x v1':>6} {'goal KB':>8} {'wall s':>7}")
    for row in rows:
        goal = "-" if row["goal_bytes"] is None else (
            f"{row['goal_bytes'] / 1e3:.0f} " + ("met" if row["meets_goal"] else "MISSED"))
        v1 = "-" if row["v1_bytes"] is None else f"{row['v1_bytes'] / 1e3:.1f}"
        ratio = "-" if row["ratio_to_v1"] is None else f"{row['ratio_to_v1']:.2f}"
        print(f"{row['k']:>4} {row['subjects']:>5} {'y' if row['completed'] else 'n':>3} "
              f"{row['received_bytes_excl_bulletin_mean'] / 1e3:13.1f} "
              f"{row['received_bytes_excl_bulletin_max'] / 1e3:8.1f} "
              f"{row['received_messages_excl_bulletin_mean']:6.1f} "
              f"{v1:>8} {ratio:>6} {goal:>8} {row['wall_seconds']:7.2f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": platform.platform(), "python": sys.version.split()[0],
                                    "groups": args.groups, "seed": args.seed, "rows": rows}, indent=2) + "\n")
    return 0 if all(row["completed"] and row["meets_goal"] is not False for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
