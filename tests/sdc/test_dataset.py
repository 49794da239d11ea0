"""The CSV data model (coutil/sdc/dataset.py): parsing, ordinal attributes, errors, writing back."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import numpy as np
import pytest

from coutil.errors import DataFileError, ExitCode, InputError
from coutil.sdc.dataset import (
    Dataset,
    as_dataset,
    format_number,
    load_csv,
    parse_columns,
    parse_ordinal_spec,
    read_csv_table,
    replace_columns,
    write_csv,
    write_dataset,
)


def _write(tmp_path: Path, text: str, name: str = "data.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_load_all_and_selected_columns(tmp_path: Path) -> None:
    path = _write(tmp_path, "age,income,city\n30,1000.5,7\n41,2000,8\n")
    data = load_csv(path)
    assert data.names == ("age", "income", "city")
    np.testing.assert_array_equal(data.values, [[30, 1000.5, 7], [41, 2000, 8]])
    assert (data.n, data.m) == (2, 3)
    picked = load_csv(path, ["income", "age"])
    assert picked.names == ("income", "age")
    np.testing.assert_array_equal(picked.values, [[1000.5, 30], [2000, 41]])
    np.testing.assert_array_equal(data.column("income"), [1000.5, 2000])


def test_text_columns_are_ignored_unless_selected(tmp_path: Path) -> None:
    path = _write(tmp_path, "name,age\nann,30\nbob,41\n")
    assert load_csv(path, ["age"]).values[:, 0].tolist() == [30, 41]
    with pytest.raises(DataFileError, match=r"line 2, column 'name': not a number"):
        load_csv(path)


def test_bom_blank_lines_and_spaces_are_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes("\ufeffa, b\n 1 , 2\n\n3,4\n\n".encode())
    data = load_csv(path)
    assert data.names == ("a", "b")
    np.testing.assert_array_equal(data.values, [[1, 2], [3, 4]])


def test_ordinal_columns_become_ranks_and_labels_round_trip(tmp_path: Path) -> None:
    path = _write(tmp_path, "edu,age\nsecondary,30\nprimary,41\ntertiary,50\n")
    spec = parse_ordinal_spec(["edu=primary<secondary<tertiary"])
    assert spec == {"edu": ("primary", "secondary", "tertiary")}
    data = load_csv(path, ordinal=spec)
    np.testing.assert_array_equal(data.column("edu"), [2, 1, 3])
    assert data.ordinal == {"edu": ("primary", "secondary", "tertiary")}
    assert data.labels_for("edu", np.array([1.2, 2.6, 0.0, 7.0])) == ["primary", "tertiary", "primary", "tertiary"]
    assert data.format_column("edu", np.array([2.0])) == ["secondary"]
    assert data.select(["age"]).ordinal == {}
    with pytest.raises(DataFileError, match=r"line 2, column 'edu': category 'secondary' is not one of"):
        load_csv(path, ordinal={"edu": ("primary", "tertiary")})
    with pytest.raises(DataFileError, match="unknown column 'grade'"):
        load_csv(path, ordinal={"grade": ("a", "b")})


@pytest.mark.parametrize(
    "spec", ["edu", "edu=", "=a<b", "edu=a", "edu=a<<b", "edu=a<b<a"]
)
def test_bad_ordinal_specs(spec: str) -> None:
    with pytest.raises(InputError, match="--ordinal"):
        parse_ordinal_spec([spec])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("\n\n", "empty file"),
        ("a,b\n", "no data rows"),
        ("a,,b\n1,2,3\n", "line 1: empty column name"),
        ("a,b,a\n1,2,3\n", "line 1: duplicate column name 'a'"),
        ("a,b\n1,2\n3\n", "line 3: ragged row: 1 cells where the header has 2"),
        ("a,b\n1,2\n3,4,5\n", "line 3: ragged row"),
        ("a,b\n1,2\n3,x\n", "line 3, column 'b': not a number: 'x'"),
        ("a,b\n1,2\n3,NA\n", "line 3, column 'b': missing value"),
        ("a,b\n1,\n", "line 2, column 'b': missing value"),
        ("a,b\n1,inf\n", "line 2, column 'b': not a finite number: 'inf'"),
        ("a,b\n1,2\n1e400,3\n", "line 3, column 'a': not a finite number: '1e400'"),
        ("a,b\n1,-Infinity\n", "line 2, column 'b': not a finite number: '-Infinity'"),
    ],
)
def test_bad_files_name_file_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(DataFileError) as info:
        load_csv(path)
    assert str(info.value).startswith(str(path))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.exit_code == ExitCode.USAGE


def test_missing_file_directory_unknown_column_and_binary(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        load_csv(tmp_path / "nope.csv")
    with pytest.raises(DataFileError, match="directory"):
        load_csv(tmp_path)
    path = _write(tmp_path, "a,b\n1,2\n")
    with pytest.raises(DataFileError, match="unknown column 'c'; the columns are a, b"):
        load_csv(path, ["a", "c"])
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"a,b\n\xff\xfe,1\n")
    with pytest.raises(DataFileError, match="UTF-8"):
        load_csv(binary)


def test_line_number_after_multiline_quoted_cell(tmp_path: Path) -> None:
    path = _write(tmp_path, 'note,b\n"two\nlines",1\nok,oops\n')
    with pytest.raises(DataFileError, match="line 4"):
        load_csv(path, ["b"])


def test_underscore_digit_groups_are_not_numbers(tmp_path: Path) -> None:
    path = _write(tmp_path, "a\n1_000\n")
    with pytest.raises(DataFileError, match="not a number"):
        load_csv(path)


def test_parse_columns() -> None:
    assert parse_columns(None) is None
    assert parse_columns(" a, b ,c") == ["a", "b", "c"]
    for bad in ["", "a,,b", "a,a", " , "]:
        with pytest.raises(InputError, match="column list"):
            parse_columns(bad)


def test_dataset_validation_and_from_array() -> None:
    with pytest.raises(InputError, match="2 columns but 1 names"):
        Dataset(("a",), np.zeros((2, 2)))
    with pytest.raises(InputError, match=r"column 'b', row 2 \(1-based\)"):
        Dataset(("a", "b"), np.array([[1.0, 2.0], [3.0, np.nan]]))
    data = Dataset.from_array([1.0, 2.0, 3.0])
    assert data.names == ("x1",) and data.values.shape == (3, 1)
    with pytest.raises(InputError, match="unknown column 'z'"):
        data.select(["z"])
    with pytest.raises(InputError, match="no columns"):
        data.select([])
    assert as_dataset(np.ones((2, 2))).names == ("x1", "x2")
    assert as_dataset(data) is data


def test_format_number() -> None:
    assert format_number(3.0) == "3"
    assert format_number(-0.0) == "0"
    assert format_number(2.5) == "2.5"
    assert float(format_number(0.1 + 0.2)) == 0.1 + 0.2
    assert float(format_number(1e20)) == 1e20


def test_replace_columns_keeps_header_order_and_other_cells(tmp_path: Path) -> None:
    path = _write(tmp_path, "id,edu,age\nA,primary,30\nB,tertiary,41\n")
    table = read_csv_table(path)
    data = load_csv(path, ["age", "edu"], {"edu": ("primary", "secondary", "tertiary")})
    masked = data.with_values(np.array([[35.5, 1.6], [36.0, 2.4]]))
    rows = replace_columns(table, masked)
    assert rows == [("A", "secondary", "35.5"), ("B", "secondary", "36")]
    out = tmp_path / "sub" / "out.csv"
    write_csv(out, table.header, rows)
    assert out.read_text().splitlines() == ["id,edu,age", "A,secondary,35.5", "B,secondary,36"]
    with pytest.raises(InputError, match="rows"):
        replace_columns(table, Dataset.from_array(np.zeros((3, 1)), ["age"]))
    write_dataset(tmp_path / "ds.csv", masked)
    assert (tmp_path / "ds.csv").read_text().splitlines()[1] == "35.5,secondary"
    with pytest.raises(InputError, match="cannot write"):
        write_csv(tmp_path, ["a"], [])


def test_pandas_dataframes_are_accepted() -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(
        {
            "age": [30, 41, 50],
            "edu": pd.Categorical(["secondary", "primary", "tertiary"],
                                  categories=["primary", "secondary", "tertiary"], ordered=True),
            "name": ["a", "b", "c"],
        }
    )
    data = as_dataset(frame, ["age", "edu"])
    np.testing.assert_array_equal(data.values, [[30, 2], [41, 1], [50, 3]])
    assert data.ordinal == {"edu": ("primary", "secondary", "tertiary")}
    with pytest.raises(InputError, match="not numeric"):
        Dataset.from_dataframe(frame, ["name"])
    with pytest.raises(InputError, match="unknown column"):
        Dataset.from_dataframe(frame, ["zzz"])
    frame.loc[1, "age"] = None
    # The second row: 1-based like a file's records, and said so (a DataFrame has no file lines).
    with pytest.raises(InputError, match=r"^DataFrame: missing or non-finite value in column 'age', row 2 \(1-based"):
        Dataset.from_dataframe(frame, ["age"])
    frame.loc[2, "edu"] = None
    with pytest.raises(InputError, match=r"^DataFrame: missing value in column 'edu', row 3 \(1-based\)$"):
        Dataset.from_dataframe(frame, ["edu"])


def test_error_locations_are_file_lines_or_1_based_rows(tmp_path: Path) -> None:
    """A file error names the file line (the header is line 1); an in-memory error the 1-based row."""
    path = _write(tmp_path, "a,b\n1,2\n3,inf\n")
    with pytest.raises(DataFileError) as info:
        load_csv(path)
    assert str(info.value) == f"{path}, line 3, column 'b': not a finite number: 'inf'"
    assert info.value.line == 3
    with pytest.raises(InputError) as array_info:
        Dataset(("a", "b"), np.array([[1.0, 2.0], [3.0, np.inf]]))
    assert str(array_info.value) == "<memory>: missing or non-finite value in column 'b', row 2 (1-based)"
    pd = pytest.importorskip("pandas")
    with pytest.raises(InputError) as frame_info:
        Dataset.from_dataframe(pd.DataFrame({"a": [1.0, 3.0], "b": [2.0, np.inf]}))
    assert str(frame_info.value) == "DataFrame: missing or non-finite value in column 'b', row 2 (1-based)"


def test_default_survey_dataset_ships_and_matches_its_generator() -> None:
    resource = importlib.resources.files("coutil") / "data" / "survey.csv"
    with importlib.resources.as_file(resource) as path:
        data = load_csv(path)
        text = Path(path).read_text(encoding="utf-8")
    assert data.names == ("age", "height_cm", "weight_kg", "hours_worked", "income", "savings", "medical_spend")
    assert data.n == 10_000  # `coutil run --subjects 10000` needs no --data
    assert np.all(data.values[:, [0, 1, 2, 4, 5, 6]] > 0)
    assert np.all(data.values[:, 3] >= 0)  # hours worked can be 0
    corr = np.corrcoef(data.values, rowvar=False)
    assert corr[1, 2] > 0.4  # height and weight
    assert corr[3, 4] > 0.2  # hours worked and income
    script = Path(__file__).resolve().parents[2] / "simulations" / "make_default_dataset.py"
    assert script.is_file(), f"{script} is missing"
    import runpy

    module = runpy.run_path(str(script))
    assert module["render"](module["generate"]()) == text


def test_malformed_csv_names_the_line(tmp_path: Path) -> None:
    # The csv module refuses fields over 128 KiB: the error must say where.
    path = _write(tmp_path, "a,b\n1,2\n3," + "x" * 140_000 + "\n")
    with pytest.raises(DataFileError, match=r"line 3: malformed CSV"):
        load_csv(path)


def test_unknown_column_of_a_semicolon_file_says_it_must_be_comma_separated(tmp_path: Path) -> None:
    path = _write(tmp_path, "a;b\n1;2\n")
    with pytest.raises(DataFileError, match="must be comma-separated"):
        load_csv(path, ["a"])
    comma = _write(tmp_path, "a,b\n1,2\n", "comma.csv")
    with pytest.raises(DataFileError) as info:
        load_csv(comma, ["c"])
    assert "comma-separated" not in str(info.value)


@pytest.mark.parametrize(("text", "line"), [('"a,b\n1,2\n', 1), ('a,b\n1,2\n3,"4\n5,6\n', 3)])
def test_an_unclosed_quote_is_named_with_the_line_it_starts_on(tmp_path: Path, text: str, line: int) -> None:
    """Found by a user walking the README: a header with an unclosed quote swallowed the file into one cell and
    was reported as "no data rows"; a data row's swallowed the rows after it."""
    path = _write(tmp_path, text)
    with pytest.raises(DataFileError, match=rf"line {line}: unclosed quote"):
        load_csv(path)


def test_text_after_a_closing_quote_is_malformed(tmp_path: Path) -> None:
    path = _write(tmp_path, 'a,b\n"1"x,2\n')
    with pytest.raises(DataFileError, match=r"line 2: malformed CSV"):
        load_csv(path)
