"""`coutil check`: k-anonymity, l-diversity and t-closeness of a release.

``check --release Y.csv --qi a,b``: k-anonymity, l-diversity (distinct, entropy) and t-closeness
(`coutil.sdc.privacy`); exit code 3 when a threshold given with --k/--l/--entropy-l/--t does not hold;
``--per-class`` adds every class's size, l and t.

Human output (tables) goes to stderr; stdout carries only the --json object. Every user mistake,
including a malformed option (``--k abc``), is one ``coutil: error:`` line on stderr with exit code 2
(the command uses `OneLineErrorsCommand`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from coutil.cli.common import OneLineErrorsCommand, SdcJsonOpt, SdcOrdinalOpt, emit_json, err_console
from coutil.errors import CheckFailedError, DataFileError, InputError
from coutil.sdc.dataset import (
    MISSING_TOKENS,
    CsvTable,
    FloatMatrix,
    parse_columns,
    parse_float,
    parse_ordinal_spec,
    read_csv_table,
    table_to_dataset,
)


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
    ordinal: SdcOrdinalOpt = None,
    per_class: Annotated[
        bool,
        typer.Option("--per-class", help="Also report every equivalence class: its QI values, size, and the "
                     "distinct l, entropy l and t of each confidential attribute (--json: a 'classes' array)."),
    ] = False,
    json_output: SdcJsonOpt = False,
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
    """Add `check` to the `coutil` app."""
    app.command("check", cls=OneLineErrorsCommand)(check_command)
