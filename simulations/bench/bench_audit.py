"""Benchmark of the (d, v)-permuted privacy audit (coutil.audit.ranks): issue 3, item 8.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_audit.py            # full sizes (about 2-3 minutes on 2 cores)
    python simulations/bench/bench_audit.py --quick    # small sizes, a few seconds

Three parts, all on i.i.d. normal attributes masked with additive noise (0.5 x the variance):

1. ``full``: the data protector's audit of ``coutil audit --original --release`` without the CSV
   reading: rank index of the release, star intervals, permutation distance with all tied closest
   records, window variances at each record's own distance and at the data-set distance.
   Goal: n = 10^6, m = 5 in <= 60 s.
2. ``subject``: one subject's audit as ``coutil audit --record-values``: index, her distance and
   variances, and 10^5 random records made of release values (the plausibility test).
   Goal: n = 10^5, m = 5, 10^5 random records in <= 2 s.
3. ``reference``: the plain O(n^2) reference (every record against every release row, vectorised
   per record, as in tests/audit/test_ranks.py) beside the fast index on the same records, with the
   speed-up measured in the same run. At sizes where the reference would take too long it runs on a
   sample of records and its time is scaled to all n (marked ``extrapolated``); the answers of the
   two are compared on every record the reference ran on.

A table goes to stdout, JSON to simulations/bench/results/bench_audit.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from coutil.audit.intruder import empirical_p_values, random_record_distances
from coutil.audit.ranks import Nearest, RankIndex

RESULTS = Path(__file__).resolve().parent / "results" / "bench_audit.json"
T = TypeVar("T")


def _timed(action: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = action()
    return value, time.perf_counter() - start


def _masked(n: int, m: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    original = rng.normal(size=(n, m))
    return original, original + rng.normal(scale=np.sqrt(0.5), size=original.shape)


def bench_full(n: int, m: int, seed: int) -> dict[str, Any]:
    original, release = _masked(n, m, seed)
    start = time.perf_counter()
    index, build_s = _timed(lambda: RankIndex.build(release))
    (star_lo, star_hi), star_s = _timed(lambda: index.star(original))
    nearest, nearest_s = _timed(lambda: index.nearest(star_lo, star_hi, want_ties=True))
    _, own_s = _timed(lambda: index.window_variance(star_lo, star_hi, nearest.distance))
    dataset_distance = int(nearest.distance.min())
    _, dataset_s = _timed(lambda: index.window_variance(star_lo, star_hi, dataset_distance))
    total = time.perf_counter() - start
    return {
        "part": "full",
        "n": n,
        "m": m,
        "build_s": build_s,
        "star_s": star_s,
        "nearest_s": nearest_s,
        "variance_own_s": own_s,
        "variance_dataset_s": dataset_s,
        "total_s": total,
        "goal_s": 60.0 if n >= 10**6 else None,
        "median_distance": float(np.median(nearest.distance)),
        "dataset_distance": dataset_distance,
        "max_tied_matches": int(nearest.matches.counts().max()),
    }


def bench_subject(n: int, m: int, random_records: int, seed: int) -> dict[str, Any]:
    original, release = _masked(n, m, seed)
    own = original[:1]
    start = time.perf_counter()
    index = RankIndex.build(release)
    star_lo, star_hi = index.star(own)
    nearest = index.nearest(star_lo, star_hi, want_ties=True)
    index.window_variance(star_lo, star_hi, nearest.distance)
    own_s = time.perf_counter() - start
    distribution, random_s = _timed(
        lambda: random_record_distances(index, index.lo, index.hi, random=random_records, seed=seed)
    )
    p_value = float(empirical_p_values(nearest.distance, distribution)[0])
    total = time.perf_counter() - start
    return {
        "part": "subject",
        "n": n,
        "m": m,
        "random_records": random_records,
        "own_record_s": own_s,
        "random_s": random_s,
        "total_s": total,
        "goal_s": 2.0 if n >= 10**5 and random_records >= 10**5 else None,
        "distance": int(nearest.distance[0]),
        "p_value": p_value,
    }


def reference_nearest(index: RankIndex, lo: NDArray[np.int64], hi: NDArray[np.int64]) -> list[list[int]]:
    """O(n) per record: the gap to every release row, then all rows at the minimum (the plain algorithm)."""
    answers = []
    for i in range(lo.shape[0]):
        gap = np.maximum(np.maximum(index.lo - hi[i], lo[i] - index.hi), 0).max(axis=1)
        answers.append([int(gap.min()), *np.flatnonzero(gap == gap.min()).tolist()])
    return answers


def bench_reference(n: int, m: int, sample: int, seed: int) -> dict[str, Any]:
    original, release = _masked(n, m, seed)

    def fast() -> Nearest:
        index = RankIndex.build(release)
        lo, hi = index.star(original)
        return index.nearest(lo, hi, want_ties=True)

    nearest, fast_s = _timed(fast)
    rows = np.arange(n) if n <= sample else np.random.default_rng(seed).choice(n, size=sample, replace=False)
    # The reference needs its own star intervals too: count their cost with the index build.
    def reference() -> list[list[int]]:
        plain = RankIndex.build(release)
        star_lo, star_hi = plain.star(original[rows])
        return reference_nearest(plain, star_lo, star_hi)

    answers, reference_s = _timed(reference)
    agree = all(
        answer == [int(nearest.distance[r]), *nearest.matches[int(r)].tolist()]
        for r, answer in zip(rows, answers, strict=True)
    )
    scaled = reference_s * n / rows.size
    return {
        "part": "reference",
        "n": n,
        "m": m,
        "fast_s": fast_s,
        "reference_records": int(rows.size),
        "reference_s": reference_s,
        "reference_all_s": scaled,
        "extrapolated": bool(rows.size < n),
        "speed_up": scaled / fast_s,
        "agree": agree,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        full_sizes, subject = [20_000], (20_000, 20_000)
        reference_sizes, sample = [1000, 4000], 1000
    else:
        full_sizes, subject = [10**5, 10**6], (10**5, 10**5)
        reference_sizes, sample = [1000, 4000, 16_000, 100_000], 4000
    m = 5
    rows: list[dict[str, Any]] = []
    for n in full_sizes:
        row = bench_full(n, m, args.seed)
        rows.append(row)
        print(
            f"full     n={n:>8} m={m}: total {row['total_s']:7.2f} s (build {row['build_s']:.2f}, star "
            f"{row['star_s']:.2f}, nearest {row['nearest_s']:.2f}, variances {row['variance_own_s']:.2f} + "
            f"{row['variance_dataset_s']:.2f}); goal {row['goal_s']} s",
            flush=True,
        )
    row = bench_subject(subject[0], m, subject[1], args.seed)
    rows.append(row)
    print(
        f"subject  n={row['n']:>8} m={m}: total {row['total_s']:7.3f} s (own record {row['own_record_s']:.3f}, "
        f"{row['random_records']} random records {row['random_s']:.3f}); goal {row['goal_s']} s",
        flush=True,
    )
    print(f"{'n':>8} {'fast s':>8} {'ref s':>9} {'ref recs':>9} {'speed-up':>9} {'agree':>6}")
    for n in reference_sizes:
        row = bench_reference(n, m, sample, args.seed)
        rows.append(row)
        mark = "*" if row["extrapolated"] else " "
        print(
            f"{n:>8} {row['fast_s']:>8.3f} {row['reference_all_s']:>8.2f}{mark} {row['reference_records']:>9} "
            f"{row['speed_up']:>9.1f} {row['agree']!s:>6}",
            flush=True,
        )
    print("* reference time scaled from the sampled records to all n")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "bench_audit",
                "command": "python simulations/bench/bench_audit.py" + (" --quick" if args.quick else ""),
                "machine": platform.platform(),
                "python": platform.python_version(),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"results written to {RESULTS}")


if __name__ == "__main__":
    main()
