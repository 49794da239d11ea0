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
   The alternative diversity criteria of the windows (distinct-l, entropy-l, t-closeness) are timed
   beside, at the data-set distance, with the whole (d, v)-check of every record.
3. ``reference``: the plain O(n^2) reference (every record against every release row, vectorised
   per record, as in tests/audit/test_ranks.py) beside the fast index on the same records, with the
   speed-up measured in the same run. At sizes where the reference would take too long it runs on a
   sample of records and its time is scaled to all n (marked ``extrapolated``); the answers of the
   two are compared on every record the reference ran on.

4. ``diversity``: the prefix-sum t-closeness and entropy-l of every window against a plain reference
   (each window sliced out of the sorted column and measured with numpy), same run, same windows.

A table goes to stdout, JSON to simulations/bench/results/bench_audit.json (``--quick``:
bench_audit_quick.json, so that a quick run never overwrites the full figures).
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

from coutil.audit.diversity import CRITERIA, window_diversity
from coutil.audit.intruder import empirical_p_values, random_record_distances
from coutil.audit.privacy_check import check_records
from coutil.audit.ranks import Nearest, RankIndex

RESULTS_DIR = Path(__file__).resolve().parent / "results"
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
    criteria_s: dict[str, float] = {}
    for criterion in CRITERIA[1:]:  # the variance is timed above
        start_criterion = time.perf_counter()
        window_diversity(index, star_lo, star_hi, dataset_distance, criterion)
        criteria_s[criterion] = time.perf_counter() - start_criterion
    check, check_s = _timed(
        lambda: check_records(
            index, star_lo, star_hi, nearest.distance, dataset_distance, np.zeros(m), criterion="variance"
        )
    )
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
        "criteria_s": criteria_s,
        "check_s": check_s,
        "check_holds": check.holds,
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


def reference_diversity(sorted_values: NDArray[np.float64], first: NDArray[np.int64], last: NDArray[np.int64]) -> (
    tuple[NDArray[np.float64], NDArray[np.float64]]
):
    """Entropy-l and ordered-distance t-closeness of each window, slicing it out (O(n) per window)."""
    r, m = first.shape
    entropy = np.empty((r, m))
    emd = np.empty((r, m))
    for j in range(m):
        support, whole = np.unique(sorted_values[j], return_counts=True)
        q = np.cumsum(whole) / sorted_values.shape[1]
        for i in range(r):
            window = sorted_values[j, first[i, j] : last[i, j] + 1]
            values, counts = np.unique(window, return_counts=True)
            share = counts / window.size
            entropy[i, j] = np.exp(-(share * np.log(share)).sum())
            p = np.zeros(support.size)
            p[np.searchsorted(support, values)] = share
            emd[i, j] = np.abs(np.cumsum(p) - q)[:-1].sum() / max(support.size - 1, 1)
    return entropy, emd


def bench_diversity(n: int, m: int, sample: int, seed: int) -> dict[str, Any]:
    original, release = _masked(n, m, seed)
    index = RankIndex.build(release)
    star_lo, star_hi = index.star(original)
    d = int(np.median(index.nearest(star_lo, star_hi, want_ties=False).distance))

    def fast() -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return (
            window_diversity(index, star_lo, star_hi, d, "entropy-l"),
            window_diversity(index, star_lo, star_hi, d, "t-closeness"),
        )

    (entropy, emd), fast_s = _timed(fast)
    rows = np.arange(n) if n <= sample else np.random.default_rng(seed).choice(n, size=sample, replace=False)
    first, last = index.window_bounds(star_lo[rows], star_hi[rows], d)
    (ref_entropy, ref_emd), reference_s = _timed(lambda: reference_diversity(index.sorted_values, first, last))
    scaled = reference_s * n / rows.size
    return {
        "part": "diversity",
        "n": n,
        "m": m,
        "d": d,
        "fast_s": fast_s,
        "reference_records": int(rows.size),
        "reference_s": reference_s,
        "reference_all_s": scaled,
        "extrapolated": bool(rows.size < n),
        "speed_up": scaled / fast_s,
        "agree": bool(
            np.allclose(entropy[rows], ref_entropy, rtol=1e-9) and np.allclose(emd[rows], ref_emd, atol=1e-12)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.quick:
        full_sizes, subject = [20_000], (20_000, 20_000)
        reference_sizes, sample = [1000, 4000], 1000
        diversity_sizes, diversity_sample = [1000, 4000], 200
    else:
        full_sizes, subject = [10**5, 10**6], (10**5, 10**5)
        reference_sizes, sample = [1000, 4000, 16_000, 100_000], 4000
        diversity_sizes, diversity_sample = [1000, 10_000, 100_000], 500
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
        print(
            "         criteria at d: "
            + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in row["criteria_s"].items())
            + f"; (d, v)-check of every record {row['check_s']:.2f} s",
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
    print("entropy-l + t-closeness of every window vs the plain per-window reference")
    print(f"{'n':>8} {'fast s':>8} {'ref s':>9} {'ref recs':>9} {'speed-up':>9} {'agree':>6}")
    for n in diversity_sizes:
        row = bench_diversity(n, m, diversity_sample, args.seed)
        rows.append(row)
        mark = "*" if row["extrapolated"] else " "
        print(
            f"{n:>8} {row['fast_s']:>8.3f} {row['reference_all_s']:>8.2f}{mark} {row['reference_records']:>9} "
            f"{row['speed_up']:>9.1f} {row['agree']!s:>6}",
            flush=True,
        )
    print("* reference time scaled from the sampled records to all n")
    results = RESULTS_DIR / ("bench_audit_quick.json" if args.quick else "bench_audit.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
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
    print(f"results written to {results}")


if __name__ == "__main__":
    main()
