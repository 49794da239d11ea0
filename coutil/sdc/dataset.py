"""The tabular data model: numeric attributes loaded from CSV, a DataFrame or an array.

A `Dataset` is an ``(n, m)`` float64 matrix with attribute names. Numeric columns are parsed as
floats. A *categorical ordinal* column is declared with its categories in increasing order
(``ordinal={"edu": ("primary", "secondary", "tertiary")}``) and is stored as the 1-based rank of
each cell's category, so every method that needs an order (MDAV, ranks, rank swapping) can use it;
`Dataset.labels_for` maps (rounded) ranks back to category labels for output.

CSV files must have a header row. Errors name the file, the line (the header is line 1) and the
column, and raise `DataFileError` (exit code 2 in the CLI). In-memory inputs (a DataFrame, an array)
have no file lines: their errors name the column and the row by position, counted from 1 and said
so ("row 3 (1-based)").
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import DataFileError, InputError
from coutil.fileio import atomic_write

FloatMatrix = NDArray[np.float64]

#: Cell texts read as a missing value (an error: coutil does not impute).
MISSING_TOKENS = frozenset({"", "na", "nan", "null", "none", "?", "."})

#: Longest accepted line of a CSV file, in characters: a file past it (``/dev/zero``, a huge file with
#: no newline) is refused as soon as the limit is reached, never buffered whole.
MAX_LINE_CHARS = 2**20
#: Longest accepted cell (the csv module's own default, 128 KiB), quoted cells spanning lines included.
MAX_CELL_CHARS = 2**17
#: Most columns a CSV file may have (every method here works column by column; past this a file is
#: almost surely not a table of attributes).
MAX_COLUMNS = 10_000


@dataclass(frozen=True)
class CsvTable:
    """A CSV file as text: its header and rows of cells, untouched (kept to rewrite the file)."""

    path: str
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    #: File line (1-based) where each row starts; quoted cells may span lines, blank lines are skipped.
    lines: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return len(self.rows)

    def line_of(self, row: int) -> int:
        """The file line where data row ``row`` (0-based) starts."""
        return self.lines[row] if row < len(self.lines) else row + 2

    def column_index(self, name: str) -> int:
        index = self._index().get(name)
        if index is None:
            hint = ""
            if len(self.header) == 1 and any(sep in self.header[0] for sep in ";\t|"):
                # A one-column header holding separators is almost always a file that is not comma-separated.
                hint = " (the file must be comma-separated)"
            shown = ", ".join(self.header[:20])
            if len(self.header) > 20:
                shown += f", ... ({len(self.header):,} in all)"
            raise DataFileError(self.path, f"unknown column {name!r}; the columns are {shown}{hint}")
        return index

    def _index(self) -> dict[str, int]:
        # O(1) lookups (a header may have thousands of columns); built once, on first use.
        index: dict[str, int] | None = self.__dict__.get("_column_index")
        if index is None:
            index = {name: i for i, name in enumerate(self.header)}
            object.__setattr__(self, "_column_index", index)
        return index


class _BoundedLines:
    """The lines of a text file, each read with a length limit (`MAX_LINE_CHARS`), for `csv.reader`."""

    def __init__(self, handle: Any, name: str) -> None:
        self._handle = handle
        self._name = name
        self.line = 0

    def __iter__(self) -> _BoundedLines:
        return self

    def __next__(self) -> str:
        text: str = self._handle.readline(MAX_LINE_CHARS + 1)
        if not text:
            raise StopIteration
        self.line += 1
        if len(text) > MAX_LINE_CHARS:
            raise DataFileError(self._name, f"line longer than {MAX_LINE_CHARS:,} characters (not a CSV table?)",
                                line=self.line)
        return text


def read_csv_records(handle: Any, name: str, *, delimiter: str = ",") -> list[tuple[int, list[str]]]:
    """Every record of an open CSV text stream (opened with ``newline=""``), with the file line (1-based) it
    starts on; blank lines are records with no cells. The one strict CSV reader of coutil: an unclosed quote,
    text after a closing quote, a NUL byte, an over-long line or cell, too many columns or bytes that are
    not UTF-8 raise `DataFileError` naming ``name`` and the line, never a lenient guess."""
    records: list[tuple[int, list[str]]] = []
    previous_end = 0
    previous_limit = csv.field_size_limit(MAX_CELL_CHARS)
    try:
        # strict: an unclosed quote is an error (lenient, it swallowed the rest of the file into one cell,
        # which then read as a header with no data rows), as is text after a closing quote.
        reader = csv.reader(_BoundedLines(handle, name), delimiter=delimiter, strict=True)
        for row in reader:
            if len(row) > MAX_COLUMNS:
                raise DataFileError(name, f"{len(row):,} cells: more than the {MAX_COLUMNS:,} columns coutil "
                                    "accepts", line=previous_end + 1)
            # reader.line_num is the line where the record ENDS; a quoted cell may span several lines.
            records.append((previous_end + 1, row))
            previous_end = reader.line_num
    except UnicodeDecodeError as exc:
        raise DataFileError(name, f"not a UTF-8 text file ({exc.reason})") from None
    except csv.Error as exc:
        # The bad record starts on the line after the last good one (e.g. a NUL byte, an unclosed quote).
        problem = "unclosed quote: the quoted cell that starts here is never closed" \
            if "unexpected end of data" in str(exc) else f"malformed CSV ({exc})"
        raise DataFileError(name, problem, line=previous_end + 1) from None
    except OSError as exc:
        raise DataFileError(name, f"cannot read ({exc.strerror})") from None
    finally:
        csv.field_size_limit(previous_limit)
    return records


def read_csv_file(path: str | Path) -> list[tuple[int, list[str]]]:
    """`read_csv_records` of a file (UTF-8, a byte order mark ignored); a missing file or a directory is a
    `DataFileError` too."""
    p = Path(path)
    name = str(path)
    if not p.exists():
        raise DataFileError(name, "no such file")
    if p.is_dir():
        raise DataFileError(name, "is a directory, not a CSV file")
    try:
        with p.open(newline="", encoding="utf-8-sig") as handle:
            return read_csv_records(handle, name)
    except OSError as exc:
        raise DataFileError(name, f"cannot read ({exc.strerror})") from None


def read_csv_table(path: str | Path) -> CsvTable:
    """Read a CSV file with a header row; reject missing, empty and ragged files."""
    name = str(path)
    # Blank lines at the end are common in hand-edited files; blank lines elsewhere are not rows.
    numbered = [(line, row) for line, row in read_csv_file(path) if any(cell.strip() for cell in row)]
    if not numbered:
        raise DataFileError(name, "empty file (a header row is required)")
    header_line, header = numbered[0]
    header_t = tuple(cell.strip() for cell in header)
    if any(not h for h in header_t):
        raise DataFileError(name, "empty column name in the header", line=header_line)
    seen: set[str] = set()
    for h in header_t:
        if h in seen:
            raise DataFileError(name, f"duplicate column name {h!r} in the header", line=header_line)
        seen.add(h)
    body: list[tuple[str, ...]] = []
    body_lines: list[int] = []
    for line, row in numbered[1:]:
        if len(row) != len(header_t):
            raise DataFileError(
                name, f"ragged row: {len(row)} cells where the header has {len(header_t)}", line=line
            )
        body.append(tuple(row))
        body_lines.append(line)
    if not body:
        raise DataFileError(name, "no data rows after the header")
    return CsvTable(name, header_t, tuple(body), tuple(body_lines))


def _shorten(cell: str, limit: int = 40) -> str:
    """A cell as quoted in an error message: at most ``limit`` characters (a message stays one line)."""
    return cell if len(cell) <= limit else f"{cell[:limit]}... ({len(cell):,} characters)"


def parse_float(text: str) -> float | None:
    """Parse a numeric cell, finite or not ('inf', '1e400' give inf); None when it is not a number at all."""
    t = text.strip()
    # float() also accepts Python literal syntax such as "1_000"; a data file's digit groups are a mistake.
    if "_" in t:
        return None
    try:
        return float(t)
    except ValueError:
        return None


def parse_number(text: str) -> float | None:
    """Parse a numeric cell; None when it is not a finite number (see `parse_float` to tell them apart)."""
    value = parse_float(text)
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True, eq=False)
class Dataset:
    """Numeric microdata: ``values[i, j]`` is attribute ``names[j]`` of record ``i``."""

    names: tuple[str, ...]
    values: FloatMatrix
    source: str = "<memory>"
    #: Ordinal categorical attributes: name -> categories in increasing order (rank 1 first).
    ordinal: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
        if v.ndim != 2:
            raise InputError(f"{self.source}: data must be a 2-D table, got {v.ndim} dimension(s)")
        if v.shape[1] != len(self.names):
            raise InputError(f"{self.source}: {v.shape[1]} columns but {len(self.names)} names")
        if not np.all(np.isfinite(v)):
            bad = np.argwhere(~np.isfinite(v))[0]
            raise InputError(
                f"{self.source}: missing or non-finite value in column {self.names[int(bad[1])]!r}, "
                f"row {int(bad[0]) + 1} (1-based)"
            )
        object.__setattr__(self, "values", v)

    @property
    def n(self) -> int:
        return int(self.values.shape[0])

    @property
    def m(self) -> int:
        return int(self.values.shape[1])

    def index_of(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise InputError(
                f"{self.source}: unknown column {name!r}; the columns are {', '.join(self.names)}"
            ) from None

    def select(self, names: Sequence[str]) -> Dataset:
        """The sub-dataset of the given attributes, in the given order."""
        if not names:
            raise InputError(f"{self.source}: no columns selected")
        idx = [self.index_of(n) for n in names]
        ordinal = {n: c for n, c in self.ordinal.items() if n in names}
        return Dataset(tuple(names), self.values[:, idx], self.source, ordinal)

    def column(self, name: str) -> NDArray[np.float64]:
        return self.values[:, self.index_of(name)]

    def with_values(self, values: FloatMatrix) -> Dataset:
        """Same attributes, other values (e.g. a masked version)."""
        return Dataset(self.names, values, self.source, self.ordinal)

    def labels_for(self, name: str, ranks: NDArray[np.float64]) -> list[str]:
        """Category labels of an ordinal attribute for (possibly fractional) ranks: nearest category."""
        cats = self.ordinal[name]
        idx = np.clip(np.rint(ranks).astype(np.int64), 1, len(cats)) - 1
        return [cats[i] for i in idx]

    def format_column(self, name: str, column: NDArray[np.float64]) -> list[str]:
        """Text cells for a column of this dataset's attribute (labels for ordinal attributes)."""
        if name in self.ordinal:
            return self.labels_for(name, column)
        return [format_number(v) for v in column]

    @classmethod
    def from_array(cls, values: Any, names: Sequence[str] | None = None, source: str = "<array>") -> Dataset:
        arr = np.asarray(values, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if names is None:
            names = [f"x{j + 1}" for j in range(arr.shape[1])]
        return cls(tuple(names), arr, source)

    @classmethod
    def from_dataframe(cls, frame: Any, columns: Sequence[str] | None = None) -> Dataset:
        """Build from a pandas DataFrame (pandas is optional: only needed to call this).

        Ordered categorical columns (``pd.Categorical(..., ordered=True)``) become ordinal attributes.
        """
        names = list(frame.columns) if columns is None else list(columns)
        missing = [n for n in names if n not in frame.columns]
        if missing:
            raise InputError(f"DataFrame: unknown column(s) {', '.join(map(repr, missing))}")
        cols: list[NDArray[np.float64]] = []
        ordinal: dict[str, tuple[str, ...]] = {}
        for n in names:
            series = frame[n]
            dtype = getattr(series, "dtype", None)
            if dtype is not None and getattr(dtype, "name", "") == "category":
                if not dtype.ordered:
                    raise InputError(f"DataFrame: column {n!r} is categorical but not ordered")
                ordinal[str(n)] = tuple(str(c) for c in dtype.categories)
                codes = np.asarray(series.cat.codes, dtype=np.float64)
                if np.any(codes < 0):
                    row = int(np.argwhere(codes < 0)[0][0]) + 1
                    raise InputError(f"DataFrame: missing value in column {n!r}, row {row} (1-based)")
                cols.append(codes + 1.0)
                continue
            try:
                col = np.asarray(series, dtype=np.float64)
            except (TypeError, ValueError):
                raise InputError(f"DataFrame: column {n!r} is not numeric") from None
            if not np.all(np.isfinite(col)):
                # Rows are counted by position from 1 (like the records of a file), not by index label.
                row = int(np.argwhere(~np.isfinite(col))[0][0]) + 1
                raise InputError(f"DataFrame: missing or non-finite value in column {n!r}, row {row} (1-based)")
            cols.append(col)
        return cls(tuple(str(n) for n in names), np.column_stack(cols), "<DataFrame>", ordinal)


def format_number(value: float) -> str:
    """Shortest text that round-trips the float; integers without a trailing '.0'."""
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


def parse_ordinal_spec(specs: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Parse CLI ordinal declarations ``name=low<medium<high`` into a mapping."""
    result: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, cats = spec.partition("=")
        categories = tuple(c.strip() for c in cats.split("<"))
        if not sep or not name.strip() or len(categories) < 2 or any(not c for c in categories):
            raise InputError(f"bad --ordinal {spec!r}: expected NAME=low<medium<high")
        if len(set(categories)) != len(categories):
            raise InputError(f"bad --ordinal {spec!r}: a category is listed twice")
        result[name.strip()] = categories
    return result


def table_to_dataset(
    table: CsvTable,
    columns: Sequence[str] | None = None,
    ordinal: Mapping[str, Sequence[str]] | None = None,
) -> Dataset:
    """Convert the selected columns of a CSV table to numbers (ordinal columns to 1-based ranks)."""
    ordinal = {k: tuple(v) for k, v in (ordinal or {}).items()}
    names = list(table.header) if columns is None else list(columns)
    if not names:
        raise DataFileError(table.path, "no columns selected")
    for n in ordinal:
        if n not in table.header:
            table.column_index(n)  # raises with the list of columns
    idx = [table.column_index(n) for n in names]
    values = np.empty((table.n, len(names)), dtype=np.float64)
    for j, (name, col) in enumerate(zip(names, idx, strict=True)):
        cats = ordinal.get(name)
        rank_of = {c: float(r + 1) for r, c in enumerate(cats)} if cats else None
        for i, row in enumerate(table.rows):
            cell = row[col].strip()
            line = table.line_of(i)
            if cell.lower() in MISSING_TOKENS:
                raise DataFileError(table.path, "missing value", line=line, column=name)
            if rank_of is not None:
                rank = rank_of.get(cell)
                if rank is None:
                    raise DataFileError(
                        table.path,
                        f"category {cell!r} is not one of {' < '.join(cats or ())}",
                        line=line,
                        column=name,
                    )
                values[i, j] = rank
                continue
            number = parse_float(cell)
            if number is None:
                raise DataFileError(table.path, f"not a number: {_shorten(cell)!r}", line=line, column=name)
            if not math.isfinite(number):
                # 'inf', '-Infinity' or an overflow such as '1e400': a number, but none coutil can use.
                raise DataFileError(table.path, f"not a finite number: {cell!r}", line=line, column=name)
            values[i, j] = number
    used_ordinal = {n: tuple(c) for n, c in ordinal.items() if n in names}
    return Dataset(tuple(names), values, table.path, used_ordinal)


def load_csv(
    path: str | Path,
    columns: Sequence[str] | None = None,
    ordinal: Mapping[str, Sequence[str]] | None = None,
) -> Dataset:
    """Load numeric (and declared ordinal) columns of a CSV file with a header row."""
    return table_to_dataset(read_csv_table(path), columns, ordinal)


def parse_columns(text: str | None) -> list[str] | None:
    """Split a ``--columns a,b,c`` option; None when not given."""
    if text is None:
        return None
    names = [c.strip() for c in text.split(",")]
    if not names or any(not c for c in names):
        raise InputError(f"bad column list {text!r}: expected comma-separated names like a,b,c")
    if len(set(names)) != len(names):
        raise InputError(f"bad column list {text!r}: a column is listed twice")
    return names


def as_dataset(data: Any, columns: Sequence[str] | None = None) -> Dataset:
    """Accept a Dataset, a pandas DataFrame, a path to a CSV file or a 2-D array (Python API)."""
    if isinstance(data, Dataset):
        return data if columns is None else data.select(columns)
    if isinstance(data, (str, Path)):
        return load_csv(data, columns)
    if hasattr(data, "columns") and hasattr(data, "dtypes"):
        return Dataset.from_dataframe(data, columns)
    ds = Dataset.from_array(data)
    return ds if columns is None else ds.select(columns)


def write_csv(path: str | Path, header: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Write a CSV file (creating parent directories) atomically (`coutil.fileio.atomic_write`: a
    crash leaves the old file or none, never a partial one); errors become `InputError`."""
    with atomic_write(path, newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def write_dataset(path: str | Path, data: Dataset) -> None:
    """Write a dataset as CSV (ordinal attributes as their category labels)."""
    cols = [data.format_column(n, data.values[:, j]) for j, n in enumerate(data.names)]
    write_csv(path, data.names, zip(*cols, strict=True))


def replace_columns(table: CsvTable, data: Dataset) -> list[tuple[str, ...]]:
    """The CSV table's rows with ``data``'s columns replaced (same header, same row order)."""
    if data.n != table.n:
        raise InputError(f"{table.path}: {table.n} rows but the replacement has {data.n}")
    idx = [table.column_index(n) for n in data.names]
    cols = [data.format_column(n, data.values[:, j]) for j, n in enumerate(data.names)]
    out: list[tuple[str, ...]] = []
    for i, row in enumerate(table.rows):
        cells = list(row)
        for c, col in zip(idx, cols, strict=True):
            cells[c] = col[i]
        out.append(tuple(cells))
    return out
