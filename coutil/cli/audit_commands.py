"""`coutil audit`, `coutil attack` and `coutil reverse-map`: permuted privacy and the intruder.

- ``audit --original X.csv --release Y.csv``: the data protector's (d, v)-permuted privacy audit
  (Table 4): per original record its permutation distance, closest release rows, star ranks and
  window variances, plus the data-set level distance and variances; ``--d/--v`` turn it into a check
  (exit code 3 when it fails, naming the failing attributes).
- ``audit --record-values v1,v2,.. --release Y.csv``: the same for one subject who knows only her own
  record, plus the plausibility of her distance among random records.
- ``attack``: the maximum-knowledge intruder (Section 5): linkages to the reverse-mapped release,
  verification with random records, Hellinger distance, p-values, optional figure.
- ``reverse-map``: Algorithm 1, writing Z as CSV (non-selected columns copied from the release).

Every ``--json`` prints one JSON object on stdout; the keys are the documented interface. Row
numbers in output are 1-based (as in the paper's tables); the Python API is 0-based.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import typer
from numpy.typing import NDArray
from rich.table import Table

from coutil.cli.common import emit_json, err_console, progress
from coutil.errors import CheckFailedError, InputError
from coutil.sdc.dataset import Dataset, load_csv, parse_columns, read_csv_table, replace_columns, write_csv

if TYPE_CHECKING:
    from coutil.audit.intruder import RandomSpec

#: Rows shown in the human-readable tables (the JSON always has every row).
TABLE_ROWS = 20

OriginalOpt = Annotated[
    Path | None, typer.Option("--original", help="CSV of the original data set X.", show_default=False)
]
ReleaseOpt = Annotated[Path, typer.Option("--release", help="CSV of the anonymized release Y.")]
ColumnsOpt = Annotated[
    str | None,
    typer.Option("--columns", help="Comma-separated attributes to use (default: all, same in X and Y)."),
]
ReleaseColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--release-columns",
        help="The release's names for the --columns attributes, in the same order, when they differ.",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for tie-breaking and random records.")]
KOpt = Annotated[
    int | None, typer.Option("--k", help="Reject a release with fewer than k rows.", show_default=False)
]


# ----------------------------------------------------------------------------------------- loading


def _load_pair(
    original: Path, release: Path, columns: str | None, release_columns: str | None = None
) -> tuple[Dataset, Dataset]:
    """Load X and Y on the same attributes; mismatched names or counts are a usage error.

    ``release_columns`` names the release's attributes when they are called differently (the
    running example has X1,X2,X3 and Y1,Y2,Y3); they pair with ``columns`` in order.
    """
    names = parse_columns(columns)
    x = load_csv(original, names)
    if release_columns is None:
        y = load_csv(release, names)
        if x.names != y.names:
            raise InputError(
                f"{original} has attributes {', '.join(x.names)} but {release} has {', '.join(y.names)}; "
                "select common ones with --columns (and --release-columns when the names differ)"
            )
        return x, y
    y = load_csv(release, parse_columns(release_columns))
    if y.m != x.m:
        raise InputError(
            f"--release-columns names {y.m} attributes of {release} but {x.m} are used from {original}"
        )
    # Pair the attributes by position under the original's names (checks and output use those).
    return x, Dataset(x.names, y.values, y.source)


def _load_release(release: Path, columns: str | None) -> Dataset:
    return load_csv(release, parse_columns(columns))


def _check_k(release: Dataset, k: int | None) -> None:
    if k is None:
        return
    if k < 1:
        raise InputError(f"bad --k {k}: expected a positive integer")
    if release.n < k:
        raise InputError(f"{release.source}: {release.n} rows, fewer than k = {k}")


def _parse_floats(text: str, option: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"bad {option} {text!r}: expected comma-separated numbers") from None
    if not all(np.isfinite(values)):
        raise InputError(f"bad {option} {text!r}: numbers must be finite")
    return values


def _one_based(rows: NDArray[np.intp]) -> list[int]:
    return [int(r) + 1 for r in rows]


# ------------------------------------------------------------------------------------------- audit


def _audit_records(index: Any, records: NDArray[np.float64]) -> tuple[Any, Any, Any, Any]:
    """Star intervals, nearest release rows and window variances at each record's own distance."""
    star_lo, star_hi = index.star(records)
    nearest = index.nearest(star_lo, star_hi, want_ties=True)
    variances = index.window_variance(star_lo, star_hi, np.asarray(nearest.distance, dtype=np.int64))
    return star_lo, star_hi, nearest, variances


def _record_objects(
    numbers: Sequence[int], star_lo: Any, nearest: Any, variances: Any
) -> list[dict[str, Any]]:
    # Bulk .tolist() conversions: a million records would spend most of the audit in per-item casts.
    distances = np.asarray(nearest.distance, dtype=np.int64).tolist()
    stars = np.asarray(star_lo, dtype=np.int64).tolist()
    variance_rows = np.asarray(variances, dtype=np.float64).tolist()
    return [
        {
            "record": int(number),
            "permutation_distance": distance,
            "closest": closest,
            "star_ranks": star,
            "variances": variance,
        }
        for number, distance, closest, star, variance in zip(
            numbers, distances, _closest_lists(nearest.matches), stars, variance_rows, strict=True
        )
    ]


def _closest_lists(matches: Any) -> list[list[int]]:
    """1-based closest rows of every record; one conversion of the flat array when matches are CSR."""
    flat = getattr(matches, "flat", None)
    if flat is None:
        return [_one_based(rows) for rows in matches]
    one_based = (np.asarray(flat, dtype=np.int64) + 1).tolist()
    offsets = np.asarray(matches.offsets, dtype=np.int64).tolist()
    return [one_based[a:b] for a, b in pairwise(offsets)]


def _threshold_check(
    *,
    index: Any,
    star_lo: Any,
    star_hi: Any,
    distances: NDArray[np.int64],
    names: Sequence[str],
    d: int | None,
    v: str | None,
) -> dict[str, Any] | None:
    """(d, v)-permuted privacy (Definition 1) over the given records: every distance >= d and, per
    attribute, the variance of the window at d (not at the record's own distance) >= v_j."""
    if d is None and v is None:
        return None
    d_value = 0 if d is None else d
    if d_value < 0:
        raise InputError(f"bad --d {d_value}: expected a non-negative integer")
    v_values = [0.0] * len(names) if v is None else _parse_floats(v, "--v")
    if len(v_values) != len(names):
        raise InputError(f"--v has {len(v_values)} values but there are {len(names)} attributes")
    count = len(distances)
    window = index.window_variance(star_lo, star_hi, np.full(count, d_value, dtype=np.int64))
    minimum = np.asarray(window, dtype=np.float64).min(axis=0)
    distance_holds = bool(np.all(distances >= d_value))
    failing = [name for name, low, need in zip(names, minimum, v_values, strict=True) if low < need]
    return {
        "d": d_value,
        "v": v_values,
        "holds": distance_holds and not failing,
        "distance_holds": distance_holds,
        "failing_attributes": failing,
        "min_variances_at_d": [float(x) for x in minimum],
    }


def _raise_if_failed(check: dict[str, Any] | None) -> None:
    if check is None or check["holds"]:
        return
    problems = []
    if not check["distance_holds"]:
        problems.append(f"permutation distance below d = {check['d']}")
    if check["failing_attributes"]:
        problems.append("variance below v for " + ", ".join(check["failing_attributes"]))
    raise CheckFailedError(f"(d, v)-permuted privacy does not hold: {'; '.join(problems)}")


def _print_audit_table(names: Sequence[str], records: list[dict[str, Any]], dataset: dict[str, Any]) -> None:
    table = Table(title="(d, v)-permuted privacy audit", title_justify="left")
    table.add_column("record", justify="right")
    table.add_column("distance", justify="right")
    table.add_column("closest")
    for name in names:
        table.add_column(f"var {name}", justify="right")
    for rec in records[:TABLE_ROWS]:
        table.add_row(
            str(rec["record"]),
            str(rec["permutation_distance"]),
            ", ".join(map(str, rec["closest"])),
            *(f"{v:.2f}" for v in rec["variances"]),
        )
    if len(records) > TABLE_ROWS:
        table.add_row("...", "", f"({len(records) - TABLE_ROWS} more rows: use --json)", *[""] * len(names))
    if dataset:
        table.add_section()
        table.add_row(
            "data set", str(dataset["permutation_distance"]), "", *(f"{v:.2f}" for v in dataset["variances"])
        )
    err_console.print(table)


def audit_command(
    *,
    release: ReleaseOpt,
    original: OriginalOpt = None,
    record_values: Annotated[
        str | None,
        typer.Option(
            "--record-values",
            help="Subject mode: your own record, v1,v2,... in column order.",
            show_default=False,
        ),
    ] = None,
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
    record: Annotated[
        int | None,
        typer.Option("--record", help="Report only this record of X (1-based).", show_default=False),
    ] = None,
    random: Annotated[
        int, typer.Option("--random", help="Subject mode: random records for the plausibility test.")
    ] = 10_000,
    seed: SeedOpt = 0,
    alpha: Annotated[float, typer.Option("--alpha", help="Subject mode: significance level.")] = 0.05,
    d: Annotated[
        int | None, typer.Option("--d", help="Required permutation distance (check).", show_default=False)
    ] = None,
    v: Annotated[
        str | None, typer.Option("--v", help="Required variances v1,v2,... (check).", show_default=False)
    ] = None,
    k: KOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """(d, v)-permuted privacy audit of a release: by the data protector or by one subject.

    Exit code 3 when --d/--v are given and the check does not hold.
    """
    if (original is None) == (record_values is None):
        raise InputError("give exactly one of --original (data protector) or --record-values (subject)")
    if original is not None:
        _audit_protector(
            original=original,
            release=release,
            columns=columns,
            release_columns=release_columns,
            record=record,
            d=d,
            v=v,
            k=k,
            json_output=json_output,
        )
    else:
        assert record_values is not None
        if record is not None:
            raise InputError("--record selects a row of --original; it cannot be used with --record-values")
        _audit_subject(
            record_values=record_values,
            release=release,
            columns=columns,
            random=random,
            seed=seed,
            alpha=alpha,
            d=d,
            v=v,
            k=k,
            json_output=json_output,
        )


def _audit_protector(
    *,
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None,
    record: int | None,
    d: int | None,
    v: str | None,
    k: int | None,
    json_output: bool,
) -> None:
    from coutil.audit.ranks import RankIndex

    x, y = _load_pair(original, release, columns, release_columns)
    _check_k(y, k)
    if record is not None and not 1 <= record <= x.n:
        raise InputError(f"--record {record} is out of range: {original} has records 1..{x.n}")
    index = RankIndex.build(y.values)
    star_lo, star_hi, nearest, variances = _audit_records(index, x.values)
    distances = np.asarray(nearest.distance, dtype=np.int64)
    # Data-set level (Table 4, bottom row): the minimum distance, and per attribute the minimum over
    # records of the window variance at that common distance.
    dataset_distance = int(distances.min())
    at_dataset_distance = index.window_variance(
        star_lo, star_hi, np.full(x.n, dataset_distance, dtype=np.int64)
    )
    dataset = {
        "permutation_distance": dataset_distance,
        "variances": [float(value) for value in np.asarray(at_dataset_distance).min(axis=0)],
    }
    chosen = list(range(x.n)) if record is None else [record - 1]
    records = _record_objects(
        [i + 1 for i in chosen],
        star_lo if record is None else np.asarray(star_lo)[chosen],
        nearest if record is None else _Subset(nearest, chosen),
        variances if record is None else np.asarray(variances)[chosen],
    )
    check = _threshold_check(
        index=index,
        star_lo=np.asarray(star_lo)[chosen],
        star_hi=np.asarray(star_hi)[chosen],
        distances=distances[chosen],
        names=x.names,
        d=d,
        v=v,
    )
    if json_output:
        out: dict[str, Any] = {"columns": list(x.names), "records": records, "dataset": dataset}
        if check is not None:
            out["check"] = check
        emit_json(out)
    else:
        _print_audit_table(x.names, records, dataset)
        if check is not None and check["holds"]:
            err_console.print(f"(d, v)-permuted privacy holds with d = {check['d']}, v = {check['v']}")
    _raise_if_failed(check)


def _audit_subject(
    *,
    record_values: str,
    release: Path,
    columns: str | None,
    random: int,
    seed: int,
    alpha: float,
    d: int | None,
    v: str | None,
    k: int | None,
    json_output: bool,
) -> None:
    """Subject mode: one record known to its owner, the release, and random records from the release."""
    from coutil.audit.intruder import empirical_p_values, random_record_count, random_record_distances
    from coutil.audit.ranks import RankIndex

    y = _load_release(release, columns)
    _check_k(y, k)
    values = _parse_floats(record_values, "--record-values")
    if len(values) != y.m:
        raise InputError(
            f"--record-values has {len(values)} values but {release} has {y.m} attributes "
            f"({', '.join(y.names)}); select them with --columns"
        )
    if random < 1:
        raise InputError(f"bad --random {random}: expected a positive number of random records")
    if not 0 < alpha < 1:
        raise InputError(f"bad --alpha {alpha}: expected a probability strictly between 0 and 1")
    index = RankIndex.build(y.values)
    own = np.asarray([values], dtype=np.float64)
    star_lo, star_hi, nearest, variances = _audit_records(index, own)
    # The subject knows only the release: her random records take one release value per attribute,
    # whose star interval is the value's own rank interval.
    with progress() as bar:
        task = bar.add_task("random records", total=random)
        distribution = random_record_distances(
            index,
            np.asarray(index.lo),
            np.asarray(index.hi),
            # Enumerate every combination of release values when there are no more than asked for.
            random="all" if random_record_count(y.n, y.m) <= random else random,
            seed=seed,
            on_progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    p_value = float(empirical_p_values(np.asarray(nearest.distance), distribution)[0])
    records = _record_objects([1], star_lo, nearest, variances)
    records[0]["plausibility"] = {
        "p_value": p_value,
        "alpha": alpha,
        # Plausible deniability: random records match at her distance or closer often enough.
        "plausible": p_value >= alpha,
        "random_records": distribution.total,
    }
    check = _threshold_check(
        index=index,
        star_lo=star_lo,
        star_hi=star_hi,
        distances=np.asarray(nearest.distance, dtype=np.int64),
        names=y.names,
        d=d,
        v=v,
    )
    if json_output:
        out: dict[str, Any] = {"columns": list(y.names), "records": records}
        if check is not None:
            out["check"] = check
        emit_json(out)
    else:
        _print_audit_table(y.names, records, {})
        plaus = records[0]["plausibility"]
        verdict = "plausible (chance matches are common)" if plaus["plausible"] else "NOT plausible"
        err_console.print(
            f"p-value {plaus['p_value']:.4f} over {plaus['random_records']} random records "
            f"(alpha {alpha}): a match at this distance is {verdict}"
        )
        if check is not None and check["holds"]:
            err_console.print(f"(d, v)-permuted privacy holds with d = {check['d']}, v = {check['v']}")
    _raise_if_failed(check)


class _Subset:
    """The rows ``chosen`` of a nearest-neighbour result (same attribute names)."""

    def __init__(self, nearest: Any, chosen: Sequence[int]) -> None:
        self.distance = np.asarray(nearest.distance)[list(chosen)]
        self.matches = [nearest.matches[i] for i in chosen]


# ------------------------------------------------------------------------------------------ attack


def _parse_random(text: str) -> RandomSpec:
    if text == "all":
        return "all"
    if text == "auto":
        return "auto"
    try:
        count = int(text)
    except ValueError:
        raise InputError(f"bad --random {text!r}: expected 'all', 'auto' or a number of records") from None
    if count < 1:
        raise InputError(f"bad --random {text!r}: expected a positive number of records")
    return count


def attack_command(
    *,
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.")],
    release: ReleaseOpt,
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
    random: Annotated[
        str,
        typer.Option(
            "--random",
            help="Random records: 'all' (all n^m), a count N (sampled), or 'auto' (all when n^m is small).",
        ),
    ] = "auto",
    seed: SeedOpt = 0,
    true_mapping: Annotated[
        str | None,
        typer.Option(
            "--true-mapping",
            help="'identity' when row i of Y is the masked row i of X: report correct linkages.",
            show_default=False,
        ),
    ] = None,
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Draw both distance distributions to this file (needs coutil[plot]).",
            show_default=False,
        ),
    ] = None,
    k: KOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """The maximum-knowledge intruder: link X to the reverse-mapped release, verify with random records."""
    from coutil.audit.intruder import maximum_knowledge_attack

    x, y = _load_pair(original, release, columns, release_columns)
    _check_k(y, k)
    if true_mapping is not None and true_mapping != "identity":
        raise InputError(f"bad --true-mapping {true_mapping!r}: only 'identity' is supported")
    random_spec = _parse_random(random)
    with progress() as bar:
        task = bar.add_task("random records", total=None)

        def on_progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        result = maximum_knowledge_attack(
            x.values,
            y.values,
            random=random_spec,
            seed=seed,
            true_mapping=true_mapping,
            on_progress=on_progress,
        )
    original_distribution = result.original_distribution()
    random_distribution = result.random_distribution()
    if plot is not None:
        from coutil.audit.plots import plot_distance_distributions

        plot_distance_distributions(original_distribution, random_distribution, plot)
    linkages = [
        {
            "record": i + 1,
            "matches": _one_based(result.matches[i]),
            "distance": int(result.distances[i]),
            "p_value": float(result.p_values[i]),
        }
        for i in range(x.n)
    ]
    out: dict[str, Any] = {
        "columns": list(x.names),
        "linkages": linkages,
        "original_distribution": {str(dist): f for dist, f in original_distribution.items()},
        "random_distribution": {str(dist): f for dist, f in random_distribution.items()},
        "hellinger": result.hellinger,
        "random_records": {
            "count": result.random.total,
            "exhaustive": result.random.exhaustive,
            "seed": result.random.seed,
        },
    }
    if result.score is not None:
        out["correct_linkage_rate"] = result.score.correct_rate
        out["unique_correct"] = result.score.unique_correct
        out["multiple_matches"] = result.score.multiple
    if plot is not None:
        out["plot"] = str(plot)
    if json_output:
        emit_json(out)
        return
    _print_attack(out)


def _print_attack(out: dict[str, Any]) -> None:
    table = Table(title="Maximum-knowledge intruder: linkages", title_justify="left")
    for name in ("record", "matches in Z", "distance", "p-value"):
        table.add_column(name, justify="right")
    for link in out["linkages"][:TABLE_ROWS]:
        table.add_row(
            str(link["record"]),
            ", ".join(map(str, link["matches"])),
            str(link["distance"]),
            f"{link['p_value']:.4f}",
        )
    if len(out["linkages"]) > TABLE_ROWS:
        table.add_row("...", f"({len(out['linkages']) - TABLE_ROWS} more: use --json)", "", "")
    err_console.print(table)
    dist = Table(title="Distance distributions", title_justify="left")
    for name in ("distance", "original X", "random T"):
        dist.add_column(name, justify="right")
    for key, freq in out["original_distribution"].items():
        dist.add_row(key, f"{freq:.4f}", f"{out['random_distribution'][key]:.4f}")
    err_console.print(dist)
    rnd = out["random_records"]
    how = "all" if rnd["exhaustive"] else f"sampled (seed {rnd['seed']})"
    err_console.print(f"random records: {rnd['count']} ({how}); Hellinger distance {out['hellinger']:.4f}")
    if "correct_linkage_rate" in out:
        err_console.print(
            f"correct-linkage rate {out['correct_linkage_rate']:.4f}; "
            f"unique correct {out['unique_correct']}; multiple matches {out['multiple_matches']}"
        )
    if "plot" in out:
        err_console.print(f"figure written to {out['plot']}")


# ------------------------------------------------------------------------------------- reverse-map


def reverse_map_command(
    *,
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.")],
    release: ReleaseOpt,
    output: Annotated[Path, typer.Option("--output", "-o", help="CSV file to write Z to.")],
    columns: ColumnsOpt = None,
    release_columns: ReleaseColumnsOpt = None,
    seed: SeedOpt = 0,
) -> None:
    """Algorithm 1: reverse-map the release onto the original values (Z); other columns are copied."""
    from coutil.audit.permutation import reverse_map

    x, y = _load_pair(original, release, columns, release_columns)
    z = np.asarray(reverse_map(x.values, y.values, seed=seed), dtype=np.float64)
    table = read_csv_table(release)
    # Z replaces the release's own columns (its names, not the original's), other columns are kept.
    release_names = parse_columns(release_columns) or list(y.names)
    write_csv(output, table.header, replace_columns(table, Dataset(tuple(release_names), z, str(release))))
    err_console.print(f"wrote {y.n} reverse-mapped records to {output}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `coutil` app."""
    app.command("audit")(audit_command)
    app.command("attack")(attack_command)
    app.command("reverse-map")(reverse_map_command)
