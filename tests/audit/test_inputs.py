"""coutil.audit.inputs: the one-pass number conversion must give exactly what the per-cell checked
path of coutil.sdc.dataset gives (or its error), and `load_pair` pairs columns by name or position."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.audit.inputs import load_pair, to_dataset
from coutil.audit.report import protector_report
from coutil.errors import DataFileError, InputError
from coutil.sdc.dataset import CsvTable, table_to_dataset

#: Cells a CSV file may hold: plain and unusual numbers, and everything the checked path refuses.
CELLS = [
    "1", "-2.5", " 3.25 ", "\t4\n", "+7", "1e3", "1E-2", ".5", "5.", "0001", "-0", "١٢", "\u00a01.5",
    "1_000", "nan", "NaN", "inf", "-Infinity", "1e400", "", " ", "na", "null", "none", "?", ".", "abc",
    "1,5", "0x10", "1d5", "--1",
]  # fmt: skip


@st.composite
def tables(draw: st.DrawFn) -> CsvTable:
    n = draw(st.integers(1, 6))
    m = draw(st.integers(1, 3))
    plain = draw(st.booleans())  # most files hold only ordinary numbers: the fast path
    pool = CELLS[:13] if plain else CELLS
    rows = tuple(tuple(draw(st.sampled_from(pool)) for _ in range(m)) for _ in range(n))
    return CsvTable("t.csv", tuple(f"c{j}" for j in range(m)), rows, tuple(range(2, n + 2)))


@settings(max_examples=300, deadline=None)
@given(table=tables(), pick=st.booleans())
def test_fast_conversion_is_the_checked_one(table: CsvTable, pick: bool) -> None:
    names = list(reversed(table.header)) if pick else None
    try:
        expected = table_to_dataset(table, names, {})
    except DataFileError as exc:
        with pytest.raises(DataFileError) as raised:
            to_dataset(table, names, {})
        # Same file, line and column; the message may add a hint on what to do.
        assert str(raised.value).startswith(str(exc))
        return
    got = to_dataset(table, names, {})
    assert got.names == expected.names and got.source == expected.source
    assert dict(got.ordinal) == dict(expected.ordinal)
    assert np.array_equal(got.values, expected.values)
    assert np.array_equal(np.signbit(got.values), np.signbit(expected.values))  # "-0" stays -0.0


def _csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_load_pair_by_name_and_by_position(tmp_path: Path) -> None:
    x = _csv(tmp_path / "x.csv", "id,a,b\n1,1.5,2\n2,3,4\n")
    by_name = _csv(tmp_path / "y.csv", "b,a,extra\n5,6,x\n7,8,y\n")
    pair = load_pair(x, by_name, "a,b")
    assert pair.note is None and pair.release_names == ("a", "b")
    assert pair.release.names == ("a", "b") and pair.release.values.tolist() == [[6, 5], [8, 7]]
    assert pair.release_table.header == ("b", "a", "extra")
    # No common name, one release column per attribute used: by position, with a note.
    other = _csv(tmp_path / "z.csv", "p,q\n5,6\n7,8\n")
    pair = load_pair(x, other, "b,a")
    assert pair.release_names == ("p", "q") and pair.release.names == ("b", "a")
    assert pair.release.values.tolist() == [[5, 6], [7, 8]]
    assert pair.note is not None and "(b=p, a=q)" in pair.note
    with pytest.raises(InputError, match="cannot be paired by position"):
        load_pair(x, other, None)  # three columns of X, two of the release
    with pytest.raises(InputError, match="only a match by name"):
        load_pair(x, _csv(tmp_path / "w.csv", "a,q\n1,2\n3,4\n"), "a,b")


def test_protector_report_takes_a_known_mapping() -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(size=(30, 2))
    order = rng.permutation(30)  # release row k is the masked original record order[k]
    y = (x + rng.normal(scale=0.3, size=x.shape))[order]
    where = np.argsort(order)  # f(x_i): the release row of original record i
    out, _ = protector_report(x, y, ["a", "b"], mapping=where)
    assert [r["mapping"] for r in out["records"]] == (where + 1).tolist()
    single, _ = protector_report(x, y, ["a", "b"], record=4, mapping=where.tolist())
    assert single["records"][0]["mapping"] == int(where[4]) + 1
    assert single["records"][0]["distance_vector"] == out["records"][4]["distance_vector"]
    with pytest.raises(InputError, match="one integer release row per original record"):
        protector_report(x, y, ["a", "b"], mapping=where[:-1])
    with pytest.raises(InputError, match="outside the release rows"):
        protector_report(x, y[:20], ["a", "b"], mapping=where)


@pytest.mark.parametrize("enabled", [True, False])
def test_reading_leaves_the_garbage_collector_as_it_was(tmp_path: Path, enabled: bool) -> None:
    # The files are read with the collector paused; it must come back even when reading fails.
    good = _csv(tmp_path / "x.csv", "a,b\n1,2\n3,4\n")
    ragged = _csv(tmp_path / "y.csv", "a,b\n1,2\n3\n")
    (gc.enable if enabled else gc.disable)()
    try:
        assert load_pair(good, good, None).release.n == 2
        assert gc.isenabled() is enabled
        with pytest.raises(InputError, match="ragged row"):
            load_pair(good, ragged, None)
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
