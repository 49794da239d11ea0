"""Result files of the experiments: atomic writes, JSON without NaN, CSV with the csv module."""

from __future__ import annotations

import csv
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from coutil.errors import DataFileError
from coutil.sdc.dataset import read_csv_file


def jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if hasattr(value, "item"):
        return value.item()
    return value


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and `os.replace`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_csv_rows(path: Path, rows: Iterable[dict[str, Any]]) -> int:
    """Rows (dicts) as CSV with the union of their keys as header, in first-seen order; written atomically."""
    listed = list(rows)
    header: dict[str, None] = {}
    for row in listed:
        header.update(dict.fromkeys(row))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(header), extrasaction="ignore")
        writer.writeheader()
        for row in listed:
            writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    os.replace(tmp, path)
    return len(listed)


def read_csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a result CSV file (its header's names as keys), read by coutil's strict CSV reader: a
    malformed file (an unclosed quote, a ragged row) is a `DataFileError` naming the file and the line."""
    records = [(line, row) for line, row in read_csv_file(path) if row]  # blank lines skipped, as DictReader did
    if not records:
        return []
    header = records[0][1]
    for line, row in records[1:]:
        if len(row) != len(header):
            raise DataFileError(str(path), f"ragged row: {len(row)} cells where the header has {len(header)}",
                                line=line)
    return [dict(zip(header, row, strict=True)) for _, row in records[1:]]
