"""coutil.sdc.hierarchy: intervals, dates, categorical trees; one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from coutil.errors import InputError
from coutil.sdc.hierarchy import (
    DateHierarchy,
    IntervalHierarchy,
    TreeHierarchy,
    load_hierarchy,
    parse_hierarchy_specs,
)


def _labels(h: IntervalHierarchy | DateHierarchy | TreeHierarchy, cells: list[str], level: int) -> list[str]:
    enc = h.encode(cells)
    return [enc.labels[level][c] for c in enc.codes[level]]


def test_intervals_from_widths() -> None:
    h = IntervalHierarchy.from_widths("age", "t", 0, 100, [10, 20])
    assert h.height == 3
    cells = ["0", "9.5", "10", "35", "100"]
    assert _labels(h, cells, 0) == cells
    assert _labels(h, cells, 1) == ["[0, 10[", "[0, 10[", "[10, 20[", "[30, 40[", "[90, 100]"]
    assert _labels(h, cells, 2) == ["[0, 20[", "[0, 20[", "[0, 20[", "[20, 40[", "[80, 100]"]
    assert _labels(h, cells, 3) == ["*"] * 5
    enc = h.encode(cells)
    assert sorted(set(enc.shares[1].tolist())) == [0.1]
    assert enc.shares[3].tolist() == [1.0]
    assert enc.root_code() == 0


def test_intervals_clip_the_last_and_nest_exactly() -> None:
    h = IntervalHierarchy.from_widths("x", "t", 0, 1, [0.1, 0.3])
    assert set(h.edges[1]) <= set(h.edges[0])
    assert h.edges[1][-2:] == (h.edges[1][-2], 1.0)
    assert _labels(h, ["0.95"], 2)[0].endswith("1]")


def test_intervals_from_edges() -> None:
    h = IntervalHierarchy("age", "t", 0, 120, [[0, 18, 65, 120], [0, 65, 120]])
    assert _labels(h, ["17", "18", "70"], 1) == ["[0, 18[", "[18, 65[", "[65, 120]"]
    assert _labels(h, ["17", "18", "70"], 2) == ["[0, 65[", "[0, 65[", "[65, 120]"]


@pytest.mark.parametrize(
    ("widths", "message"),
    [([10, 15], "multiple"), ([10, -20], "positive"), ([0], "positive"), ([20, 10], "multiple")],
)
def test_bad_widths(widths: list[float], message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        IntervalHierarchy.from_widths("age", "age.toml", 0, 100, widths)
    assert "\n" not in str(info.value) and "'age'" in str(info.value)


def test_bad_edges() -> None:
    with pytest.raises(InputError, match="not among"):
        IntervalHierarchy("a", "t", 0, 10, [[0, 5, 10], [0, 4, 10]])
    with pytest.raises(InputError, match="increase strictly"):
        IntervalHierarchy("a", "t", 0, 10, [[0, 5, 5, 10]])
    with pytest.raises(InputError, match="min < max"):
        IntervalHierarchy.from_widths("a", "t", 10, 0, [1])


@pytest.mark.parametrize(("cell", "why"), [("130", "outside the domain"), ("-1", "outside"), ("abc", "not a number")])
def test_uncovered_numbers(cell: str, why: str) -> None:
    h = IntervalHierarchy.from_widths("age", "age.toml", 0, 120, [10])
    with pytest.raises(InputError, match=why) as info:
        h.encode(["5", cell])
    assert "data row 2" in str(info.value) and "'age'" in str(info.value) and "\n" not in str(info.value)


def test_tree_from_arx_csv(tmp_path: Path) -> None:
    path = tmp_path / "job.csv"
    path.write_text("nurse;health;*\ndoctor;health;*\nclerk;office;*\n")
    h = load_hierarchy("job", path)
    assert isinstance(h, TreeHierarchy) and h.height == 2
    assert _labels(h, ["doctor", "clerk"], 1) == ["health", "office"]
    enc = h.encode(["doctor", "clerk", "nurse"])
    shares = dict(zip(enc.labels[1], enc.shares[1].tolist(), strict=True))
    assert shares == {"health": pytest.approx(2 / 3), "office": pytest.approx(1 / 3)}
    with pytest.raises(InputError, match="does not cover the value 'pilot' of data row 2"):
        h.encode(["nurse", "pilot"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,x,*\nb,y\n", "2 levels"),
        ("a,x,*\nb,x,+\n", "two parents"),
        ("a,x,*\na,x,*\n", "repeats"),
        ("a\nb\n", "at least two levels"),
        ("", "no rows"),
    ],
)
def test_bad_trees(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "h.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message):
        load_hierarchy("c", path)


def test_toml_kinds(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('kind = "intervals"\nmin = 0\nmax = 100\nwidths = [25, 50]\n')
    (tmp_path / "d.toml").write_text(
        'kind = "dates"\nmin = 1990-01-01\nmax = 2029-12-31\nlevels = ["year", "decade"]\n'
    )
    (tmp_path / "t.toml").write_text('kind = "tree"\nrows = [["M", "*"], ["F", "*"]]\n')
    assert _labels(load_hierarchy("a", tmp_path / "a.toml"), ["30"], 2) == ["[0, 50["]
    d = load_hierarchy("d", tmp_path / "d.toml")
    assert _labels(d, ["2003-05-17"], 1) == ["2003"]
    assert _labels(d, ["2003-05-17"], 2) == ["2000-2009"]
    assert _labels(d, ["2003-05-17"], 3) == ["*"]
    assert load_hierarchy("t", tmp_path / "t.toml").height == 1


def test_dates_month_and_errors() -> None:
    import datetime as dt

    h = DateHierarchy("day", "t", dt.date(2020, 1, 1), dt.date(2020, 12, 31), "%Y-%m-%d", ["month", "year"])
    assert _labels(h, ["2020-12-31", "2020-02-29"], 1) == ["2020-12", "2020-02"]
    with pytest.raises(InputError, match="outside the domain"):
        h.encode(["2021-01-01"])
    with pytest.raises(InputError, match="not a date"):
        h.encode(["31/12/2020"])
    with pytest.raises(InputError, match="increasing subset"):
        DateHierarchy("day", "t", dt.date(2020, 1, 1), dt.date(2021, 1, 1), "%Y-%m-%d", ["year", "month"])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('kind = "intervals"\nmin = 0\nmax = 10\n', "either 'widths' or 'edges'"),
        ('kind = "intervals"\nmin = "a"\nmax = 10\nwidths = [1]\n', "'min' must be a finite number"),
        ('kind = "blobs"\n', "'kind' must be one of"),
        ("kind = [", "not valid TOML"),
        ('kind = "dates"\nmin = "x"\nmax = 2020-01-01\n', "'min' must be a date"),
    ],
)
def test_bad_toml(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "h.toml"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as info:
        load_hierarchy("c", path)
    assert "\n" not in str(info.value)


def test_missing_file_and_specs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        load_hierarchy("c", tmp_path / "nope.csv")
    assert parse_hierarchy_specs(["a=x.csv", " b = y.toml "]) == {"a": Path("x.csv"), "b": Path("y.toml")}
    for bad in (["a"], ["=x"], ["a="], ["a=x", "a=y"]):
        with pytest.raises(InputError, match="--hierarchy"):
            parse_hierarchy_specs(bad)
