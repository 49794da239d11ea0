"""Benchmark of the (d, v)-permuted privacy audit (coutil.audit.ranks): issue 3, item 8.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_audit.py            # full sizes (several minutes on 2 cores)
    python simulations/bench/bench_audit.py --quick --results /tmp/bench_audit_quick.json
    python simulations/bench/bench_audit.py --parts subject,subject-cli --results /tmp/subject.json

All parts use i.i.d. normal attributes masked with additive noise (0.5 x the variance). Real files
are rounded, so ``full`` and ``subject`` run on three versions of the same data, timed in the same
run with their ratio to the untied one: ``untied`` (continuous values), ``2 decimals`` (both files
rounded to 2 decimals: about 800 distinct values per attribute at n = 10^5, nearly every value
tied), ``integers`` (10 x the values rounded to integers: about 80 distinct values, wide tie
blocks, like ages) and ``ordinal`` (2 decimals, and the last attribute in 3 categories, as an
``--ordinal`` column: blocks of about n/3 ranks).

1. ``full``: the data protector's audit of ``coutil audit --original --release`` without the CSV
   reading: rank index of the release, star intervals, permutation distance with all tied closest
   records, window variances at each record's own distance and at the data-set distance.
   Goal: n = 10^6, m = 5 in <= 60 s.
   The alternative diversity criteria of the windows (distinct-l, entropy-l, t-closeness) are timed
   beside, at the data-set distance, with the whole (d, v)-check of every record.
2. ``subject``: one subject's audit as ``coutil audit --record-values`` and her in-round audit
   (`coutil.audit.subject`): index and 10^5 random records made of release values (the
   plausibility test), then her distance, variances and verdict.
   Goal: n = 10^5, m = 5, 10^5 random records in <= 2 s.
   ``subject-cli``: the same through the command, in this process (so without the process start and
   imports): ``coutil.cli.main(["audit", "--record-values", ..., "--release", Y.csv, "--random", N,
   "--json"])`` on a CSV file of the rounded release, with its parts timed apart: reading the file
   (`coutil.sdc.dataset.read_csv_table` with the garbage collector paused, as `coutil.audit.inputs`
   does, beside it with the collector on), converting the cells to numbers (`coutil.audit.inputs`,
   beside the per-cell `table_to_dataset` it replaces) and the rest (audit and JSON), by difference.
   Goal: <= 2 s at 10^5.
3. ``reference``: the plain O(n^2) reference (every record against every release row, vectorised
   per record, as in tests/audit/test_ranks.py) beside the fast index on the same records, with the
   speed-up measured in the same run. At sizes where the reference would take too long it runs on a
   sample of records and its time is scaled to all n (marked ``extrapolated``); the answers of the
   two are compared on every record the reference ran on.

4. ``diversity``: the prefix-sum t-closeness and entropy-l of every window against a plain reference
   (each window sliced out of the sorted column and measured with numpy), same run, same windows.

A table goes to stdout, JSON to simulations/bench/results/bench_audit.json (``--quick``:
bench_audit_quick.json, so that a quick run never overwrites the full figures; ``--results PATH``
writes elsewhere).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from coutil.audit import inputs
from coutil.audit.diversity import CRITERIA, window_diversity
from coutil.audit.privacy_check import check_records
from coutil.audit.ranks import Nearest, RankIndex
from coutil.audit.subject import AuditParams, build_release_view, judge, release_digest
from coutil.cli import main as coutil_main
from coutil.sdc.dataset import read_csv_table, table_to_dataset

RESULTS_DIR = Path(__file__).resolve().parent / "results"
T = TypeVar("T")


def _timed(action: Callable[[], T]) -> tuple[T, float]:
    start = time.perf_counter()
    value = action()
    return value, time.perf_counter() - start


#: The versions of the data: how both files are written (module docstring).
def _with_ordinal(values: NDArray[np.float64]) -> NDArray[np.float64]:
    """2 decimals, and the last attribute cut into 3 categories (an --ordinal column)."""
    rounded = np.round(values, 2)
    rounded[:, -1] = np.clip(np.round(values[:, -1]), -1, 1)
    return rounded


ROUNDING: dict[str, Callable[[NDArray[np.float64]], NDArray[np.float64]]] = {
    "untied": lambda values: values,
    "2 decimals": lambda values: np.round(values, 2),
    "integers": lambda values: np.round(values * 10),
    "ordinal": _with_ordinal,
}


def _masked(n: int, m: int, seed: int, data: str = "untied") -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    original = rng.normal(size=(n, m))
    release = original + rng.normal(scale=np.sqrt(0.5), size=original.shape)
    rounded = ROUNDING[data]
    return rounded(original), rounded(release)


def _ties(release: NDArray[np.float64]) -> float:
    """Share of release values that are tied with another value of their attribute."""
    tied = 0
    for column in release.T:
        _, inverse, counts = np.unique(column, return_inverse=True, return_counts=True)
        tied += int(np.sum(counts[inverse] > 1))
    return tied / release.size


def bench_full(n: int, m: int, seed: int, data: str = "untied") -> dict[str, Any]:
    original, release = _masked(n, m, seed, data)
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
        "data": data,
        "tied_share": _ties(release),
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


def bench_subject(n: int, m: int, random_records: int, seed: int, data: str = "untied") -> dict[str, Any]:
    """`coutil.audit.subject` (the audit of a round and of the command) on a release of one group:
    the random records (with the rank index) timed apart from her own record and the verdict."""
    original, release = _masked(n, m, seed, data)
    own = original[0]
    params = AuditParams(k=1, min_permutation_distance=0, random_records=random_records, alpha=0.05)
    start = time.perf_counter()
    digest = release_digest(b"", [f"a{j + 1}" for j in range(m)], (n,), release)
    view, random_s = _timed(lambda: build_release_view(release, group_ids=(0,), group_sizes=(n,), n_qi=0,
                                                       digest=digest, random_records=random_records))
    verdict, own_s = _timed(lambda: judge(view, qi=(), confidential=own, group=0, params=params))
    total = time.perf_counter() - start
    return {
        "part": "subject",
        "data": data,
        "tied_share": _ties(release),
        "n": n,
        "m": m,
        "random_records": random_records,
        "own_record_s": own_s,
        "random_s": random_s,
        "total_s": total,
        "goal_s": 2.0 if n >= 10**5 and random_records >= 10**5 else None,
        "distance": verdict.permutation_distance,
        "p_value": verdict.p_value,
    }


def bench_subject_cli(n: int, m: int, random_records: int, seed: int, data: str = "2 decimals") -> dict[str, Any]:
    """The subject's command on a CSV file, in this process: file reading, conversion and audit."""
    original, release = _masked(n, m, seed, data)
    names = [f"a{j + 1}" for j in range(m)]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "release.csv"
        np.savetxt(path, release, delimiter=",", header=",".join(names), comments="", fmt="%.15g")
        argv = ["audit", "--record-values", ",".join(f"{v:.15g}" for v in original[0]), "--release", str(path)]
        argv += ["--random", str(random_records), "--json"]
        small = Path(folder) / "small.csv"
        np.savetxt(small, release[:50], delimiter=",", header=",".join(names), comments="", fmt="%.15g")
        # A first run on a small file imports everything the command needs: only the work is timed.
        with contextlib.redirect_stdout(io.StringIO()):
            coutil_main([*argv[:3], "--release", str(small), "--random", "10", "--json"])
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            code, total = _timed(lambda: coutil_main(argv))
        _, plain_read_s = _timed(lambda: read_csv_table(path))
        table, read_s = _timed(lambda: inputs.read_table(path))
        _, convert_s = _timed(lambda: inputs.to_dataset(table, None, {}))
        _, checked_s = _timed(lambda: table_to_dataset(table))
    plausibility = json.loads(output.getvalue())["records"][0]["plausibility"]
    return {
        "part": "subject-cli",
        "data": data,
        "n": n,
        "m": m,
        "random_records": random_records,
        "exit_code": code,
        "total_s": total,
        "csv_read_s": read_s,
        "csv_read_collector_on_s": plain_read_s,
        "convert_s": convert_s,
        "convert_per_cell_s": checked_s,
        "audit_s": total - read_s - convert_s,
        "goal_s": 2.0 if n >= 10**5 and random_records >= 10**5 else None,
        "p_value": plausibility["p_value"],
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


PARTS = ("full", "subject", "subject-cli", "reference", "diversity")


def _print_full(rows: list[dict[str, Any]], sizes: list[int], m: int, seed: int) -> None:
    for n in sizes:
        untied_s = None
        for data in ROUNDING:
            row = bench_full(n, m, seed, data)
            untied_s = untied_s or row["total_s"]
            row["vs_untied"] = row["total_s"] / untied_s
            rows.append(row)
            print(
                f"full     n={n:>8} m={m} {data:<10} ({row['tied_share']:4.0%} tied): total {row['total_s']:7.2f} s "
                f"= {row['vs_untied']:.2f} x untied (build {row['build_s']:.2f}, star {row['star_s']:.2f}, nearest "
                f"{row['nearest_s']:.2f}, variances {row['variance_own_s']:.2f} + {row['variance_dataset_s']:.2f}); "
                f"goal {row['goal_s']} s",
                flush=True,
            )
            print(
                "         criteria at d: "
                + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in row["criteria_s"].items())
                + f"; (d, v)-check of every record {row['check_s']:.2f} s",
                flush=True,
            )


def _print_subject(rows: list[dict[str, Any]], n: int, random_records: int, m: int, seed: int) -> None:
    untied_s = None
    for data in ROUNDING:
        row = bench_subject(n, m, random_records, seed, data)
        untied_s = untied_s or row["total_s"]
        row["vs_untied"] = row["total_s"] / untied_s
        rows.append(row)
        print(
            f"subject  n={row['n']:>8} m={m} {data:<10} ({row['tied_share']:4.0%} tied): total {row['total_s']:7.3f} s "
            f"= {row['vs_untied']:.2f} x untied (own record {row['own_record_s']:.3f}, {row['random_records']} random "
            f"records {row['random_s']:.3f}); goal {row['goal_s']} s",
            flush=True,
        )


def _print_subject_cli(rows: list[dict[str, Any]], n: int, random_records: int, m: int, seed: int) -> None:
    row = bench_subject_cli(n, m, random_records, seed)
    rows.append(row)
    print(
        f"subject-cli n={row['n']:>5} m={m} {row['data']}: total {row['total_s']:.3f} s in process (CSV read "
        f"{row['csv_read_s']:.3f} [collector on: {row['csv_read_collector_on_s']:.3f}], to numbers "
        f"{row['convert_s']:.3f} [per cell: {row['convert_per_cell_s']:.3f}], audit and JSON {row['audit_s']:.3f}); "
        f"goal {row['goal_s']} s",
        flush=True,
    )


def _print_comparisons(
    rows: list[dict[str, Any]], part: str, sizes: list[int], sample: int, m: int, seed: int
) -> None:
    if part == "diversity":
        print("entropy-l + t-closeness of every window vs the plain per-window reference")
    print(f"{'n':>8} {'fast s':>8} {'ref s':>9} {'ref recs':>9} {'speed-up':>9} {'agree':>6}")
    for n in sizes:
        row = bench_reference(n, m, sample, seed) if part == "reference" else bench_diversity(n, m, sample, seed)
        rows.append(row)
        mark = "*" if row["extrapolated"] else " "
        print(
            f"{n:>8} {row['fast_s']:>8.3f} {row['reference_all_s']:>8.2f}{mark} {row['reference_records']:>9} "
            f"{row['speed_up']:>9.1f} {row['agree']!s:>6}",
            flush=True,
        )
    print("* reference time scaled from the sampled records to all n")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"comma-separated parts to run (default: all of {', '.join(PARTS)})"
    )
    parser.add_argument("--results", type=Path, help="JSON file to write (default: simulations/bench/results/)")
    args = parser.parse_args()
    parts = [part.strip() for part in args.parts.split(",")]
    if not parts or any(part not in PARTS for part in parts):
        parser.error(f"--parts: expected some of {', '.join(PARTS)}")
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
    if "full" in parts:
        _print_full(rows, full_sizes, m, args.seed)
    if "subject" in parts:
        _print_subject(rows, *subject, m, args.seed)
    if "subject-cli" in parts:
        _print_subject_cli(rows, *subject, m, args.seed)
    if "reference" in parts:
        _print_comparisons(rows, "reference", reference_sizes, sample, m, args.seed)
    if "diversity" in parts:
        _print_comparisons(rows, "diversity", diversity_sizes, diversity_sample, m, args.seed)
    results = args.results or RESULTS_DIR / ("bench_audit_quick.json" if args.quick else "bench_audit.json")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(
        json.dumps(
            {
                "benchmark": "bench_audit",
                "command": " ".join(["python simulations/bench/bench_audit.py", *sys.argv[1:]]),
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
