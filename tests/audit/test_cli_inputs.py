"""CLI tests of how `coutil audit`, `attack` and `reverse-map` read their inputs and talk on stderr:
columns paired by position on the paper's untouched running example, known record mappings from a
file or a release column, star rank intervals, and the one-line warnings and errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.cli import main
from tests.audit.test_cli_audit import TABLE4, TABLE5, TABLE5_DISTANCE
from tests.audit.test_ranks import ref_star

NOTE = "pairing them by position (X1=Y1, X2=Y2, X3=Y3)"


@pytest.fixture
def files(running_example: Path, tmp_path: Path) -> dict[str, str]:
    """The running example untouched (Y.csv has Y1,Y2,Y3), plus Y with X's names for comparison."""
    with (running_example / "Y.csv").open() as handle:
        rows = list(csv.reader(handle))[1:]
    named = tmp_path / "Y_named.csv"
    _write_csv(named, ["X1", "X2", "X3"], rows)
    return {
        "X": str(running_example / "X.csv"),
        "Y": str(running_example / "Y.csv"),
        "Z": str(running_example / "Z.csv"),
        "Yx": str(named),
        "tmp": str(tmp_path),
    }


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> str:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return str(path)


def _run(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> tuple[dict[str, Any], str]:
    """Exit code, the one JSON object on stdout, and stderr."""
    assert main(argv) == code, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.out.count("\n") == 1, "--json prints exactly one line"
    result: dict[str, Any] = json.loads(captured.out)
    return result, captured.err


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """A usage error: exit code 2, nothing on stdout, exactly one line on stderr."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("coutil: error:") and captured.err.count("\n") == 1, captured.err
    return captured.err


# ------------------------------------------------------------------------------ columns by position


def test_audit_on_the_untouched_running_example(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    out, err = _run(capsys, ["audit", "--original", files["X"], "--release", files["Y"], "--json"])
    # Table 4, and the pairing named once on stderr (stdout stays one JSON object).
    assert out["columns"] == ["X1", "X2", "X3"]
    assert [r["permutation_distance"] for r in out["records"]] == [TABLE4[i][1] for i in range(1, 21)]
    assert out["dataset"]["permutation_distance"] == 1
    assert err.count("\n") == 1 and NOTE in err and err.startswith("note:")
    named, named_err = _run(capsys, ["audit", "--original", files["X"], "--release", files["Yx"], "--json"])
    assert named == out and named_err == ""
    # An explicit --release-columns pairing needs no note.
    argv = ["audit", "--original", files["X"], "--release", files["Y"], "--release-columns", "Y1,Y2,Y3", "--json"]
    assert _run(capsys, argv) == (out, "")


def test_attack_on_the_untouched_running_example(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    argv = ["attack", "--original", files["X"], "--release", files["Y"], "--true-mapping", "identity", "--json"]
    out, err = _run(capsys, argv)
    assert {link["record"]: link["matches"] for link in out["linkages"]} == TABLE5
    assert [link["distance"] for link in out["linkages"]] == TABLE5_DISTANCE
    assert out["correct_linkage_rate"] == pytest.approx(0.375)
    assert err.count("\n") == 1 and NOTE in err
    linkage, _ = _run(capsys, [*argv[:5], "--method", "distance", "--json"])
    assert len(linkage["linkages"]) == 20


def test_reverse_map_on_the_untouched_running_example(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    target = tmp_path / "Z.csv"
    assert main(["reverse-map", "--original", files["X"], "--release", files["Y"], "-o", str(target)]) == 0
    err = capsys.readouterr().err
    assert NOTE in err
    # Z replaces the release's own columns under its own names (Table 1's Z).
    assert target.read_text().splitlines()[0] == "Y1,Y2,Y3"
    written = np.loadtxt(target, delimiter=",", skiprows=1)
    assert np.allclose(written, np.loadtxt(files["Z"], delimiter=",", skiprows=1))


def test_positional_pairing_needs_one_column_per_attribute(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    # A release with an extra column cannot be paired by position...
    extra = _write_csv(tmp_path / "extra.csv", ["id", "Y1", "Y2", "Y3"], [[i, *r] for i, r in enumerate(y)])
    err = _error(capsys, ["audit", "--original", files["X"], "--release", extra, "--json"])
    assert "cannot be paired by position" in err and "--release-columns" in err
    # ... nor one with fewer columns than the attributes used ...
    two = _write_csv(tmp_path / "two.csv", ["Y1", "Y2"], y[:, :2].tolist())
    assert "cannot be paired by position" in _error(capsys, ["attack", "--original", files["X"], "--release", two])
    # ... and names that match only partly are an error, not a positional pairing.
    partly = _write_csv(tmp_path / "partly.csv", ["X1", "Y2", "Y3"], y.tolist())
    err = _error(capsys, ["reverse-map", "--original", files["X"], "--release", partly, "-o", str(tmp_path / "z")])
    assert "no column X2, X3" in err and "only X1 match by name" in err
    # With --columns selecting as many attributes as the release has columns, the pairing is in order.
    out, err = _run(capsys, ["audit", "--original", files["X"], "--release", two, "--columns", "X2,X1", "--json"])
    assert out["columns"] == ["X2", "X1"] and "(X2=Y1, X1=Y2)" in err


# ----------------------------------------------------------------------------- known mappings f


def _shuffled(files: dict[str, str], tmp_path: Path) -> tuple[str, np.ndarray[Any, np.dtype[np.intp]]]:
    """Y with its rows in another order, and where each original record went (0-based)."""
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    order = np.random.default_rng(3).permutation(20)  # new row k holds old row order[k]
    where = np.argsort(order)  # old row i is now row where[i]
    rows = [[int(order[k]) + 1, *(f"{v:.2f}" for v in y[order[k]])] for k in range(20)]
    path = _write_csv(tmp_path / "shuffled.csv", ["origin", "X1", "X2", "X3"], rows)
    return path, where


def test_mapping_file_and_column(capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path) -> None:
    unshuffled = ["audit", "--original", files["X"], "--release", files["Yx"]]
    identity, _ = _run(capsys, [*unshuffled, "--mapping", "identity", "--json"])
    shuffled, where = _shuffled(files, tmp_path)
    mapping = tmp_path / "f.csv"
    mapping.write_text("release_row\n" + "\n".join(str(int(r) + 1) for r in where) + "\n")
    base = ["audit", "--original", files["X"], "--release", shuffled, "--columns", "X1,X2,X3"]
    by_file, _ = _run(capsys, [*base, "--mapping", str(mapping), "--json"])
    by_column, _ = _run(capsys, [*base, "--mapping", "column:origin", "--json"])
    assert [r["mapping"] for r in by_file["records"]] == [int(r) + 1 for r in where]
    assert by_column["records"] == by_file["records"]
    # The same true mapping as identity on the unshuffled release: the same rank deviations.
    assert [r["distance_vector"] for r in by_file["records"]] == [r["distance_vector"] for r in identity["records"]]
    # The (d, v, f) check uses it: d per attribute at the smallest deviations holds, one more fails.
    smallest = np.min([r["distance_vector"] for r in by_file["records"]], axis=0)
    d = ",".join(str(v) for v in smallest)
    assert _run(capsys, [*base, "--mapping", str(mapping), "--d", d, "--json"])[0]["check"]["holds"] is True
    tighter = ",".join(str(v + 1) for v in smallest)
    failed, _ = _run(capsys, [*base, "--mapping", str(mapping), "--d", tighter, "--json"], code=3)
    assert failed["check"]["holds"] is False


def test_true_mapping_file_and_column(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    shuffled, where = _shuffled(files, tmp_path)
    mapping = tmp_path / "f.txt"
    mapping.write_text("\n".join(str(int(r) + 1) for r in where) + "\n\n")  # no header, a blank line at the end
    base = ["attack", "--original", files["X"], "--release", shuffled, "--columns", "X1,X2,X3"]
    for method in ("intruder", "distance"):
        unshuffled = [*base[:3], "--release", files["Yx"], "--method", method]
        truth, _ = _run(capsys, [*unshuffled, "--true-mapping", "identity", "--json"])
        by_file, _ = _run(capsys, [*base, "--method", method, "--true-mapping", str(mapping), "--json"])
        by_column, _ = _run(capsys, [*base, "--method", method, "--true-mapping", "column:origin", "--json"])
        for out in (by_file, by_column):
            assert out["correct_linkage_rate"] == pytest.approx(truth["correct_linkage_rate"])
            assert out["unique_correct"] == truth["unique_correct"]
    assert truth["correct_linkage_rate"] > 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("1\n2\n3\n", "has 3 release rows but"),
        ("\n".join(str(i) for i in range(1, 21)) + "\n1\n", "has 21 release rows"),
        ("\n".join(str(i) for i in range(1, 20)) + "\n21\n", "line 20: release row 21 is out of range 1..20"),
        ("\n".join(str(i) for i in range(0, 20)) + "\n", "line 1: release row 0 is out of range"),
        ("\n".join(str(i) for i in range(1, 20)) + "\n2.5\n", "line 20: '2.5' is not a release row number"),
        ("row\n" + "\n".join(str(i) for i in range(1, 20)) + "\nten\n", "line 21: 'ten' is not a release row"),
        ("a,b\n1,2\n", "line 1: 'a,b' is not a release row number (one per line)"),
    ],
)
@pytest.mark.parametrize("command", ["audit", "attack"])
def test_bad_mapping_files(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path, content: str, message: str, command: str
) -> None:
    mapping = tmp_path / "f.csv"
    mapping.write_text(content)
    option = "--mapping" if command == "audit" else "--true-mapping"
    err = _error(capsys, [command, "--original", files["X"], "--release", files["Yx"], option, str(mapping)])
    assert f"{option} {mapping}" in err and message in err


@pytest.mark.parametrize(
    ("column", "message"),
    [
        ("nope", "unknown column 'nope'"),
        ("dup", "original record 1 appears twice"),
        ("big", "original record 21 is out of range 1..20"),
        ("half", "line 6, column 'half': '5.5' is not an original record number"),
    ],
)
def test_bad_mapping_columns(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path, column: str, message: str
) -> None:
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    rows = [[*r, 1 if i < 2 else i + 1, i + 2, i + 1.5 if i == 4 else i + 1] for i, r in enumerate(y.tolist())]
    release = _write_csv(tmp_path / "y.csv", ["X1", "X2", "X3", "dup", "big", "half"], rows)
    base = ["--original", files["X"], "--release", release, "--columns", "X1,X2,X3"]
    for argv in (["audit", *base, "--mapping"], ["attack", *base, "--true-mapping"]):
        assert message in _error(capsys, [*argv, f"column:{column}"])


def test_mapping_option_errors(capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path) -> None:
    base = ["audit", "--original", files["X"], "--release", files["Yx"]]
    err = _error(capsys, [*base, "--mapping", str(tmp_path / "missing.csv")])
    assert "bad --mapping" in err and "no such file" in err and "column:NAME" in err
    err = _error(capsys, ["attack", "--original", files["X"], "--release", files["Yx"], "--true-mapping", "closest"])
    assert "bad --true-mapping 'closest'" in err  # a guess, not a known mapping
    mapping = tmp_path / "f.csv"
    mapping.write_text("\n".join(str(i) for i in range(1, 21)))
    subject = ["audit", "--record-values", "100.87,902.21,5108.54", "--release", files["Yx"]]
    assert "needs --original" in _error(capsys, [*subject, "--mapping", str(mapping)])


# ---------------------------------------------------------------------- star rank intervals


def test_star_rank_intervals_with_ties(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(40, 2)).round(1)
    y = (x + rng.normal(scale=0.5, size=x.shape)).round(0)  # a handful of values: wide tie blocks
    y[0] = [0.0, 0.0]
    y[1] = [1.0, 1.0]
    x[3] = [0.5, 0.7]  # halfway between 0 and 1 in the first attribute: two blocks
    original = _write_csv(tmp_path / "x.csv", ["a", "b"], x.tolist())
    release = _write_csv(tmp_path / "y.csv", ["a", "b"], y.tolist())
    out, _ = _run(capsys, ["audit", "--original", original, "--release", release, "--json"])
    for i, rec in enumerate(out["records"]):
        lo, hi = ref_star(y, x[i])
        assert rec["star_rank_intervals"] == [[a, b] for a, b in zip(lo, hi, strict=True)]
        assert rec["star_ranks"] == lo  # unchanged: the low end
    halfway = out["records"][3]["star_rank_intervals"][0]
    below, above = (int(np.sum(y[:, 0] < v)) for v in (0.0, 1.0))
    assert halfway == [below + 1, int(np.sum(y[:, 0] <= 1.0))] and above > below
    assert any(low < high for rec in out["records"] for low, high in rec["star_rank_intervals"])
    subject, _ = _run(capsys, ["audit", "--record-values", "0.5,0.7", "--release", release, "--random", "50", "--json"])
    assert subject["records"][0]["star_rank_intervals"] == out["records"][3]["star_rank_intervals"]
    assert main(["audit", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "star_rank_intervals (per attribute, [low, high]" in help_text


# ------------------------------------------------------------------- stderr: warnings and errors


def test_attack_json_keeps_stderr_empty(capsys: pytest.CaptureFixture[str], files: dict[str, str]) -> None:
    out, err = _run(capsys, ["attack", "--original", files["X"], "--release", files["Yx"], "--json"])
    assert out["method"] == "intruder" and err == ""
    subject = ["audit", "--record-values", "100.87,902.21,5108.54", "--release", files["Yx"], "--random", "300"]
    assert _run(capsys, [*subject, "--json"])[1] == ""


def test_failing_attack_prints_one_line(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    x = np.loadtxt(files["X"], delimiter=",", skiprows=1)
    short = _write_csv(tmp_path / "short.csv", ["X1", "X2", "X3"], x[:2].tolist())
    for extra in ([], ["--json"]):
        err = _error(capsys, ["attack", "--original", short, "--release", files["Yx"], *extra])
        assert "has 20 rows" in err and "has 2 records" in err
    # The same with a short release: no warning before the error.
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    short_release = _write_csv(tmp_path / "short_y.csv", ["X1", "X2", "X3"], y[:5].tolist())
    for argv in (
        ["attack", "--original", files["X"], "--release", short_release, "--json"],
        ["attack", "--original", files["X"], "--release", short_release, "--method", "distance", "--true-mapping",
         "identity"],
        ["audit", "--original", files["X"], "--release", short_release, "--mapping", "identity"],
        ["reverse-map", "--original", files["X"], "--release", short_release, "-o", str(tmp_path / "z.csv")],
        ["attack", "--original", files["X"], "--release", files["Y"], "--method", "intersection"],  # a note
    ):
        _error(capsys, argv)


def test_intersection_warns_when_the_release_is_not_a_rank_swap(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    argv = ["attack", "--original", files["X"], "--method", "intersection", "--swap-p", "10", "--json"]
    out, err = _run(capsys, [*argv, "--release", files["Yx"]])
    empty = sum(not link["matches"] for link in out["linkages"])
    assert err.count("\n") == 1 and err.startswith("warning:")
    assert "X1, X2, X3 differ" in err and "not a rank swap" in err and f"({empty} of 20 are empty)" in err
    # A release with the original's values in every column (here its rows in reverse order, as a
    # rank swap that moved nothing) gives no warning, and every record finds itself.
    x = np.loadtxt(files["X"], delimiter=",", skiprows=1)
    release = _write_csv(tmp_path / "swapped.csv", ["X1", "X2", "X3"], x[::-1].tolist())
    out, err = _run(capsys, [*argv, "--release", release])
    assert err == "" and all(link["matches"] for link in out["linkages"])


def test_short_release_warns_without_k(
    capsys: pytest.CaptureFixture[str], files: dict[str, str], tmp_path: Path
) -> None:
    y = np.loadtxt(files["Y"], delimiter=",", skiprows=1)
    short = _write_csv(tmp_path / "short.csv", ["X1", "X2", "X3"], y[:15].tolist())
    base = ["audit", "--original", files["X"], "--release", short]
    out, err = _run(capsys, [*base, "--json"])
    assert len(out["records"]) == 20
    assert err.count("\n") == 1 and err.startswith("warning:") and "15 rows, fewer than the 20 records" in err
    # The human output gets it too; with --k the user has said what is acceptable.
    assert main(base) == 0
    assert "fewer than the 20 records" in capsys.readouterr().err
    assert _run(capsys, [*base, "--k", "10", "--json"])[1] == ""
    assert _run(capsys, ["audit", "--original", files["X"], "--release", files["Yx"], "--json"])[1] == ""
