"""`coutil anonymize ...`: centralized SDC masking of a CSV file from the command line.

``anonymize mdav|rankswap|noise|mult-noise|synthetic|local INPUT.csv -o OUT.csv``: mask the selected
columns of INPUT (default: all) and write OUT.csv with INPUT's header and row order, the other
columns copied untouched; ordinal columns (``--ordinal``) are masked as ranks and written back as
their nearest category label. ``--json`` prints one JSON object (n, method, parameters,
sse_sst_percent, il1s, sse_sst_basis, ...; for mdav also k, groups, min_group_size and
partition_sse_sst_percent). SSE/SST and IL1s are both measured on the values as written (rounded
with --decimals, ordinal ranks snapped to a category), so they agree with ``info-loss`` on the
output file; for mdav, partition_sse_sst_percent is the partition's figure before rounding, the
one quoted in the literature. ``anonymize safepub`` is added to `anonymize_app` by
`coutil.cli.dp_commands`.

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

from coutil.cli.common import (
    OneLineErrorsCommand,
    OneLineErrorsGroup,
    SdcJsonOpt,
    SdcOrdinalOpt,
    columns_to_dataset,
    emit_json,
    err_console,
    progress,
    show_progress,
)
from coutil.errors import InputError
from coutil.fileio import refuse_overwriting_inputs
from coutil.sdc.dataset import (
    CsvTable,
    Dataset,
    FloatMatrix,
    parse_columns,
    parse_ordinal_spec,
    read_csv_table,
    replace_columns,
    write_csv,
)

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
    short_help="Mask the columns of a CSV file with a centralized SDC method, or simulate local anonymization.",
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
ForceOpt = Annotated[bool, typer.Option("--force", help="Write --output even when it is the input file (the "
                                        "input is read whole first; the output is replaced atomically).")]


# ----------------------------------------------------------------------------------------- helpers


def _load_input(path: Path, columns: str | None, ordinal: list[str] | None, output: Path,
                force: bool) -> tuple[CsvTable, Dataset]:
    refuse_overwriting_inputs({"--output": output}, {"INPUT": path}, force=force)
    column_names = parse_columns(columns)
    ordinal_map = parse_ordinal_spec(ordinal or [])
    table = read_csv_table(path)
    return table, columns_to_dataset(table, column_names, ordinal_map)


def _check_seed(seed: int) -> None:
    if seed < 0:
        raise InputError(f"bad --seed {seed}: expected a non-negative integer")


def _check_decimals(decimals: int | None) -> None:
    if decimals is not None and not 0 <= decimals <= 15:
        raise InputError(f"bad --decimals {decimals}: expected an integer between 0 and 15")



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
    with progress(enabled=show_progress(json_output)) as bar:
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
    ordinal: SdcOrdinalOpt = None,
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
    json_output: SdcJsonOpt = False,
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
    ordinal: SdcOrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: SdcJsonOpt = False,
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
    ordinal: SdcOrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: SdcJsonOpt = False,
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
    ordinal: SdcOrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: SdcJsonOpt = False,
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
    ordinal: SdcOrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: SdcJsonOpt = False,
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
    ordinal: SdcOrdinalOpt = None,
    seed: SeedOpt = 0,
    decimals: DecimalsOpt = None,
    force: ForceOpt = False,
    json_output: SdcJsonOpt = False,
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


def register(app: typer.Typer) -> None:
    """Add `anonymize` (sub-commands) to the `coutil` app."""
    app.add_typer(anonymize_app, name="anonymize")
