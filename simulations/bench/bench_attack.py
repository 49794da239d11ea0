"""Benchmark of the maximum-knowledge intruder and the classical linkage attacks.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_attack.py            # full sizes
    python simulations/bench/bench_attack.py --quick --results /tmp/bench_attack_quick.json

For each data set size n (m = 3 normal attributes, additive noise of 0.5 x the variance) it times:
reverse mapping + linkage of the n originals (``link``), the distance of N sampled random records
(``random``, reported as records per second), distance-based record linkage on z-scores (``dbrl``)
and with the Mahalanobis distance (``mahal``), the global one-to-one linkage (``global``, only up
to its n cap), and the rank-swapping intersection attack on a rank-swapped copy (p = 2%,
``inter``). Ratios are measured in the same run. A table goes to stdout, JSON to
simulations/bench/results/bench_attack.json (``--quick``: bench_attack_quick.json; ``--results PATH``
writes elsewhere).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from coutil.audit.intruder import link_records, random_record_distances
from coutil.audit.linkage import (
    GLOBAL_LINKAGE_MAX_RECORDS,
    distance_linkage,
    global_linkage,
    rank_swap_intersection_attack,
)
from coutil.audit.permutation import reverse_map
from coutil.sdc.masking import rank_swap

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Rank-swapping parameter (percent) of the intersection attack's target.
SWAP_P = 2.0


def _timed(action: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = action()
    return value, time.perf_counter() - start


def bench_size(n: int, random_records: int, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    original = rng.normal(size=(n, 3))
    release = original + rng.normal(scale=np.sqrt(0.5), size=original.shape)
    z, reverse_seconds = _timed(lambda: reverse_map(original, release, seed=seed))
    (_matches, distances, index, star_lo, star_hi), link_seconds = _timed(lambda: link_records(original, z))
    distribution, random_seconds = _timed(
        lambda: random_record_distances(index, star_lo, star_hi, random=random_records, seed=seed)
    )
    dbrl, dbrl_seconds = _timed(lambda: distance_linkage(original, release, true_mapping="identity"))
    mahal, mahal_seconds = _timed(
        lambda: distance_linkage(original, release, metric="mahalanobis", true_mapping="identity")
    )
    swapped = rank_swap(original, SWAP_P, seed)
    inter, inter_seconds = _timed(
        lambda: rank_swap_intersection_attack(original, swapped, SWAP_P, true_mapping="identity")
    )
    row: dict[str, Any] = {
        "n": n,
        "m": 3,
        "reverse_map_s": reverse_seconds,
        "link_s": link_seconds,
        "random_records": random_records,
        "random_s": random_seconds,
        "random_records_per_s": random_records / random_seconds,
        "dbrl_s": dbrl_seconds,
        "dbrl_correct_rate": dbrl.score.correct_rate if dbrl.score else None,
        "mahalanobis_s": mahal_seconds,
        "mahalanobis_correct_rate": mahal.score.correct_rate if mahal.score else None,
        "intersection_p": SWAP_P,
        "intersection_s": inter_seconds,
        "intersection_mean_candidates": inter.mean_candidate_size,
        "intersection_unique_correct": inter.unique_correct_fraction,
        "median_distance": float(np.median(distances)),
        "random_mean_distance": float(
            np.average(np.arange(distribution.counts.size), weights=distribution.counts)
        ),
        "global_s": None,
    }
    if n <= GLOBAL_LINKAGE_MAX_RECORDS:
        glob, global_seconds = _timed(lambda: global_linkage(original, release, true_mapping="identity"))
        row["global_s"] = global_seconds
        row["global_correct_rate"] = glob.score.correct_rate if glob.score else None
    row["random_vs_link_per_record"] = (random_seconds / random_records) / max(link_seconds / n, 1e-12)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--results", type=Path, help="JSON file to write (default: simulations/bench/results/)")
    args = parser.parse_args()
    sizes = [500, 2000] if args.quick else [1000, 5000, 20000, 100000]
    random_records = 20_000 if args.quick else 200_000
    rows = [bench_size(n, random_records, args.seed) for n in sizes]
    header = (
        f"{'n':>7} {'revmap s':>9} {'link s':>8} {'random/s':>10} {'dbrl s':>8} {'mahal s':>8} "
        f"{'global s':>9} {'inter s':>8} {'rnd/link':>9}"
    )
    print(header)
    for r in rows:
        glob = f"{r['global_s']:.3f}" if r["global_s"] is not None else "-"
        print(
            f"{r['n']:>7} {r['reverse_map_s']:>9.3f} {r['link_s']:>8.3f} {r['random_records_per_s']:>10.0f} "
            f"{r['dbrl_s']:>8.3f} {r['mahalanobis_s']:>8.3f} {glob:>9} {r['intersection_s']:>8.3f} "
            f"{r['random_vs_link_per_record']:>9.2f}"
        )
    print(
        "correct-linkage rates (last n): dbrl {:.3f}, mahalanobis {:.3f}, intersection unique-correct {:.3f}".format(
            rows[-1]["dbrl_correct_rate"], rows[-1]["mahalanobis_correct_rate"], rows[-1]["intersection_unique_correct"]
        )
    )
    results = args.results or RESULTS_DIR / ("bench_attack_quick.json" if args.quick else "bench_attack.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "benchmark": "bench_attack",
                "command": "python simulations/bench/bench_attack.py" + (" --quick" if args.quick else ""),
                "machine": platform.platform(),
                "python": platform.python_version(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"results written to {results}")


if __name__ == "__main__":
    main()
