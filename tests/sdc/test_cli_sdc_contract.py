"""The command-line contract of `anonymize`, `info-loss` and `check`: one-line usage errors with exit
code 2, the exact MDAV release, the progress display, and the smaller promises of each command."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from coutil.cli import anonymize_commands, common, main
from coutil.cli.anonymize_commands import round_significant
from coutil.errors import ExitCode
from coutil.sdc.dataset import load_csv
from coutil.sdc.infoloss import il1s, sse_sst_percent_pair
from coutil.sdc.masking import rank_swap
from coutil.sdc.mdav import mdav, mdav_partitioned
from coutil.sdc.stats import sse_sst_percent


@pytest.fixture
def numeric_csv(tmp_path: Path) -> Path:
    """An id column (text) and three correlated numeric columns, 50 records."""
    rng = np.random.default_rng(4)
    base = rng.normal(size=50)
    path = tmp_path / "numeric.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "a", "b", "c"])
        for i in range(50):
            b = round(base[i] + rng.normal(), 3)
            writer.writerow([f"p{i}", round(10 + 3 * base[i], 3), b, int(rng.integers(0, 9))])
    return path


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_usage_error(code: int, out: str, err: str) -> str:
    assert code == ExitCode.USAGE
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("coutil: error: ")
    assert "Traceback" not in err and "╭" not in err  # no typer usage panel
    return err


# ------------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["anonymize", "mdav", "{data}", "--k", "abc", "--columns", "a", "-o", "{out}"], "'--k'"),
        (["anonymize", "mdav", "{data}", "--columns", "a", "-o", "{out}"], "--k"),
        (["anonymize", "mdav", "{data}", "--k", "3", "--columns", "a"], "--output"),
        (["anonymize", "mdav", "{data}", "--k", "3", "--colums", "a", "-o", "{out}"], "--colums"),
        (["anonymize", "mdav", "{data}", "extra", "--k", "3", "--columns", "a", "-o", "{out}"], "extra"),
        (["anonymize", "noise", "{data}", "--columns", "a", "--seed", "abc", "-o", "{out}"], "'--seed'"),
        (["anonymize", "rankswap", "{data}", "--columns", "a", "--p", "many", "-o", "{out}"], "'--p'"),
        (["anonymize", "mdavv", "{data}"], "mdavv"),
        (["info-loss", "--original", "{data}"], "--masked"),
        (["check", "--release", "{data}", "--qi", "a", "--t", "abc"], "'--t'"),
        (["check", "--release", "{data}"], "--qi"),
    ],
)
def test_parse_errors_are_one_line_with_exit_code_2(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    subst = {"{data}": str(numeric_csv), "{out}": str(tmp_path / "o.csv")}
    err = _one_line_usage_error(*_run([subst.get(a, a) for a in args], capsys))
    assert needle in err
    assert "--help" in err  # points to the command's help
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["anonymize", "mdav", "{data}", "--k", "0", "--columns", "a", "-o", "{out}"], "bad --k 0"),
        (["anonymize", "mdav", "{data}", "--k", "51", "--columns", "a", "-o", "{out}"], "fewer than k = 51"),
        (["anonymize", "mdav", "{data}", "--k", "5", "--columns", "a", "--block-size", "9", "-o", "{out}"],
         "bad --block-size 9"),
        (["anonymize", "mdav", "{data}", "--k", "3", "-o", "{out}"], "line 2, column 'id': not a number"),
        (["anonymize", "mdav", "{data}", "--k", "3", "--columns", "a,zz", "-o", "{out}"], "unknown column 'zz'"),
        (["anonymize", "noise", "{data}", "--columns", "a", "--seed", "-1", "-o", "{out}"], "bad --seed -1"),
        (["anonymize", "synthetic", "{data}", "--columns", "a", "--seed", "-2", "-o", "{out}"], "bad --seed -2"),
        (["anonymize", "noise", "{data}", "--columns", "a", "--decimals", "99", "-o", "{out}"], "bad --decimals"),
        (["anonymize", "mult-noise", "{data}", "--columns", "a", "--a", "nan", "-o", "{out}"], "bad --a nan"),
        (["anonymize", "noise", "{data}", "--columns", "a", "--a", "1e400", "-o", "{out}"],
         "bad --a inf: not a finite number"),
        (["check", "--release", "{data}", "--qi", "a", "--confidential", "b", "--entropy-l", "0.5"],
         "bad --entropy-l"),
    ],
)
def test_bad_values_are_one_line_and_write_nothing(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    subst = {"{data}": str(numeric_csv), "{out}": str(tmp_path / "o.csv")}
    err = _one_line_usage_error(*_run([subst.get(a, a) for a in args], capsys))
    assert needle in err
    assert not (tmp_path / "o.csv").exists()


def test_text_column_error_suggests_ordinal_or_leaving_it_out(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line_usage_error(*_run(["anonymize", "noise", str(numeric_csv), "-o", str(tmp_path / "o.csv")], capsys))
    assert f"{numeric_csv}, line 2, column 'id': not a number: 'p0'" in err
    assert "--ordinal 'id=" in err and "choose the columns with --columns" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("a,b,c\n", "no data rows"),
        ("id,a,b,c\nx,1,2,3\ny,1,2\n", "line 3: ragged row"),
        ("id,a,b,c\nx,1,,3\n", "line 2, column 'b': missing value"),
        ("id,a,b,c\nx,1,NA,3\n", "line 2, column 'b': missing value"),
    ],
)
@pytest.mark.parametrize("command", ["mdav", "info-loss", "check"])
def test_bad_files_through_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str, command: str
) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    args = {
        "mdav": ["anonymize", "mdav", str(bad), "--k", "1", "--columns", "a,b", "-o", str(tmp_path / "o.csv")],
        "info-loss": ["info-loss", "--original", str(bad), "--masked", str(bad), "--columns", "a,b"],
        "check": ["check", "--release", str(bad), "--qi", "a", "--confidential", "b"],
    }[command]
    err = _one_line_usage_error(*_run(args, capsys))
    assert f"{bad}" in err and message in err


def test_check_names_the_file_line_of_a_missing_value_after_blank_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    release = tmp_path / "release.csv"
    release.write_text("zip,disease\n\n080**,flu\n\n080**,\n")
    err = _one_line_usage_error(*_run(["check", "--release", str(release), "--qi", "zip", "--confidential",
                                       "disease"], capsys))
    assert "line 5, column 'disease': missing value" in err


# ------------------------------------------------------------------------------- MDAV release


def test_mdav_release_is_exactly_the_centroids_in_input_order(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mdav.csv"
    code, stdout, _ = _run(["anonymize", "mdav", str(numeric_csv), "--k", "4", "--columns", "c,a", "-o", str(out),
                            "--json"], capsys)
    assert code == 0
    report = json.loads(stdout)
    assert stdout.count("\n") == 1
    x = load_csv(numeric_csv, ["c", "a"])
    expected = mdav(x.values, 4)
    assert report["n"] == 50 and report["k"] == 4 and report["exact"] is True
    assert report["groups"] == expected.n_groups
    assert report["min_group_size"] == int(expected.sizes.min()) >= 4
    assert report["sse_sst_percent"] == pytest.approx(sse_sst_percent(x.values, expected.groups), rel=1e-12)
    with numeric_csv.open(newline="") as handle:
        original = list(csv.reader(handle))
    with out.open(newline="") as handle:
        released = list(csv.reader(handle))
    assert released[0] == original[0]
    assert [r[0] for r in released] == [r[0] for r in original]  # ids, hence row order
    assert [r[2] for r in released] == [r[2] for r in original]  # the unselected column b
    masked = np.array([[float(r[3]), float(r[1])] for r in released[1:]])
    # The centroids to 12 significant digits (float noise such as 64.52000000000001 is not written).
    np.testing.assert_array_equal(masked, round_significant(expected.masked()))
    np.testing.assert_allclose(masked, expected.masked(), rtol=1e-11, atol=0)


def test_means_are_written_without_float_noise(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three weights whose mean is 64.34 in decimal but 64.33999999999999 in binary floating point."""
    data = tmp_path / "w.csv"
    data.write_text("w\n64.3\n64.52\n64.2\n")
    assert repr((64.3 + 64.52 + 64.2) / 3) == "64.33999999999999"  # the noise this test is about
    out = tmp_path / "o.csv"
    code, _, _ = _run(["anonymize", "mdav", str(data), "--k", "3", "-o", str(out)], capsys)
    assert code == 0
    assert out.read_text().splitlines()[1:] == ["64.34"] * 3


def test_mdav_block_size_runs_the_partitioned_variant(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "blocks.csv"
    code, stdout, _ = _run(["anonymize", "mdav", str(numeric_csv), "--k", "3", "--columns", "a,b,c",
                            "--block-size", "20", "-o", str(out), "--json"], capsys)
    assert code == 0
    report = json.loads(stdout)
    x = load_csv(numeric_csv, ["a", "b", "c"])
    expected = mdav_partitioned(x.values, 3, block_size=20)
    assert report["exact"] is False and report["parameters"]["block_size"] == 20
    assert report["groups"] == expected.n_groups and report["min_group_size"] >= 3
    np.testing.assert_array_equal(load_csv(out, ["a", "b", "c"]).values, round_significant(expected.masked()))


# ------------------------------------------------------------------------------- progress


@dataclass
class _RecordingProgress:
    totals: list[float | None] = field(default_factory=list)
    advanced: list[float] = field(default_factory=list)

    def add_task(self, description: str, total: float | None = None) -> int:
        self.totals.append(total)
        self.advanced.append(0.0)
        return len(self.totals) - 1

    def advance(self, task: int, amount: float = 1.0) -> None:
        self.advanced[task] += amount


def _record_progress(monkeypatch: pytest.MonkeyPatch) -> tuple[_RecordingProgress, list[bool]]:
    recorder = _RecordingProgress()
    calls: list[bool] = []  # the `enabled` flag of every progress display opened

    @contextmanager
    def fake_progress(enabled: bool = True) -> Iterator[Any]:
        calls.append(enabled)
        yield recorder

    monkeypatch.setattr(anonymize_commands, "progress", fake_progress)
    # A terminal on stderr, as when a person runs the command: `common.show_progress` asks this console.
    monkeypatch.setattr(common, "err_console", Console(stderr=True, force_terminal=True))
    return recorder, calls


def test_mdav_progress_bar_counts_every_record_and_is_off_in_json_mode(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, enabled = _record_progress(monkeypatch)
    args = ["anonymize", "mdav", str(numeric_csv), "--k", "3", "--columns", "a,b", "-o", str(tmp_path / "o.csv")]
    assert main(args) == 0
    assert enabled == [True]
    assert recorder.totals == [50] and recorder.advanced == [50]  # a real bar that ends full
    assert main([*args, "--json"]) == 0
    assert enabled == [True, False]
    json.loads(capsys.readouterr().out)


def test_rankswap_progress_counts_attributes(
    numeric_csv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder, enabled = _record_progress(monkeypatch)
    args = ["anonymize", "rankswap", str(numeric_csv), "--columns", "a,b,c", "--p", "10", "-o", str(tmp_path / "o.csv")]
    assert main(args) == 0
    assert enabled == [True] and recorder.totals == [3] and recorder.advanced == [3]


# ------------------------------------------------------------------------------- masking commands


def test_rankswap_output_is_the_library_function_and_warns_on_an_empty_window(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "swap.csv"
    code, stdout, _ = _run(["anonymize", "rankswap", str(numeric_csv), "--columns", "a,c", "--p", "10", "--seed", "9",
                            "-o", str(out), "--json"], capsys)
    assert code == 0
    assert json.loads(stdout)["parameters"]["window_ranks"] == 5
    x = load_csv(numeric_csv, ["a", "c"])
    np.testing.assert_array_equal(load_csv(out, ["a", "c"]).values, rank_swap(x.values, 10, 9))
    code, _, err = _run(["anonymize", "rankswap", str(numeric_csv), "--columns", "a", "--p", "1", "-o", str(out)],
                        capsys)
    assert code == 0
    assert "nothing is swapped" in err and "--p of at least 2" in err


# ------------------------------------------------------------------------------- check


def test_check_entropy_l_threshold(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "release.csv"
    # Class A: three equally frequent diseases (entropy l = 3 exactly on paper); class B: 2 of 3 alike.
    release.write_text("zip,disease\nA,flu\nA,cold\nA,cancer\nB,flu\nB,flu\nB,cold\n")
    args = ["check", "--release", str(release), "--qi", "zip", "--confidential", "disease", "--json"]
    code, stdout, _ = _run([*args, "--entropy-l", "1.8"], capsys)
    assert code == 0
    (report,) = json.loads(stdout)["l_diversity"]
    assert report["distinct_l"] == 2
    assert report["entropy_l"] == pytest.approx(np.exp(-(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3))))
    code, stdout, err = _run([*args, "--entropy-l", "2"], capsys)
    assert code == ExitCode.CHECK_FAILED
    assert json.loads(stdout)["l_diversity"][0]["entropy_violating_classes"] == 1
    assert "entropy l-diversity of disease" in err
    only_a = tmp_path / "a.csv"
    only_a.write_text("zip,disease\nA,flu\nA,cold\nA,cancer\n")
    code, _, _ = _run(["check", "--release", str(only_a), "--qi", "zip", "--confidential", "disease",
                       "--entropy-l", "3"], capsys)
    assert code == 0  # exp(ln 3) rounds below 3 in floats: still 3-diverse


# ------------------------------------------------------------------------------- review fixes


def test_local_without_scales_warns_that_they_are_not_local_information(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "local.csv"
    args = ["anonymize", "local", str(numeric_csv), "--columns", "a,b", "--a", "0.5", "-o", str(out)]
    code, stdout, err = _run([*args, "--json"], capsys)
    assert code == 0
    report = json.loads(stdout)  # stdout is exactly the JSON object: the warning is not in it
    assert stdout.count("\n") == 1
    parameters = report["parameters"]
    assert "not local information" in parameters["scales_from"] and "--scales" in parameters["scales_from"]
    x = load_csv(numeric_csv, ["a", "b"])
    np.testing.assert_allclose(parameters["scales"], x.values.std(axis=0), rtol=1e-15)
    (warning,) = err.strip().splitlines()  # one line on stderr, even on a narrow console
    assert warning.startswith("warning: no --scales given")
    assert "all 50 input records" in warning and "not local information" in warning and "--scales s1,s2" in warning
    # Human mode: the same warning before the summary line.
    code, stdout, err = _run(args, capsys)
    assert code == 0 and stdout == ""
    assert err.startswith("warning: no --scales given") and "wrote" in err
    # With public scales there is nothing to warn about.
    code, stdout, err = _run([*args, "--scales", "3,1.5", "--json"], capsys)
    assert code == 0 and err == ""
    assert json.loads(stdout)["parameters"]["scales_from"] == "--scales"


def test_mdav_decimals_reports_sse_sst_and_il1s_on_the_written_values(
    numeric_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "rounded.csv"
    code, stdout, _ = _run(["anonymize", "mdav", str(numeric_csv), "--k", "4", "--columns", "a,b", "--decimals", "0",
                            "-o", str(out), "--json"], capsys)
    assert code == 0
    report = json.loads(stdout)
    x, y = load_csv(numeric_csv, ["a", "b"]), load_csv(out, ["a", "b"])
    np.testing.assert_array_equal(y.values, np.round(y.values))  # the file holds the rounded centroids
    assert report["sse_sst_basis"] == "values as written"
    # Both figures describe the file as written, as `coutil info-loss` on it does.
    assert report["sse_sst_percent"] == pytest.approx(sse_sst_percent_pair(x, y), rel=1e-12)
    assert report["il1s"] == pytest.approx(il1s(x, y), rel=1e-12)
    # The partition's figure (before rounding) is reported beside it, and rounding to integers moves it.
    partition = sse_sst_percent(x.values, mdav(x.values, 4).groups)
    assert report["partition_sse_sst_percent"] == pytest.approx(partition, rel=1e-12)
    assert abs(report["sse_sst_percent"] - partition) > 0.1
    code, stdout, _ = _run(["info-loss", "--original", str(numeric_csv), "--masked", str(out), "--columns", "a,b",
                            "--json"], capsys)
    assert code == 0
    loss = json.loads(stdout)
    assert loss["sse_sst_percent"] == pytest.approx(report["sse_sst_percent"], rel=1e-12)
    assert loss["il1s"] == pytest.approx(report["il1s"], rel=1e-12)


@pytest.mark.parametrize("cell", ["1e400", "inf", "-Infinity"])
def test_infinite_cells_are_not_finite_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str], cell: str) -> None:
    data = tmp_path / "big.csv"
    data.write_text(f"a,b\n1,2\n{cell},3\n4,5\n")
    err = _one_line_usage_error(*_run(["anonymize", "noise", str(data), "-o", str(tmp_path / "o.csv")], capsys))
    assert f"{data}, line 3, column 'a': not a finite number: '{cell}'" in err
    assert "--ordinal" not in err  # not a text column: no hint about declaring categories
    err = _one_line_usage_error(*_run(["check", "--release", str(data), "--qi", "b", "--confidential", "a"], capsys))
    assert f"{data}, line 3, column 'a': not a finite number: '{cell}'" in err


RELEASE = (
    "zip,age,disease,salary\n"
    "476**,2*,flu,3\n476**,2*,flu,4\n476**,2*,cold,5\n"
    "4790*,>=40,flu,6\n4790*,>=40,cancer,8\n4790*,>=40,cold,11\n"
    "476**,3*,flu,7\n476**,3*,cold,9\n476**,3*,cancer,10\n"
)


def test_check_per_class_reports_size_l_and_t_of_every_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Numbers worked out by hand.

    Classes in the order of their QI text: (476**, 2*), (476**, 3*), (4790*, >=40), 3 records each.
    salary takes 9 distinct values 3..11, each 1/9 of the table; the ordered EMD is
    sum_i |cumulative (p - q)| / (9 - 1): class {3,4,5}: (2+4+6+5+4+3+2+1)/9/8 = 3/8;
    class {7,9,10}: (1+2+3+4+2+3+1+1)/9/8 = 17/72; class {6,8,11}: (1+2+3+1+2+0+1+2)/9/8 = 1/6.
    disease: {flu, flu, cold} has 2 distinct values and entropy l = exp(-(2/3 ln 2/3 + 1/3 ln 1/3))
    = 3 / 2^(2/3); the other two classes have 3 distinct values, entropy l = 3. disease is text: no t.
    """
    release = tmp_path / "release.csv"
    release.write_text(RELEASE)
    args = ["check", "--release", str(release), "--qi", "zip,age", "--confidential", "disease,salary",
            "--per-class", "--json"]
    code, stdout, _ = _run(args, capsys)
    assert code == 0
    classes = json.loads(stdout)["classes"]
    assert [c["class"] for c in classes] == [0, 1, 2]
    assert [c["qi"] for c in classes] == [{"zip": "476**", "age": "2*"}, {"zip": "476**", "age": "3*"},
                                          {"zip": "4790*", "age": ">=40"}]
    assert [c["size"] for c in classes] == [3, 3, 3]
    assert [c["first_line"] for c in classes] == [2, 8, 5]  # file lines: the header is line 1
    assert [c["holds"] for c in classes] == [True, True, True]  # no threshold required
    disease = [c["confidential"][0] for c in classes]
    salary = [c["confidential"][1] for c in classes]
    assert [d["attribute"] for d in disease] == ["disease"] * 3 and [s["attribute"] for s in salary] == ["salary"] * 3
    assert [d["distinct_l"] for d in disease] == [2, 3, 3]
    assert [d["entropy_l"] for d in disease] == pytest.approx([3 / 2 ** (2 / 3), 3, 3], rel=1e-12)
    assert [d["t"] for d in disease] == [None, None, None]
    assert [s["distinct_l"] for s in salary] == [3, 3, 3]
    assert [s["entropy_l"] for s in salary] == pytest.approx([3, 3, 3], rel=1e-12)
    assert [s["t"] for s in salary] == pytest.approx([3 / 8, 17 / 72, 1 / 6], rel=1e-12)
    # Per-class verdicts against thresholds: only the first class is above t = 0.3 or below l = 3.
    code, stdout, _ = _run(["check", "--release", str(release), "--qi", "zip,age", "--confidential", "salary",
                            "--per-class", "--json", "--k", "3", "--t", "0.3"], capsys)
    assert code == ExitCode.CHECK_FAILED
    assert [c["holds"] for c in json.loads(stdout)["classes"]] == [False, True, True]
    code, stdout, _ = _run([*args, "--l", "3"], capsys)
    assert code == ExitCode.CHECK_FAILED
    assert [c["holds"] for c in json.loads(stdout)["classes"]] == [False, True, True]
    code, stdout, _ = _run([*args, "--k", "4"], capsys)
    assert [c["holds"] for c in json.loads(stdout)["classes"]] == [False, False, False]
    # Without --per-class the report has no classes array.
    code, stdout, _ = _run([a for a in args if a != "--per-class"], capsys)
    assert code == 0 and "classes" not in json.loads(stdout)
    # Human output: a table of the classes on stderr, nothing on stdout.
    code, stdout, err = _run(args[:-1], capsys)
    assert code == 0 and stdout == ""
    assert "Equivalence classes" in err and "4790*" in err and "0.3750" in err and "0.2361" in err
