"""`coutil anonymize ...`, `coutil info-loss` and `coutil check`: centralized SDC from the command line.

- ``anonymize mdav|rankswap|noise|mult-noise|synthetic|local INPUT.csv -o OUT.csv``: mask the selected
  columns of INPUT (default: all) and write OUT.csv with INPUT's header and row order, the other
  columns copied untouched; ordinal columns (``--ordinal``) are masked as ranks and written back as
  their nearest category label. ``--json`` prints one JSON object (n, method, parameters,
  sse_sst_percent, il1s, sse_sst_basis, ...; for mdav also k, groups, min_group_size and
  partition_sse_sst_percent). SSE/SST and IL1s are both measured on the values as written (rounded
  with --decimals, ordinal ranks snapped to a category), so they agree with ``info-loss`` on the
  output file; for mdav, partition_sse_sst_percent is the partition's figure before rounding, the
  one quoted in the literature.
- ``info-loss --original X.csv --masked Y.csv``: SSE/SST, IL1s (a mean) and the preservation of
  means, variances and correlations, per attribute and overall (`coutil.sdc.infoloss`).
- ``check --release Y.csv --qi a,b``: k-anonymity, l-diversity (distinct, entropy) and t-closeness
  (`coutil.sdc.privacy`); exit code 3 when a threshold given with --k/--l/--entropy-l/--t does not hold;
  ``--per-class`` adds every class's size, l and t.

Human output (tables, progress bars for long work) goes to stderr; stdout carries only the --json
object. Every user mistake, including a malformed option (``--k abc``), is one ``coutil: error:`` line
on stderr with exit code 2 (the commands use `OneLineErrorsCommand`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from numpy.typing import NDArray
from rich.table import Table

from coutil.cli.common import OneLineErrorsCommand, OneLineErrorsGroup, emit_json, err_console, progress
from coutil.errors import CheckFailedError, DataFileError, InputError
from coutil.fileio import refuse_overwriting_inputs
from coutil.sdc.dataset import (
    MISSING_TOKENS,
    CsvTable,
    Dataset,
    parse_columns,
    parse_float,
    parse_ordinal_spec,
    read_csv_table,
    replace_columns,
    table_to_dataset,
    write_csv,
)

FloatMatrix = NDArray[np.float64]

#: The ``sse_sst_basis`` of every anonymize report: SSE/SST and IL1s compare the input with the output file.
WRITTEN_BASIS = "values as written"
#: ``scales_from`` of `anonymize local` without --scales: says that the scales are not local information.
ALL_RECORDS_SCALES = "standard deviations of all input records (not local information; pass --scales)"

anonymize_app = typer.Typer(
    help=(
        "Mask the columns of a CSV file with a centralized SDC method (MDAV microaggregation, rank "
        "swapping, noise, synthetic data) or simulate local anonymization. The output keeps the input's "
        "header and row order; unselected columns are copied unchanged."
    ),
    no_args_is_help=True,
    cls=OneLineErrorsGroup,
)

InputArg = Annotated[
    Path,
    typer.Argument(help="CSV file with a header row (the original data).", metavar="INPUT.csv", show_default=False),
]
OutputOpt = Annotated[
    Path,
    typer.Option(
        "-o", "--output", help="Where to write the masked CSV (same header and row order as INPUT).",
        show_default=False,
    ),
]
ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Comma-separated columns to mask, e.g. age,income (default: all columns, which must be numeric "
        "or declared --ordinal).",
        show_default=False,
    ),
]
OrdinalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ordinal",
        help="Declare an ordinal categorical column with its categories in increasing order, e.g. "
        "'edu=primary<secondary<tertiary'; it is processed as ranks 1, 2, 3. Repeatable.",
        show_default=False,
    ),
]
SeedOpt = Annotated[
    int,
    typer.Option(
        "--seed", help="Seed of the random generator (a non-negative integer): the same seed gives the same output."
    ),
]
DecimalsOpt = Annotated[
    int | None,
    typer.Option(
        "--decimals",
        help="Round masked numeric values to this many decimals when writing (default: full precision).",
        show_default=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (the machine interface).")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write --output even when it is the input file (the "
                                        "input is read whole first; the output is replaced atomically).")]


# ----------------------------------------------------------------------------------------- helpers


def _to_dataset(
    table: CsvTable, column_names: list[str] | None, ordinal_map: dict[str, tuple[str, ...]]
) -> Dataset:
    """The selected columns as numbers; a text cell's error says how to leave the column out or declare it."""
    try:
        return table_to_dataset(table, column_names, ordinal_map)
    except DataFileError as exc:
        if not exc.problem.startswith("not a number") or exc.column is None:
            raise
        # The usual cause is a text column (an id, a category) that was not meant to be masked.
        choose = "choose the columns with --columns" if column_names is None else (
            f"leave {exc.column!r} out of --columns"
        )
        hint = f"{choose}, or declare an ordinal column with --ordinal '{exc.column}=low<medium<high'"
        raise DataFileError(exc.path, f"{exc.problem} ({hint})", line=exc.line, column=exc.column) from None


def _load_input(path: Path, columns: str | None, ordinal: list[str] | None, output: Path,
                force: bool) -> tuple[CsvTable, Dataset]:
    refuse_overwriting_inputs({"--output": output}, {"INPUT": path}, force=force)
    column_names = parse_columns(columns)
    ordinal_map = parse_ordinal_spec(ordinal or [])
    table = read_csv_table(path)
    return table, _to_dataset(table, column_names, ordinal_map)


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise InputError(f"bad --seed {seed}: expected a non-negative integer")


def _check_decimals(decimals: int | None) -> None:
    if decimals is not None and not 0 <= decimals <= 15:
        raise InputError(f"bad --decimals {decimals}: expected an integer between 0 and 15")


def _show_progress(json_output: bool) -> bool:
    """A progress display only for a person watching a terminal; never in --json mode."""
    return err_console.is_terminal and not json_output


def _released_values(data: Dataset, masked: FloatMatrix, decimals: int | None) -> FloatMatrix:
    """The values as they will be written: ordinal ranks snapped to a category, numbers rounded."""
    _check_decimals(decimals)
    released = np.array(masked, dtype=np.float64)
    for j, name in enumerate(data.names):
        if name in data.ordinal:
            released[:, j] = np.clip(np.rint(released[:, j]), 1, len(data.ordinal[name]))
        elif decimals is not None:
            # +0.0 turns the -0.0 that rounding small negatives gives into 0 for the CSV.
            released[:, j] = np.round(released[:, j], decimals) + 0.0
        else:
            released[:, j] = round_significant(released[:, j])
    return released


#: Without --decimals, released numbers keep this many significant digits: a mean such as MDAV's
#: centroid is written 64.52, not 64.52000000000001 (binary float noise that no survey value carries).
SIGNIFICANT_DIGITS = 12


def round_significant(values: FloatMatrix, digits: int = SIGNIFICANT_DIGITS) -> FloatMatrix:
    """``values`` rounded to ``digits`` significant digits (0, inf and nan unchanged)."""
    x = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(x) & (x != 0)
    out = x.copy()
    magnitude = np.floor(np.log10(np.abs(x[finite])))
    scale = 10.0 ** (digits - 1 - magnitude)
    # Dividing the rounded integer by a power of ten gives the double nearest the decimal.
    out[finite] = np.round(x[finite] * scale) / scale
    return out


def _write_release(table: CsvTable, data: Dataset, released: FloatMatrix, output: Path) -> None:
    write_csv(output, table.header, replace_columns(table, data.with_values(released)))


def _check_parameter(name: str, value: float, low: float, high: float | None = None) -> None:
    if not np.isfinite(value) or value < low or (high is not None and value > high):
        bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
        # '1e400' reaches here as inf: say that it is not finite rather than out of range.
        problem = "not a finite number; " if not np.isfinite(value) else ""
        raise InputError(f"bad {name} {value:g}: {problem}expected a number {bound}")


@contextmanager
def _progress_steps(json_output: bool, label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress task of ``total`` steps (shown only to a person at a terminal); yields ``advance(steps)``."""
    with progress(enabled=_show_progress(json_output)) as bar:
        task = bar.add_task(label, total=total)
        yield lambda steps: bar.advance(task, steps)


@dataclass(frozen=True)
class Masked:
    """What one anonymization method hands back to `_anonymize`: the masked values and what to report.

    ``parameters`` and ``extra`` go into the report in their order (``extra`` after ``output``);
    ``groups`` (MDAV's partition) adds ``partition_sse_sst_percent``.
    """

    values: FloatMatrix
    parameters: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)
    groups: NDArray[np.intp] | None = None


def _anonymize(
    method: str,
    input_csv: Path,
    output: Path,
    columns: str | None,
    ordinal: list[str] | None,
    decimals: int | None,
    json_output: bool,
    mask: Callable[[Dataset], Masked],
    seed: int | None = None,
    force: bool = False,
) -> None:
    """The skeleton of every `anonymize` command, around the method's own ``mask`` of the loaded columns.

    The command has checked its own options; here the shared ones are checked (--seed, then
    --decimals), the selected columns loaded, ``mask`` run (it may check more against the data,
    e.g. k <= n), the release written with INPUT's header and row order, and reported (JSON or one
    line on stderr). SSE/SST and IL1s are both measured on the values as written, so that they
    describe the same file (and match `coutil info-loss` on it). With ``groups`` (MDAV) the
    partition's SSE/SST, on the unrounded centroids, is reported beside them as
    ``partition_sse_sst_percent``.
    """
    from coutil.sdc.infoloss import il1s, sse_sst_percent_groups, sse_sst_percent_pair

    if seed is not None:
        _check_seed(seed)
    _check_decimals(decimals)
    table, data = _load_input(input_csv, columns, ordinal, output, force)
    masked = mask(data)
    released = _released_values(data, masked.values, decimals)
    _write_release(table, data, released, output)
    sse = sse_sst_percent_pair(data.values, released)
    report: dict[str, Any] = {
        "n": data.n,
        "method": method,
        "parameters": masked.parameters,
        "columns": list(data.names),
        "input": table.path,
        "output": str(output),
        **masked.extra,
        "sse_sst_percent": sse,
        "il1s": il1s(data.values, released),
        "sse_sst_basis": WRITTEN_BASIS,
    }
    partition = ""
    if masked.groups is not None:
        report["partition_sse_sst_percent"] = sse_sst_percent_groups(data.values, masked.groups)
        partition = f" (partition before rounding: {report['partition_sse_sst_percent']:.2f}%)"
    if json_output:
        emit_json(report)
    else:
        err_console.print(
            f"wrote {output}: {data.n} records, {method} on {', '.join(data.names)}; "
            f"SSE/SST = {sse:.2f}%{partition}, IL1s = {report['il1s']:.4f}"
        )


# --------------------------------------------------------------------------------------- anonymize
# One thin command per method: its options (in the order of its --help), its own checks, and the
# masking call; `_anonymize` does the rest.


@anonymize_app.command("mdav", cls=OneLineErrorsCommand)
def mdav_command(
    input_csv: InputArg,
    k: Annotated[int, typer.Option("--k", help="Minimum group size: every group has k..2k-1 records.")],
    output: OutputOpt,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size",
            help="For very large files: split the records into compact blocks of at most this many and run "
            "MDAV in each (close to, but not exactly, MDAV; e.g. 50000). Default: exact MDAV on all records.",
            show_default=False,
        ),
    ] = None,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """MDAV microaggregation: replace each record by its group's centroid (k-anonymous on the columns).

    Attributes are z-scored for the grouping; centroids are written in original units.
    SSE/SST (on z-scored attributes) and IL1s describe the values as written; the partition's
    SSE/SST before any rounding is reported too (partition_sse_sst_percent in --json).
    """
    if k < 1:
        raise InputError(f"bad --k {k}: expected a positive integer")
    if block_size is not None and block_size < 2 * k:
        raise InputError(f"bad --block-size {block_size}: expected at least 2k = {2 * k}")

    def mask(data: Dataset) -> Masked:
        from coutil.sdc.mdav import mdav_with_progress

        if data.n < k:
            raise InputError(f"{input_csv}: {data.n} records, fewer than k = {k}")
        with _progress_steps(json_output, f"MDAV k={k}: records grouped", data.n) as advance:
            result = mdav_with_progress(data.values, k, advance, block_size=block_size)
        sizes = np.asarray(result.sizes)
        extra = {
            "k": k,
            "groups": int(result.n_groups),
            "min_group_size": int(sizes.min()),
            "max_group_size": int(sizes.max()),
            "exact": block_size is None or data.n <= block_size,
        }
        parameters: dict[str, Any] = {"k": k} if block_size is None else {"k": k, "block_size": block_size}
        return Masked(result.masked(), parameters, extra, np.asarray(result.groups, dtype=np.intp))

    _anonymize("mdav", input_csv, output, columns, ordinal, decimals, json_output, mask, force=force)


@anonymize_app.command("rankswap", cls=OneLineErrorsCommand)
def rankswap_command(
    input_csv: InputArg,
    output: OutputOpt,
    p: Annotated[
        float,
        typer.Option("--p", help="Rank window in percent of the records: a value moves at most p*n/100 ranks."),
    ] = 5.0,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Rank swapping (mu-Argus semantics): swap each value with a random unswapped one within p% of ranks.

    Each attribute is swapped independently; marginal distributions are preserved exactly.
    """
    _check_parameter("--p", p, 0.0, 100.0)

    def mask(data: Dataset) -> Masked:
        from coutil.sdc.masking import rank_swap, rank_swap_window

        window = rank_swap_window(data.n, p)
        if window < 1 and not json_output:
            # mu-Argus semantics: a window of p*n/100 < 1 rank leaves every value in place.
            err_console.print(
                f"warning: --p {p:g} of {data.n} records is a window of {p * data.n / 100:g} ranks (< 1): "
                f"nothing is swapped; use --p of at least {100 / data.n:.3g}"
            )
        with _progress_steps(json_output, f"rank swapping p={p:g}%: attributes", data.m) as advance:
            masked = rank_swap(data.values, p, seed, on_column=lambda _: advance(1))
        return Masked(masked, {"p": p, "seed": seed, "window_ranks": window})

    _anonymize("rankswap", input_csv, output, columns, ordinal, decimals, json_output, mask, seed=seed, force=force)


@anonymize_app.command("noise", cls=OneLineErrorsCommand)
def noise_command(
    input_csv: InputArg,
    output: OutputOpt,
    a: Annotated[
        float, typer.Option("--a", help="Noise variance as a fraction of each attribute's variance: N(0, a*var).")
    ] = 0.1,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Uncorrelated additive noise: y = x + e, e ~ N(0, a * var_j) for each attribute j."""
    from coutil.sdc.masking import additive_noise

    _check_parameter("--a", a, 0.0)

    def mask(data: Dataset) -> Masked:
        return Masked(additive_noise(data.values, a, seed), {"a": a, "seed": seed})

    _anonymize("noise", input_csv, output, columns, ordinal, decimals, json_output, mask, seed=seed, force=force)


@anonymize_app.command("mult-noise", cls=OneLineErrorsCommand)
def mult_noise_command(
    input_csv: InputArg,
    output: OutputOpt,
    a: Annotated[
        float, typer.Option("--a", help="Half-width of the multiplicative factor U(1-a, 1+a), 0 <= a <= 1.")
    ] = 0.1,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Multiplicative noise: y = x * u, u ~ U(1 - a, 1 + a) drawn for every cell."""
    from coutil.sdc.masking import multiplicative_noise

    _check_parameter("--a", a, 0.0, 1.0)

    def mask(data: Dataset) -> Masked:
        return Masked(multiplicative_noise(data.values, a, seed), {"a": a, "seed": seed})

    _anonymize("mult-noise", input_csv, output, columns, ordinal, decimals, json_output, mask, seed=seed, force=force)


@anonymize_app.command("synthetic", cls=OneLineErrorsCommand)
def synthetic_command(
    input_csv: InputArg,
    output: OutputOpt,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Synthetic data: the columns are redrawn from a multivariate normal fitted to them (mean, covariance).

    Row i of the output is NOT a masked version of record i: only the distribution is kept.
    Record-level figures such as SSE/SST and IL1s are therefore large by design.
    """
    from coutil.sdc.masking import synthetic_normal


    def mask(data: Dataset) -> Masked:
        return Masked(synthetic_normal(data.values, seed), {"seed": seed})

    _anonymize("synthetic", input_csv, output, columns, ordinal, decimals, json_output, mask, seed=seed, force=force)


def _parse_scales(scales: str | None, data: Dataset) -> tuple[list[float], str]:
    """`anonymize local`'s scales and where they come from; without --scales, all records' (with a warning)."""
    if scales is None:
        # On stderr even with --json (stdout stays one JSON object); soft_wrap keeps it on one line.
        err_console.print(
            "warning: no --scales given: the noise scales are the standard deviations of all "
            f"{data.n} input records, which no subject could compute from her own record (not local "
            "information); pass the public scales with --scales s1,s2,... (one per column)",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )
        return [float(s) for s in data.values.std(axis=0)], ALL_RECORDS_SCALES
    try:
        scale_values = [float(s) for s in scales.split(",")]
    except ValueError:
        raise InputError(f"bad --scales {scales!r}: expected comma-separated numbers") from None
    if len(scale_values) != data.m:
        raise InputError(f"--scales has {len(scale_values)} values but {data.m} columns are selected")
    if not all(np.isfinite(s) and s >= 0 for s in scale_values):
        raise InputError(f"bad --scales {scales!r}: scales must be finite and non-negative")
    return scale_values, "--scales"


@anonymize_app.command("local", cls=OneLineErrorsCommand)
def local_command(
    input_csv: InputArg,
    output: OutputOpt,
    a: Annotated[
        float,
        typer.Option("--a", help="Noise variance as a fraction of each public scale squared: N(0, a*s_j^2)."),
    ] = 0.1,
    scales: Annotated[
        str | None,
        typer.Option(
            "--scales",
            help="Public per-attribute scales s1,s2,... (one per selected column), known to every subject "
            "beforehand. Default, for convenience only: the standard deviations of ALL input records, which no "
            "subject could compute alone (a warning says so).",
            show_default=False,
        ),
    ] = None,
    columns: ColumnsOpt = None,
    ordinal: OrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Local anonymization: each subject adds noise N(0, a*s_j^2) to her own record, seeing no one else's.

    This simulates what subjects can do alone; compare with the collaborative protocol. The scales
    s_j must be public (--scales). Without --scales they are estimated from all records, which is
    not local information: a warning on stderr says so, and scales_from in --json.
    """
    from coutil.sdc.masking import local_anonymization

    _check_parameter("--a", a, 0.0)

    def mask(data: Dataset) -> Masked:
        scale_values, scale_source = _parse_scales(scales, data)
        masked = local_anonymization(data.values, scale_values, a, seed)
        return Masked(masked, {"a": a, "seed": seed, "scales": scale_values, "scales_from": scale_source})

    _anonymize("local", input_csv, output, columns, ordinal, decimals, json_output, mask, seed=seed, force=force)


# --------------------------------------------------------------------------------------- info-loss


def _percent(fraction: float) -> str:
    # Rounding noise such as -1e-17 would print as "-0.00%"; show exact preservation as 0.00%.
    return f"{fraction:+.2%}" if abs(fraction) >= 5e-5 else "0.00%"


def _refuse_group_order(masked: Path) -> None:
    """A protocol release lists its rows in group order (manifest.json beside it says so): row i is not
    record i, so a row-by-row comparison would print a meaningless figure."""
    import json

    manifest = masked.parent / "manifest.json"
    try:
        order = json.loads(manifest.read_text(encoding="utf-8")).get("row_order")
    except (OSError, ValueError, AttributeError):
        return
    if order == "group":
        raise InputError(f"{masked} is in group order ({manifest} says row_order = group), not row-aligned with "
                         "the original: pass --mapping FILE (1-based release row of each original record)")


def _info_loss_mapping(path: Path, n_original: int, n_masked: int) -> NDArray[np.intp]:
    """The 0-based rows of Y for the records of X, from a file of 1-based rows (one per line)."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError as exc:
        raise InputError(f"{path}: cannot read the mapping ({exc.strerror})") from None
    if len(lines) != n_original:
        raise InputError(f"{path}: {len(lines)} mapping rows for {n_original} original records")
    try:
        rows = np.array([int(line) for line in lines], dtype=np.intp) - 1
    except ValueError:
        raise InputError(f"{path}: a mapping row is not an integer (1-based rows of the masked file)") from None
    if rows.min() < 0 or rows.max() >= n_masked:
        raise InputError(f"{path}: mapping rows must be between 1 and {n_masked}")
    return rows


def info_loss_command(
    original: Annotated[Path, typer.Option("--original", help="CSV of the original data set X.", show_default=False)],
    masked: Annotated[
        Path, typer.Option("--masked", help="CSV of the masked data set Y (same records, same order).",
                           show_default=False)
    ],
    columns: Annotated[
        str | None,
        typer.Option("--columns", help="Comma-separated columns to compare (default: all columns of X, "
                     "which Y must also have).", show_default=False),
    ] = None,
    ordinal: OrdinalOpt = None,
    json_output: JsonOpt = False,
    mapping: Annotated[
        Path | None,
        typer.Option("--mapping", help="File of 1-based rows of Y, one per record of X in order (for a Y that "
                     "is not row-aligned with X, e.g. a protocol release).", show_default=False),
    ] = None,
) -> None:
    """Information loss of Y with respect to X: SSE/SST (%), IL1s, means, variances, correlations.

    Every figure is given per attribute and overall. SSE/SST z-scores both files with X's means and
    standard deviations. IL1s is the MEAN (not the sum) over cells of |x - y| / (sqrt(2) S_j), S_j the
    sample standard deviation of X's column j. Row i of Y must be the masked version of row i of X.
    """
    from coutil.sdc.infoloss import information_loss

    column_names = parse_columns(columns)
    ordinal_map = parse_ordinal_spec(ordinal or [])
    x = _to_dataset(read_csv_table(original), column_names, ordinal_map)
    y = _to_dataset(read_csv_table(masked), list(x.names), ordinal_map)
    if mapping is not None:
        y = Dataset(y.names, y.values[_info_loss_mapping(mapping, x.n, y.n)], y.source, y.ordinal)
    else:
        _refuse_group_order(masked)
    if x.n != y.n:
        raise InputError(
            f"{original} has {x.n} records but {masked} has {y.n}: the rows must match one to one"
        )
    report = information_loss(x, y)
    if json_output:
        emit_json({"original": str(original), "masked": str(masked), **report.to_dict()})
        return
    # Human output goes to stderr like every command's; the masked means and variances are in --json.
    # Six narrow columns fit an 80-column terminal.
    table = Table(title=f"Information loss of {masked} w.r.t. {original} ({x.n} records)", title_justify="left")
    table.add_column("attribute", no_wrap=True)
    for heading in ("SSE/SST", "IL1s", "mean Δ", "var Δ", "corr |Δ|"):
        table.add_column(heading, justify="right", no_wrap=True)
    for attribute in report.to_dict()["attributes"]:
        table.add_row(
            attribute["name"],
            f"{attribute['sse_sst_percent']:.2f}%",
            f"{attribute['il1s']:.4f}",
            _percent(attribute["mean_relative_difference"]),
            _percent(attribute["variance_relative_difference"]),
            f"{attribute['correlation_mean_abs_difference']:.4f}",
        )
    table.add_section()
    table.add_row(
        "overall",
        f"{report.sse_sst_percent:.2f}%",
        f"{report.il1s:.4f}",
        f"{report.mean_abs_mean_relative_difference:.2%}",
        f"{report.mean_abs_variance_relative_difference:.2%}",
        f"{report.correlation_mean_abs_difference:.4f}",
    )
    err_console.print(table)
    err_console.print(
        "SSE/SST on attributes z-scored with X's mean and std; IL1s is the mean (not the sum) over cells of "
        "|x-y|/(sqrt(2) S_j); Δ are relative changes (overall: mean of their absolute values); corr |Δ| is "
        "the mean absolute change of correlations.",
        style="dim",
    )


# ------------------------------------------------------------------------------------------- check


def _encode_column(table: CsvTable, name: str, ordinal: dict[str, tuple[str, ...]]) -> tuple[FloatMatrix, bool]:
    """A release column as numbers for the checks, and whether it is ordered (numeric or ordinal).

    Numeric columns are used as numbers, declared ordinal ones as ranks; any other column (e.g. a
    generalized '30-39' or a suppressed '*') is compared as text: fine for equality (classes,
    l-diversity) but it has no order, so t-closeness is not defined on it.
    """
    if name in ordinal:
        return table_to_dataset(table, [name], {name: ordinal[name]}).values[:, 0], True
    col = table.column_index(name)
    cells = [row[col].strip() for row in table.rows]
    numbers = [parse_float(c) for c in cells]
    if all(v is not None for v in numbers):
        for i, value in enumerate(numbers):
            if value is not None and not np.isfinite(value):
                # 'inf' or an overflow such as '1e400' in a numeric column: not a text category.
                raise DataFileError(
                    table.path, f"not a finite number: {cells[i]!r}", line=table.line_of(i), column=name
                )
        return np.asarray(numbers, dtype=np.float64), True
    for i, cell in enumerate(cells):
        # '?' often marks a suppressed cell in a release: a category of its own, not a missing value.
        if cell.lower() in MISSING_TOKENS and cell != "?":
            raise DataFileError(table.path, "missing value", line=table.line_of(i), column=name)
    _, codes = np.unique(np.asarray(cells, dtype=str), return_inverse=True)
    return np.asarray(codes, dtype=np.float64).reshape(-1), False


def _class_qi_values(table: CsvTable, qi_names: list[str], report: Any) -> list[dict[str, str]]:
    """The QI cells (as written in the release) of each class, read from its first record."""
    columns = [table.column_index(name) for name in qi_names]
    return [
        {name: table.rows[c.first_record][col].strip() for name, col in zip(qi_names, columns, strict=True)}
        for c in report.classes
    ]


def _per_class_json(table: CsvTable, qi_names: list[str], report: Any) -> list[dict[str, Any]]:
    """The per-class array of --json: each class's QI values and the file line of its first record."""
    return [
        {"class": c.index, "qi": qi, "first_line": table.line_of(c.first_record), **{
            key: value for key, value in c.to_dict().items() if key not in ("class", "first_record")
        }}
        for c, qi in zip(report.classes, _class_qi_values(table, qi_names, report), strict=True)
    ]


def _print_classes(table: CsvTable, qi_names: list[str], report: Any) -> None:
    classes = Table(title="Equivalence classes", title_justify="left")
    for heading in ("class", *qi_names, "size"):
        classes.add_column(heading, justify="right" if heading in ("class", "size") else "left")
    for attribute in report.l_diversity:
        classes.add_column(f"{attribute.attribute}: l / entropy l / t", justify="right")
    classes.add_column("holds")
    for c, qi in zip(report.classes, _class_qi_values(table, qi_names, report), strict=True):
        cells = [
            f"{a.distinct_l} / {a.entropy_l:.3f} / " + ("n/a" if a.t is None else f"{a.t:.4f}") for a in c.attributes
        ]
        classes.add_row(str(c.index), *qi.values(), str(c.size), *cells, "yes" if c.holds else "NO")
    err_console.print(classes)


def _print_check(report: Any) -> None:
    ka = report.k_anonymity
    err_console.print(
        f"k-anonymity on {', '.join(report.qi)}: k = {ka.k} ({ka.n_classes} classes of {ka.n} records"
        + (f"; {ka.violating_classes} classes below k = {ka.required_k})" if ka.required_k else ")")
    )
    if not report.l_diversity:
        return
    table = Table(title="Confidential attributes", title_justify="left")
    for heading in ("attribute", "distinct l", "entropy l", "t (EMD)"):
        table.add_column(heading, justify="left" if heading == "attribute" else "right")
    t_by_name = {r.attribute: r for r in report.t_closeness}
    for lrep in report.l_diversity:
        trep = t_by_name.get(lrep.attribute)
        table.add_row(
            lrep.attribute, str(lrep.distinct_l), f"{lrep.entropy_l:.3f}", "n/a" if trep is None else f"{trep.t:.4f}"
        )
    err_console.print(table)


def check_command(
    release: Annotated[Path, typer.Option("--release", help="CSV of the release Y to check.", show_default=False)],
    qi: Annotated[
        str,
        typer.Option("--qi", help="Comma-separated quasi-identifier columns; records with equal values on "
                     "them form an equivalence class.", show_default=False),
    ],
    confidential: Annotated[
        str | None,
        typer.Option("--confidential", help="Comma-separated confidential columns for l-diversity and "
                     "(numeric or --ordinal ones) t-closeness.", show_default=False),
    ] = None,
    k: Annotated[
        int | None, typer.Option("--k", help="Require k-anonymity: every class has at least k records.",
                                 show_default=False)
    ] = None,
    l_required: Annotated[
        int | None, typer.Option("--l", help="Require distinct l-diversity: at least l distinct values of each "
                                 "confidential attribute in every class.", show_default=False)
    ] = None,
    entropy_l: Annotated[
        float | None, typer.Option("--entropy-l", help="Require entropy l-diversity: exp(H) >= l in every class, "
                                   "H the Shannon entropy (natural log) of the class's values.", show_default=False)
    ] = None,
    t: Annotated[
        float | None, typer.Option("--t", help="Require t-closeness: the ordered EMD between each class's and the "
                                   "whole table's distribution is at most t (0..1).", show_default=False)
    ] = None,
    ordinal: OrdinalOpt = None,
    per_class: Annotated[
        bool,
        typer.Option("--per-class", help="Also report every equivalence class: its QI values, size, and the "
                     "distinct l, entropy l and t of each confidential attribute (--json: a 'classes' array)."),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Check a release: k-anonymity of the QIs, l-diversity and t-closeness of the confidential columns.

    Non-numeric QI values (e.g. '30-39', '*') are compared as text. With --per-class the figures are
    also given for every class, in the order of their QI values.
    Exit code 3 when a threshold given with --k, --l, --entropy-l or --t does not hold (0 when all hold);
    the report is printed (and with --json emitted) either way.
    """
    from coutil.sdc.privacy import check_privacy

    if k is not None and k < 1:
        raise InputError(f"bad --k {k}: expected a positive integer")
    if l_required is not None and l_required < 1:
        raise InputError(f"bad --l {l_required}: expected a positive integer")
    if entropy_l is not None and not (np.isfinite(entropy_l) and entropy_l >= 1.0):
        raise InputError(f"bad --entropy-l {entropy_l:g}: expected a number of at least 1")
    if t is not None and not 0.0 <= t <= 1.0:
        raise InputError(f"bad --t {t:g}: expected a number between 0 and 1")
    qi_names = parse_columns(qi) or []
    conf_names = parse_columns(confidential) or []
    overlap = sorted(set(qi_names) & set(conf_names))
    if overlap:
        raise InputError(f"column(s) {', '.join(overlap)} cannot be both --qi and --confidential")
    if (l_required is not None or entropy_l is not None or t is not None) and not conf_names:
        raise InputError("--l, --entropy-l and --t need --confidential columns")
    ordinal_map = parse_ordinal_spec(ordinal or [])
    table = read_csv_table(release)
    for name in ordinal_map:
        table.column_index(name)
    qi_matrix = np.column_stack([_encode_column(table, name, ordinal_map)[0] for name in qi_names])
    encoded = [(name, *_encode_column(table, name, ordinal_map)) for name in conf_names]
    unordered = [name for name, _, ordered in encoded if not ordered]
    if t is not None and unordered:
        raise InputError(
            f"--t needs numeric or --ordinal confidential columns; {', '.join(unordered)} "
            "is text (declare its order with --ordinal)"
        )
    report = check_privacy(
        qi_matrix,
        qi_names,
        [(name, values) for name, values, _ in encoded],
        required_k=k,
        required_l=None if l_required is None else float(l_required),
        required_t=t,
        numeric=[ordered for _, _, ordered in encoded],
        required_entropy_l=entropy_l,
        per_class=per_class,
    )
    if json_output:
        result = {"release": str(release), "n": report.k_anonymity.n, **report.to_dict()}
        if per_class:
            result["classes"] = _per_class_json(table, qi_names, report)
        emit_json(result)
    else:
        _print_check(report)
        if per_class:
            _print_classes(table, qi_names, report)
    failures = report.failures()
    if failures:
        raise CheckFailedError("privacy check failed: " + "; ".join(failures))
    if not json_output and any(v is not None for v in (k, l_required, entropy_l, t)):
        err_console.print("all required privacy checks hold")


def register(app: typer.Typer) -> None:
    """Add `anonymize` (sub-commands), `info-loss` and `check` to the `coutil` app."""
    app.add_typer(anonymize_app, name="anonymize")
    app.command("info-loss", cls=OneLineErrorsCommand)(info_loss_command)
    app.command("check", cls=OneLineErrorsCommand)(check_command)

