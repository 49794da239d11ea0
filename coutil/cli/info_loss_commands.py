"""`coutil info-loss`: the information loss of a masked data set with respect to the original.

``info-loss --original X.csv --masked Y.csv``: SSE/SST, IL1s (a mean) and the preservation of
means, variances and correlations, per attribute and overall (`coutil.sdc.infoloss`). Row i of Y
must be the masked record i of X, or ``--mapping`` gives the row of Y of each record of X (a protocol
release, in group order, is refused without it).

Human output goes to stderr; stdout carries only the --json object. Every user mistake is one
``coutil: error:`` line on stderr with exit code 2 (the command uses `OneLineErrorsCommand`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from numpy.typing import NDArray
from rich.table import Table

from coutil.cli.common import (
    OneLineErrorsCommand,
    SdcJsonOpt,
    SdcOrdinalOpt,
    columns_to_dataset,
    emit_json,
    err_console,
)
from coutil.errors import InputError
from coutil.sdc.dataset import Dataset, parse_columns, parse_ordinal_spec, read_csv_table


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
    ordinal: SdcOrdinalOpt = None,
    json_output: SdcJsonOpt = False,
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
    x = columns_to_dataset(read_csv_table(original), column_names, ordinal_map)
    y = columns_to_dataset(read_csv_table(masked), list(x.names), ordinal_map)
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


def register(app: typer.Typer) -> None:
    """Add `info-loss` to the `coutil` app."""
    app.command("info-loss", cls=OneLineErrorsCommand)(info_loss_command)
