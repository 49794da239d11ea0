"""Reading the original data set and the release for `coutil audit`, `attack` and `reverse-map`.

The two CSV files must describe the same attributes: by default every column of X, found by name in
Y (a release may add columns, e.g. an id, or reorder them); ``--release-columns`` pairs differently
named columns by position. When the release has *none* of X's column names (the paper's running
example: X1,X2,X3 and Y1,Y2,Y3) and exactly as many columns as attributes are used from X, the
columns are paired by position; `Pair.note` then names the pairing (the commands print it on
stderr). Other counts, and a release that has only some of the names, are errors. Ordinal
categorical columns are ranked 1, 2, 3... in both files. Every mistake is an `InputError` naming
the file, the option or the column (exit code 2).

Numeric columns are converted in one pass per column (`to_dataset`); any cell that is not a finite
number (or has a digit group ``1_000``) sends the file through `coutil.sdc.dataset.table_to_dataset`,
whose error names the line and the column.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

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

if TYPE_CHECKING:
    from coutil.audit.intruder import RandomSpec


@dataclass(frozen=True)
class Pair:
    """X and Y on the same attributes, as `load_pair` reads them."""

    original: Dataset
    #: The release's paired columns, under the original's names (checks and output use those).
    release: Dataset
    #: The release's own names of those columns, in the same order (X's names when found by name).
    release_names: tuple[str, ...]
    #: The release file as read (its other columns are kept by ``reverse-map``).
    release_table: CsvTable
    #: One line for stderr when the columns were paired by position, else None.
    note: str | None = None


def load_pair(
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None = None,
    ordinal: list[str] | None = None,
) -> Pair:
    """Load X and Y on the same attributes; mismatched names or counts are a usage error.

    Without --columns every column of X is used. Without ``release_columns`` each is found by name
    in Y (extra release columns are ignored) or, when Y has none of the names and one column per
    attribute, paired by position (module docstring). ``release_columns`` names the release's
    attributes when they are called differently; they pair with ``columns`` in order. Ordinal
    columns (``--ordinal``, under X's names) become 1-based ranks in both files.
    """
    names = parse_columns(columns)
    ordinal_map = parse_ordinal_spec(ordinal or [])
    x = to_dataset(read_table(original), names, ordinal_map)
    y_table = read_table(release)
    note = None
    if release_columns is not None:
        release_names = parse_columns(release_columns) or []
        if len(release_names) != x.m:
            raise InputError(
                f"--release-columns names {len(release_names)} attributes of {release} "
                f"but {x.m} are used from {original}"
            )
    else:
        missing = [name for name in x.names if name not in y_table.header]
        if not missing:
            release_names = list(x.names)
        elif len(missing) < x.m:
            found = [name for name in x.names if name not in missing]
            raise InputError(
                f"{release} has no column {', '.join(missing)} (it has {', '.join(y_table.header)}; only "
                f"{', '.join(found)} match by name); select common ones with --columns, or name the "
                "release's with --release-columns"
            )
        else:
            release_names = _positional_names(release, x.names, y_table.header)
            pairs = ", ".join(f"{a}={b}" for a, b in zip(x.names, release_names, strict=True))
            note = (
                f"note: {release} has none of the column names of {original}: pairing them by position "
                f"({pairs}); name the release's columns with --release-columns to pair them otherwise"
            )
    y = to_dataset(y_table, release_names, renamed_ordinal(ordinal_map, x.names, release_names))
    return Pair(x, Dataset(x.names, y.values, y.source, x.ordinal), tuple(release_names), y_table, note)


def _positional_names(release: Path, used: Sequence[str], y_header: Sequence[str]) -> list[str]:
    """The release's columns in order, when there is exactly one per attribute used."""
    if len(used) != len(y_header):
        raise InputError(
            f"{release} has no column {', '.join(used)} (it has {', '.join(y_header)}) and its "
            f"{len(y_header)} columns cannot be paired by position with {len(used)} attributes: select "
            "them with --columns, or name the release's with --release-columns"
        )
    return list(y_header)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for a while (back as it was afterwards)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_table(path: Path) -> CsvTable:
    """`coutil.sdc.dataset.read_csv_table` with the garbage collector paused: reading builds a list
    and a tuple per row, which the collector would otherwise scan again and again as they pile up
    (0.2-0.4 s of the 0.6 s it takes to read 10^5 rows of 5 numbers); they hold no cycles."""
    with _collector_paused():
        return read_csv_table(path)


def to_dataset(table: CsvTable, names: list[str] | None, ordinal: dict[str, tuple[str, ...]]) -> Dataset:
    """The selected columns as numbers; a text cell's error says how to leave it out or rank it."""
    fast = _numeric_columns(table, names, ordinal)
    if fast is not None:
        return fast
    try:
        return table_to_dataset(table, names, ordinal)
    except DataFileError as exc:
        if not exc.problem.startswith("not a number") or exc.column is None:
            raise
        # Usually a text column (an id, a category) that was not meant to be audited.
        choose = "choose the columns with --columns" if names is None else f"leave {exc.column!r} out of --columns"
        hint = f"{choose}, or declare an ordinal column with --ordinal '{exc.column}=low<medium<high'"
        raise DataFileError(exc.path, f"{exc.problem} ({hint})", line=exc.line, column=exc.column) from None


def _numeric_columns(
    table: CsvTable, names: list[str] | None, ordinal: dict[str, tuple[str, ...]]
) -> Dataset | None:
    """The same `Dataset` as `table_to_dataset` when every selected column is plain finite numbers,
    converted a column at a time (3-4x faster on 10^5 rows); None when anything needs its checks."""
    selected = list(table.header) if names is None else names
    if not selected or ordinal or len(set(selected)) != len(selected):
        return None
    if any(name not in table.header for name in selected):
        return None
    values = np.empty((table.n, len(selected)), dtype=np.float64)
    for j, name in enumerate(selected):
        column = table.header.index(name)
        cells = [row[column] for row in table.rows]
        # float() takes digit groups ("1_000"), which the checked path rejects.
        if "_" in "".join(cells):
            return None
        try:
            # float() itself, as the checked path: the same numbers, without its per-cell checks.
            values[:, j] = np.fromiter(map(float, cells), dtype=np.float64, count=len(cells))
        except ValueError:
            return None
    if not np.all(np.isfinite(values)):
        return None  # "nan", "inf": the checked path names the cell
    return Dataset(tuple(selected), values, table.path, {})


def renamed_ordinal(
    ordinal: dict[str, tuple[str, ...]], names: Sequence[str], new_names: Sequence[str]
) -> dict[str, tuple[str, ...]]:
    """The ordinal declarations of ``names`` under the paired ``new_names``."""
    return {new: ordinal[old] for old, new in zip(names, new_names, strict=True) if old in ordinal}


def load_release(release: Path, columns: str | None, ordinal: list[str] | None) -> Dataset:
    """The release alone (subject mode), on the chosen columns."""
    return to_dataset(read_table(release), parse_columns(columns), parse_ordinal_spec(ordinal or []))


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


def parse_check_options(
    d: str | None, v: str | None, m: int
) -> tuple[int | list[int] | None, list[float] | None]:
    """``--d`` and ``--v`` of the check: one d or one per attribute, one v per attribute."""
    required = None if d is None else parse_distance(d)
    if isinstance(required, list) and len(required) != m:
        raise InputError(f"--d has {len(required)} values but there are {m} attributes")
    thresholds = None if v is None else parse_floats(v, "--v")
    if thresholds is not None and len(thresholds) != m:
        raise InputError(f"--v has {len(thresholds)} values but there are {m} attributes")
    return required, thresholds


def parse_random_spec(text: str | None) -> RandomSpec:
    """``attack --random``: 'all', 'auto' (also when not given) or a positive number of records."""
    if text is None or text == "auto":
        return "auto"
    if text == "all":
        return "all"
    try:
        count = int(text)
    except ValueError:
        raise InputError(f"bad --random {text!r}: expected 'all', 'auto' or a number of records") from None
    if count < 1:
        raise InputError(f"bad --random {text!r}: expected a positive number of records")
    return count


def parse_distance(text: str) -> int | list[int]:
    """``--d``: one non-negative integer, or one per attribute (the (d, v, f) form)."""
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise InputError(f"bad --d {text!r}: expected a non-negative integer or one per attribute") from None
    if any(value < 0 for value in values):
        raise InputError(f"bad --d {text!r}: distances must be non-negative")
    return values[0] if len(values) == 1 and "," not in text else values


#: Prefix of ``--mapping``/``--true-mapping`` values naming a column of the release.
MAPPING_COLUMN_PREFIX = "column:"


def load_mapping(spec: str, option: str, pair: Pair, keywords: Sequence[str]) -> str | NDArray[np.intp]:
    """A record mapping f given on the command line: a keyword, or f(x_i) for every original record.

    ``spec`` is one of ``keywords`` (returned as is), ``column:NAME``: a column of the release holding,
    in each release row, the 1-based number of the original record it was masked from, or the path
    of a CSV/text file with one 1-based release row per original record, one per line (an optional
    header line first). Returns 0-based release rows, one per original record. A wrong length, an
    out-of-range or non-integer entry is an `InputError` naming the option, the file and the line.
    """
    if spec in keywords:
        return spec
    if spec.startswith(MAPPING_COLUMN_PREFIX):
        return _mapping_from_column(spec[len(MAPPING_COLUMN_PREFIX) :], option, pair)
    path = Path(spec)
    if not path.is_file():
        raise InputError(
            f"bad {option} {spec!r}: expected {', '.join(keywords)}, {MAPPING_COLUMN_PREFIX}NAME (a column of "
            "the release) or a file with one release row per original record"
            + ("" if path.exists() else f" ({spec}: no such file)")
        )
    return _mapping_from_file(path, option, pair)


def _whole_number(text: str) -> int | None:
    value = parse_number(text)
    return int(value) if value is not None and value.is_integer() else None


def _mapping_from_file(path: Path, option: str, pair: Pair) -> NDArray[np.intp]:
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{option} {path}: cannot read a text file ({exc})") from None
    entries = [(number, text.strip()) for number, text in enumerate(lines, start=1) if text.strip()]
    if entries and parse_number(entries[0][1]) is None and "," not in entries[0][1]:
        entries = entries[1:]  # a header line such as "release_row"
    n, n_release = pair.original.n, pair.release.n
    rows = np.empty(len(entries), dtype=np.intp)
    for k, (number, text) in enumerate(entries):
        row = _whole_number(text)
        if row is None:
            raise InputError(f"{option} {path}, line {number}: {text!r} is not a release row number (one per line)")
        if not 1 <= row <= n_release:
            raise InputError(
                f"{option} {path}, line {number}: release row {row} is out of range 1..{n_release}"
            )
        rows[k] = row - 1
    if rows.size != n:
        raise InputError(
            f"{option} {path} has {rows.size} release rows but {pair.original.source} has {n} records "
            "(one 1-based release row per original record, in order)"
        )
    return rows


def _mapping_from_column(name: str, option: str, pair: Pair) -> NDArray[np.intp]:
    table = pair.release_table
    column = table.column_index(name)  # an unknown column lists the release's columns
    n = pair.original.n
    owner_of = np.full(n, -1, dtype=np.intp)
    for i, row in enumerate(table.rows):
        text = row[column].strip()
        record = _whole_number(text)
        where = f"{option} {table.path}, line {table.line_of(i)}, column {name!r}"
        if record is None:
            raise InputError(f"{where}: {text!r} is not an original record number")
        if not 1 <= record <= n:
            raise InputError(f"{where}: original record {record} is out of range 1..{n}")
        if owner_of[record - 1] >= 0:
            first = table.line_of(int(owner_of[record - 1]))
            raise InputError(f"{where}: original record {record} appears twice (also on line {first})")
        owner_of[record - 1] = i
    missing = np.flatnonzero(owner_of < 0)
    if missing.size:
        raise InputError(
            f"{option} {table.path}, column {name!r}: {missing.size} original records have no release row "
            f"(first: record {int(missing[0]) + 1})"
        )
    return owner_of


@dataclass(frozen=True)
class RoundManifest:
    """What a subject's audit needs from a round's manifest.json (written by ``coutil run`` and
    ``coutil simulate``): ``round_id`` (hex), ``manifest`` (the announced parameters, as text),
    ``group_sizes``, and when present ``group_ids`` and ``release_digest`` (hex)."""

    round_id: bytes
    qi: tuple[str, ...]
    confidential: tuple[str, ...]
    k: int
    min_permutation_distance: int
    random_records: int
    alpha: float
    group_sizes: tuple[int, ...]
    #: Group numbers in release order; None when the file has none (older rounds).
    group_ids: tuple[int, ...] | None
    release_digest: bytes | None


def load_round_manifest(path: Path) -> RoundManifest:
    """Read a round's manifest.json; every problem is an `InputError` naming the file and the key."""
    import json

    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{path}: no such manifest file") from None
    except (OSError, ValueError) as exc:  # ValueError: bad JSON, or a number of more than 4,300 digits
        raise InputError(f"{path}: not a JSON manifest ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("manifest"), dict):
        raise InputError(f"{path}: not a round's manifest.json (no 'manifest' object)")
    params = doc["manifest"]

    # Values are typed (k an int, qi a list: what coutil writes) or, in older manifests, text.
    def names(key: str) -> tuple[str, ...]:
        value = params.get(key)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        if isinstance(value, str):
            return tuple(n for n in value.split(",") if n)
        raise InputError(f"{path}: manifest has no {key!r}")

    def number(key: str, kind: type[int] | type[float]) -> float:
        value = params.get(key)
        if value is None or isinstance(value, bool):
            raise InputError(f"{path}: manifest has no {key!r}")
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise InputError(f"{path}: manifest {key!r} is not a number: {value!r}") from None

    def hex_bytes(key: str) -> bytes | None:
        value = doc.get(key)
        if value is None:
            return None
        try:
            return bytes.fromhex(str(value))
        except ValueError:
            raise InputError(f"{path}: {key} is not hexadecimal: {value!r}") from None

    def integers(key: str) -> tuple[int, ...] | None:
        value = doc.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise InputError(f"{path}: {key} must be a list of integers")
        return tuple(value)

    round_id = hex_bytes("round_id")
    sizes = integers("group_sizes")
    if round_id is None or sizes is None:
        raise InputError(f"{path}: a round's manifest.json has round_id and group_sizes")
    return RoundManifest(
        round_id=round_id,
        qi=names("qi"),
        confidential=names("confidential"),
        k=int(number("k", int)),
        min_permutation_distance=int(number("min_permutation_distance", int)),
        random_records=int(number("random_records", int)),
        alpha=float(number("alpha", float)),
        group_sizes=sizes,
        group_ids=integers("group_ids"),
        release_digest=hex_bytes("release_digest"),
    )
