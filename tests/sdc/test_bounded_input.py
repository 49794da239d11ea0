"""CSV reading is bounded: a line, a cell or a header past the documented limits is a one-line error
naming the line, raised as soon as the limit is reached (never after buffering the whole input)."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from coutil.errors import DataFileError
from coutil.sdc.dataset import MAX_CELL_CHARS, MAX_COLUMNS, MAX_LINE_CHARS, load_csv, read_csv_table


def _peak_mb(path: str | Path) -> tuple[str, float]:
    tracemalloc.start()
    try:
        read_csv_table(path)
        message = ""
    except DataFileError as exc:
        message = str(exc)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    return message, peak


def test_dev_zero_is_refused_at_the_line_limit() -> None:
    message, peak = _peak_mb("/dev/zero")
    assert message.startswith("/dev/zero, line 1: line longer than") and peak < 50


def test_a_long_file_without_newline_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "one-line.csv"
    path.write_text("a" * (8 * MAX_LINE_CHARS))
    message, peak = _peak_mb(path)
    assert "line 1: line longer than" in message and peak < 50
    # A sparse 2 GB file (zeros, no newline) reads no further than the limit either.
    sparse = tmp_path / "sparse.csv"
    with sparse.open("wb") as handle:
        handle.truncate(2 * 2**30)
    message, peak = _peak_mb(sparse)
    assert "line longer than" in message and peak < 50


def test_a_quoted_cell_spanning_lines_is_bounded_too(tmp_path: Path) -> None:
    path = tmp_path / "quoted.csv"
    path.write_text('a,b\n1,"' + ("x" * 1000 + "\n") * (2 * MAX_CELL_CHARS // 1000) + '"\n')
    message, _ = _peak_mb(path)
    assert "line 2" in message and "field larger than field limit" in message


def test_a_million_column_header_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"c{i}" for i in range(10**6)) + "\n")
    message, peak = _peak_mb(path)
    assert "line 1" in message and peak < 50


def test_more_columns_than_the_cap_is_refused_and_the_cap_is_readable(tmp_path: Path) -> None:
    path = tmp_path / "over.csv"
    path.write_text(",".join(f"c{i}" for i in range(MAX_COLUMNS + 1)) + "\n")
    message, _ = _peak_mb(path)
    assert f"more than the {MAX_COLUMNS:,} columns" in message and "line 1" in message
    ok = tmp_path / "cap.csv"
    ok.write_text(",".join(f"c{i}" for i in range(MAX_COLUMNS)) + "\n" + ",".join("1" for _ in range(MAX_COLUMNS)))
    table = read_csv_table(ok)
    # Column lookup is a dict: every column of a 10^4-column header, found by name.
    assert [table.column_index(f"c{i}") for i in range(MAX_COLUMNS)] == list(range(MAX_COLUMNS))
    with pytest.raises(DataFileError, match=r"unknown column 'nope'.*\(10,000 in all\)"):
        table.column_index("nope")


def test_a_long_cell_is_quoted_short_in_the_error(tmp_path: Path) -> None:
    path = tmp_path / "long.csv"
    path.write_text("a,b\n1," + "y" * 5000 + "\n")
    with pytest.raises(DataFileError) as info:
        load_csv(path)
    assert "not a number: 'yyyy" in str(info.value) and "(5,000 characters)" in str(info.value)
    assert len(str(info.value)) < 300
