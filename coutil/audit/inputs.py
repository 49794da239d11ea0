"""Reading the original data set and the release for `coutil audit`, `attack` and `reverse-map`.

The two CSV files must describe the same attributes: by default every column of X, found by name in
Y (a release may add columns, e.g. an id, or reorder them); ``--release-columns`` pairs differently
named columns by position. Ordinal categorical columns are ranked 1, 2, 3... in both files. Every
mistake is an `InputError` naming the file, the option or the column (exit code 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coutil.errors import DataFileError, InputError
from coutil.sdc.dataset import (
    CsvTable,
    Dataset,
    parse_columns,
    parse_number,
    parse_ordinal_spec,
    read_csv_table,
    table_to_dataset,
)


def load_pair(
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None = None,
    ordinal: list[str] | None = None,
) -> tuple[Dataset, Dataset]:
    """Load X and Y on the same attributes; mismatched names or counts are a usage error.

    Without --columns every column of X is used and found by name in Y (extra release columns are
    ignored). ``release_columns`` names the release's attributes when they are called differently
    (the running example has X1,X2,X3 and Y1,Y2,Y3); they pair with ``columns`` in order. Ordinal
    columns (``--ordinal``, under X's names) become 1-based ranks in both files.
    """
    names = parse_columns(columns)
    ordinal_map = parse_ordinal_spec(ordinal or [])
    x = _to_dataset(read_csv_table(original), names, ordinal_map)
    if release_columns is None:
        y_table = read_csv_table(release)
        missing = [name for name in x.names if name not in y_table.header]
        if missing:
            raise InputError(
                f"{release} has no column {', '.join(missing)} (it has {', '.join(y_table.header)}); "
                "select common ones with --columns, or name the release's with --release-columns"
            )
        y = _to_dataset(y_table, list(x.names), {n: c for n, c in ordinal_map.items() if n in x.names})
        return x, y
    release_names = parse_columns(release_columns) or []
    if len(release_names) != x.m:
        raise InputError(
            f"--release-columns names {len(release_names)} attributes of {release} "
            f"but {x.m} are used from {original}"
        )
    y = _to_dataset(read_csv_table(release), release_names, renamed_ordinal(ordinal_map, x.names, release_names))
    # Pair the attributes by position under the original's names (checks and output use those).
    return x, Dataset(x.names, y.values, y.source, x.ordinal)


def _to_dataset(table: CsvTable, names: list[str] | None, ordinal: dict[str, tuple[str, ...]]) -> Dataset:
    """The selected columns as numbers; a text cell's error says how to leave it out or rank it."""
    try:
        return table_to_dataset(table, names, ordinal)
    except DataFileError as exc:
        if not exc.problem.startswith("not a number") or exc.column is None:
            raise
        # Usually a text column (an id, a category) that was not meant to be audited.
        choose = "choose the columns with --columns" if names is None else f"leave {exc.column!r} out of --columns"
        hint = f"{choose}, or declare an ordinal column with --ordinal '{exc.column}=low<medium<high'"
        raise DataFileError(exc.path, f"{exc.problem} ({hint})", line=exc.line, column=exc.column) from None


def renamed_ordinal(
    ordinal: dict[str, tuple[str, ...]], names: Sequence[str], new_names: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """The ordinal declarations of ``names`` under the paired ``new_names``."""
    return {new: ordinal[old] for old, new in zip(names, new_names, strict=True) if old in ordinal}


def load_release(release: Path, columns: str | None, ordinal: list[str] | None) -> Dataset:
    """The release alone (subject mode), on the chosen columns."""
    return _to_dataset(read_csv_table(release), parse_columns(columns), parse_ordinal_spec(ordinal or []))


def parse_record_values(text: str, release: Dataset) -> list[float]:
    """--record-values: numbers, or for an --ordinal column one of its categories (or its rank)."""
    parts = [part.strip() for part in text.split(",")]
    if len(parts) != release.m:
        raise InputError(
            f"--record-values has {len(parts)} values but {release.source} has {release.m} attributes "
            f"({', '.join(release.names)}); select them with --columns"
        )
    values = []
    for name, part in zip(release.names, parts, strict=True):
        categories = release.ordinal.get(name, ())
        if part in categories:
            values.append(float(categories.index(part) + 1))
        elif categories and parse_number(part) is None:
            raise InputError(f"--record-values: {part!r} is not a category of {name} ({' < '.join(categories)})")
        else:
            values.extend(parse_floats(part, f"--record-values ({name})"))
    return values


def check_k(release: Dataset, k: int | None) -> None:
    """A release of fewer than k rows cannot be k-anonymous (``--k``)."""
    if k is None:
        return
    if k < 1:
        raise InputError(f"bad --k {k}: expected a positive integer")
    if release.n < k:
        raise InputError(f"{release.source}: {release.n} rows, fewer than k = {k}")


def parse_floats(text: str, option: str) -> list[float]:
    """Comma-separated finite numbers of an option."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"bad {option} {text!r}: expected comma-separated numbers") from None
    if not all(np.isfinite(values)):
        raise InputError(f"bad {option} {text!r}: numbers must be finite")
    return values


def parse_distance(text: str) -> int | list[int]:
    """``--d``: one non-negative integer, or one per attribute (the (d, v, f) form)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"bad --d {text!r}: expected a non-negative integer or one per attribute") from None
    if any(value < 0 for value in values):
        raise InputError(f"bad --d {text!r}: distances must be non-negative")
    return values[0] if len(values) == 1 and "," not in text else values
