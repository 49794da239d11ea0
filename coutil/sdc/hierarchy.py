"""Generalization hierarchies for SafePub: numeric intervals, dates and categorical trees.

A hierarchy maps every value of one column to a label at each *level*: level 0 is the value itself, the
top level is usually ``*`` (everything in one group). For differential privacy a hierarchy must be
**public and data-independent**: interval hierarchies take their domain and widths (or bin edges) from the
user, never from the data, and a value outside the declared domain is an error, not a reason to widen it.

File formats (``--hierarchy COLUMN=FILE``):

- **CSV** (as ARX's hierarchies): one row per value, one column per level, level 0 first, no header;
  separator ``,`` or ``;`` (ARX writes ``;``). Every row has the same number of levels, and a label has one
  parent (it is a tree). Example: ``nurse;health;*``.
- **TOML**, with ``kind`` one of:

  ``kind = "intervals"``: ``min``, ``max`` and ``widths = [5, 10, 20]`` (each a multiple of the one before,
  intervals ``[min + i w, min + (i + 1) w[`` clipped at ``max``, which is included) or ``edges = [[0, 18,
  65, 120], [0, 65, 120]]`` (one list per level, each level's edges among the previous level's). A top
  level ``*`` is added.

  ``kind = "dates"``: ``min`` and ``max`` (dates), ``format`` (default ``%Y-%m-%d``) and ``levels`` (a
  subset, in order, of ``month``, ``year``, ``decade``, ``century``; default all but century); a top ``*``
  is added.

  ``kind = "tree"``: ``rows = [["nurse", "health", "*"], ...]``, as the CSV.

Each encoded level carries the *share* of the domain each label covers (0 for an exact number, the
fraction of leaves for a tree), used by SafePub's granularity score.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc.dataset import read_csv_records

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]

TOP = "*"
DATE_LEVELS = ("month", "year", "decade", "century")


@dataclass(frozen=True)
class EncodedColumn:
    """One column generalized at every level: codes, their labels and the share of the domain they cover."""

    name: str
    #: codes[level][row] indexes labels[level].
    codes: tuple[IntArray, ...]
    labels: tuple[tuple[str, ...], ...]
    shares: tuple[FloatArray, ...]

    @property
    def height(self) -> int:
        """The highest level (levels are 0..height)."""
        return len(self.codes) - 1

    def root_code(self) -> int:
        """The code of the top level's single label, or -1 when the top level has several labels."""
        return 0 if len(self.labels[-1]) == 1 else -1


def _encode_labels(
    name: str, per_level: Sequence[Sequence[str]], shares: Sequence[Mapping[str, float]]
) -> EncodedColumn:
    codes: list[IntArray] = []
    labels: list[tuple[str, ...]] = []
    share_arrays: list[FloatArray] = []
    for level, column in enumerate(per_level):
        uniq, inverse = np.unique(np.asarray(column, dtype=object).astype(str), return_inverse=True)
        codes.append(inverse.astype(np.int64).reshape(-1))
        labels.append(tuple(str(u) for u in uniq))
        share_arrays.append(np.array([shares[level][str(u)] for u in uniq], dtype=np.float64))
    return EncodedColumn(name, tuple(codes), tuple(labels), tuple(share_arrays))


class Hierarchy:
    """Base class: `encode` generalizes a column's cells at every level."""

    kind = "hierarchy"

    def __init__(self, column: str, source: str) -> None:
        self.column = column
        self.source = source

    @property
    def height(self) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def encode(self, cells: Sequence[str]) -> EncodedColumn:  # pragma: no cover - overridden
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"column": self.column, "kind": self.kind, "source": self.source, "height": self.height}

    def _uncovered(self, value: str, row: int, why: str = "") -> InputError:
        detail = f" ({why})" if why else ""
        return InputError(
            f"hierarchy {self.source} for column {self.column!r} does not cover the value {value!r} "
            f"of data row {row + 1}{detail}"
        )


def _format_number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))


class IntervalHierarchy(Hierarchy):
    """Numeric intervals from a public domain [min, max] and nested bin edges per level."""

    kind = "intervals"

    def __init__(self, column: str, source: str, low: float, high: float, edges: Sequence[Sequence[float]]) -> None:
        super().__init__(column, source)
        where = f"hierarchy {source} for column {column!r}"
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise InputError(f"{where}: needs finite min < max, not min={low!r}, max={high!r}")
        if not edges:
            raise InputError(f"{where}: needs at least one level of widths or edges")
        previous: set[float] | None = None
        checked: list[tuple[float, ...]] = []
        for level, level_edges in enumerate(edges, start=1):
            e = tuple(float(x) for x in level_edges)
            if len(e) < 2 or e[0] != low or e[-1] != high or any(b <= a for a, b in itertools.pairwise(e)):
                raise InputError(
                    f"{where}: the edges of level {level} must increase strictly from min={_format_number(low)} "
                    f"to max={_format_number(high)}"
                )
            if previous is not None and not set(e) <= previous:
                raise InputError(f"{where}: the edges of level {level} are not among those of level {level - 1}")
            previous = set(e)
            checked.append(e)
        self.low, self.high = float(low), float(high)
        self.edges = tuple(checked)

    @classmethod
    def from_widths(
        cls, column: str, source: str, low: float, high: float, widths: Sequence[float]
    ) -> IntervalHierarchy:
        where = f"hierarchy {source} for column {column!r}"
        edges: list[list[float]] = []
        multiples: list[int] = []
        for w in widths:
            if isinstance(w, bool) or not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
                raise InputError(f"{where}: bad width {w!r}: widths must be positive numbers")
            if multiples:
                previous = widths[len(multiples) - 1]
                ratio = w / previous
                if ratio <= 1 or abs(ratio - round(ratio)) > 1e-9:
                    raise InputError(
                        f"{where}: bad width {w!r}: each width must be a multiple (> 1) of the one before "
                        f"({previous!r}), so that the intervals nest"
                    )
                multiples.append(multiples[-1] * round(ratio))
            else:
                multiples.append(1)
        base = float(widths[0]) if widths else 1.0
        if math.isfinite(low) and math.isfinite(high) and high > low:
            for m in multiples:
                # Every edge is low + (integer) x base, so the edges of a coarser level are exactly among the finer's.
                count = math.ceil((high - low) / (m * base) - 1e-9)
                inner = [low + (i * m) * base for i in range(count)]
                edges.append([e for e in inner if e < high] + [high])
        return cls(column, source, low, high, edges)

    @property
    def height(self) -> int:
        return len(self.edges) + 1

    def _values(self, cells: Sequence[str]) -> FloatArray:
        out = np.empty(len(cells), dtype=np.float64)
        for i, cell in enumerate(cells):
            try:
                x = float(cell.strip())
            except ValueError:
                raise self._uncovered(cell, i, "not a number") from None
            if not (self.low <= x <= self.high):
                raise self._uncovered(
                    cell, i, f"outside the domain [{_format_number(self.low)}, {_format_number(self.high)}]"
                )
            out[i] = x
        return out

    def encode(self, cells: Sequence[str]) -> EncodedColumn:
        x = self._values(cells)
        span = self.high - self.low
        per_level: list[list[str]] = [[c.strip() for c in cells]]
        shares: list[dict[str, float]] = [dict.fromkeys(per_level[0], 0.0)]
        for e in self.edges:
            edges = np.asarray(e)
            # side="right": [a, b[ ; the last interval also holds max itself.
            idx = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, len(edges) - 2)
            names = [
                f"[{_format_number(edges[j])}, {_format_number(edges[j + 1])}{']' if j == len(edges) - 2 else '['}"
                for j in range(len(edges) - 1)
            ]
            per_level.append([names[j] for j in idx])
            shares.append({names[j]: float(edges[j + 1] - edges[j]) / span for j in range(len(edges) - 1)})
        per_level.append([TOP] * len(cells))
        shares.append({TOP: 1.0})
        return _encode_labels(self.column, per_level, shares)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "min": self.low, "max": self.high, "edges": [list(e) for e in self.edges]}


class DateHierarchy(Hierarchy):
    """Dates generalized to month, year, decade, century within a public domain [min, max]."""

    kind = "dates"

    def __init__(self, column: str, source: str, low: dt.date, high: dt.date, fmt: str, levels: Sequence[str]) -> None:
        super().__init__(column, source)
        where = f"hierarchy {source} for column {column!r}"
        if not low < high:
            raise InputError(f"{where}: needs min < max, not min={low}, max={high}")
        bad = [lv for lv in levels if lv not in DATE_LEVELS]
        order = [DATE_LEVELS.index(lv) for lv in levels if lv in DATE_LEVELS]
        if bad or not levels or order != sorted(set(order)):
            raise InputError(f"{where}: levels must be a non-empty increasing subset of {', '.join(DATE_LEVELS)}")
        self.low, self.high, self.format, self.levels = low, high, fmt, tuple(levels)

    @property
    def height(self) -> int:
        return len(self.levels) + 1

    @staticmethod
    def _label(d: dt.date, level: str) -> tuple[str, dt.date, dt.date]:
        if level == "month":
            start = dt.date(d.year, d.month, 1)
            end = dt.date(d.year + (d.month == 12), d.month % 12 + 1, 1)
            return f"{d.year:04d}-{d.month:02d}", start, end
        span = {"year": 1, "decade": 10, "century": 100}[level]
        first = d.year - d.year % span
        label = f"{first:04d}" if span == 1 else f"{first:04d}-{first + span - 1:04d}"
        return label, dt.date(first, 1, 1), dt.date(min(first + span, 9999), 1, 1)

    def encode(self, cells: Sequence[str]) -> EncodedColumn:
        dates: list[dt.date] = []
        for i, cell in enumerate(cells):
            try:
                d = dt.datetime.strptime(cell.strip(), self.format).date()
            except ValueError:
                raise self._uncovered(cell, i, f"not a date in the format {self.format}") from None
            if not self.low <= d <= self.high:
                raise self._uncovered(cell, i, f"outside the domain [{self.low}, {self.high}]")
            dates.append(d)
        total = float((self.high - self.low).days + 1)
        per_level: list[list[str]] = [[c.strip() for c in cells]]
        shares: list[dict[str, float]] = [dict.fromkeys(per_level[0], 1.0 / total)]
        for level in self.levels:
            labels: list[str] = []
            level_shares: dict[str, float] = {}
            for d in dates:
                label, start, end = self._label(d, level)
                labels.append(label)
                covered = (min(end, self.high + dt.timedelta(days=1)) - max(start, self.low)).days
                level_shares[label] = min(1.0, covered / total)
            per_level.append(labels)
            shares.append(level_shares)
        per_level.append([TOP] * len(cells))
        shares.append({TOP: 1.0})
        return _encode_labels(self.column, per_level, shares)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "min": str(self.low), "max": str(self.high), "levels": list(self.levels)}


class TreeHierarchy(Hierarchy):
    """A categorical tree: one row per leaf value, one column per level."""

    kind = "tree"

    def __init__(self, column: str, source: str, rows: Sequence[Sequence[str]]) -> None:
        super().__init__(column, source)
        where = f"hierarchy {source} for column {column!r}"
        clean = [tuple(str(c).strip() for c in row) for row in rows if any(str(c).strip() for c in row)]
        if not clean:
            raise InputError(f"{where}: no rows")
        width = len(clean[0])
        if width < 2:
            raise InputError(f"{where}: each row needs at least two levels (the value and a generalization)")
        parents: dict[tuple[int, str], str] = {}
        leaves: dict[str, tuple[str, ...]] = {}
        for number, row in enumerate(clean, start=1):
            if len(row) != width:
                raise InputError(f"{where}: row {number} has {len(row)} levels, row 1 has {width}")
            if any(not c for c in row):
                raise InputError(f"{where}: row {number} has an empty label")
            if row[0] in leaves:
                raise InputError(f"{where}: row {number} repeats the value {row[0]!r}")
            for level in range(width - 1):
                key = (level, row[level])
                if parents.setdefault(key, row[level + 1]) != row[level + 1]:
                    raise InputError(
                        f"{where}: row {number}: {row[level]!r} has two parents, "
                        f"{parents[key]!r} and {row[level + 1]!r} (a hierarchy is a tree)"
                    )
            leaves[row[0]] = row
        self.rows = leaves
        self.width = width
        # The share of a label: the fraction of the leaves under it.
        counts: list[dict[str, int]] = [{} for _ in range(width)]
        for row in leaves.values():
            for level, label in enumerate(row):
                counts[level][label] = counts[level].get(label, 0) + 1
        self._shares = [{label: c / len(leaves) for label, c in level.items()} for level in counts]

    @property
    def height(self) -> int:
        return self.width - 1

    def encode(self, cells: Sequence[str]) -> EncodedColumn:
        paths: list[tuple[str, ...]] = []
        for i, cell in enumerate(cells):
            path = self.rows.get(cell.strip())
            if path is None:
                raise self._uncovered(cell, i)
            paths.append(path)
        per_level = [[p[level] for p in paths] for level in range(self.width)]
        return _encode_labels(self.column, per_level, self._shares)


# ------------------------------------------------------------------------------------------- loading


def _read_text(path: Path, column: str) -> str:
    if not path.exists():
        raise InputError(f"hierarchy file {path} for column {column!r}: no such file")
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"hierarchy file {path} for column {column!r}: cannot read ({exc})") from None


def _tree_from_csv(path: Path, column: str) -> TreeHierarchy:
    text = _read_text(path, column)
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = ";" if ";" in first and "," not in first else ","
    # The strict reader of every CSV file (an unclosed quote is named with its line, never swallows the rest).
    records = read_csv_records(io.StringIO(text, newline=""), f"hierarchy file {path} for column {column!r}",
                               delimiter=delimiter)
    return TreeHierarchy(column, str(path), [row for _, row in records])


def _number(table: Mapping[str, Any], key: str, where: str) -> float:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{where}: '{key}' must be a finite number, not {value!r}")
    return float(value)


def _date(table: Mapping[str, Any], key: str, where: str, fmt: str) -> dt.date:
    value = table.get(key)
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.datetime.strptime(value, fmt).date()
        except ValueError:
            pass
    raise InputError(f"{where}: '{key}' must be a date ({fmt}), not {value!r}")


def hierarchy_from_mapping(column: str, source: str, table: Mapping[str, Any]) -> Hierarchy:
    """A hierarchy from a parsed TOML table (see the module docstring for the keys)."""
    where = f"hierarchy {source} for column {column!r}"
    kind = table.get("kind")
    if kind == "intervals":
        low, high = _number(table, "min", where), _number(table, "max", where)
        if ("widths" in table) == ("edges" in table):
            raise InputError(f"{where}: give either 'widths' or 'edges'")
        if "widths" in table:
            widths = table["widths"]
            if not isinstance(widths, list) or not widths:
                raise InputError(f"{where}: 'widths' must be a non-empty list of numbers")
            return IntervalHierarchy.from_widths(column, source, low, high, widths)
        edges = table["edges"]
        if not isinstance(edges, list) or not all(isinstance(e, list) for e in edges):
            raise InputError(f"{where}: 'edges' must be a list of lists of numbers, one per level")
        try:
            numeric = [[float(x) for x in e] for e in edges]
        except (TypeError, ValueError):
            raise InputError(f"{where}: 'edges' must hold numbers only") from None
        return IntervalHierarchy(column, source, low, high, numeric)
    if kind == "dates":
        fmt = table.get("format", "%Y-%m-%d")
        if not isinstance(fmt, str):
            raise InputError(f"{where}: 'format' must be a strptime format string")
        levels = table.get("levels", ["month", "year", "decade"])
        if not isinstance(levels, list) or not all(isinstance(x, str) for x in levels):
            raise InputError(f"{where}: 'levels' must be a list of level names")
        low_date, high_date = _date(table, "min", where, fmt), _date(table, "max", where, fmt)
        return DateHierarchy(column, source, low_date, high_date, fmt, levels)
    if kind == "tree":
        rows = table.get("rows")
        if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
            raise InputError(f"{where}: 'rows' must be a list of lists of labels")
        return TreeHierarchy(column, source, rows)
    raise InputError(f"{where}: 'kind' must be one of intervals, dates, tree, not {kind!r}")


def load_hierarchy(column: str, path: str | Path) -> Hierarchy:
    """A hierarchy from a file: ``.toml`` (any kind) or CSV (a categorical tree)."""
    p = Path(path)
    if p.suffix.lower() == ".toml":
        text = _read_text(p, column)
        try:
            table = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"hierarchy file {p} for column {column!r}: not valid TOML ({exc})") from None
        return hierarchy_from_mapping(column, str(p), table)
    return _tree_from_csv(p, column)


def parse_hierarchy_specs(specs: Sequence[str]) -> dict[str, Path]:
    """``["age=age.toml", "job=jobs.csv"]`` -> {"age": Path("age.toml"), ...}; one-line errors."""
    out: dict[str, Path] = {}
    for spec in specs:
        column, sep, file = spec.partition("=")
        if not sep or not column.strip() or not file.strip():
            raise InputError(f"bad --hierarchy {spec!r}: expected COLUMN=FILE, e.g. age=age.toml")
        if column.strip() in out:
            raise InputError(f"bad --hierarchy {spec!r}: column {column.strip()!r} has two hierarchies")
        out[column.strip()] = Path(file.strip())
    return out
