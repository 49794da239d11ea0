"""`coutil anonymize ...`, `coutil info-loss` and `coutil check`, run in-process and once as a subprocess."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from coutil.cli import main
from coutil.errors import ExitCode
from coutil.sdc.dataset import load_csv
from coutil.sdc.infoloss import il1s, sse_sst_percent_pair
from coutil.sdc.privacy import k_anonymity
from coutil.sdc.stats import sse_sst_percent


@pytest.fixture
def survey(tmp_path: Path) -> Path:
    """A small survey with an id column (text), an ordinal column and numeric ones."""
    rng = np.random.default_rng(0)
    n = 60
    age = rng.integers(18, 80, n)
    income = np.round(20000 + 500 * age + rng.normal(0, 5000, n))
    edu = rng.choice(["primary", "secondary", "tertiary"], n)
    path = tmp_path / "survey.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "age", "edu", "income"])
        for i in range(n):
            writer.writerow([f"r{i}", int(age[i]), edu[i], int(income[i])])
    return path


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 1, out  # exactly one JSON object on stdout
    result = json.loads(lines[0])
    assert isinstance(result, dict)
    return result


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as handle:
        return list(csv.reader(handle))


EDU = "edu=primary<secondary<tertiary"


@pytest.mark.parametrize(
    ("method", "params"),
    [("rankswap", ["--p", "10"]), ("noise", ["--a", "0.2"]), ("mult-noise", ["--a", "0.2"]),
     ("synthetic", []), ("local", ["--a", "0.2", "--scales", "15,20000"])],
)
def test_anonymize_methods_write_csv_and_report_json(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], method: str, params: list[str]
) -> None:
    out = tmp_path / f"{method}.csv"
    args = ["anonymize", method, str(survey), "--columns", "age,income", "-o", str(out), "--seed", "3", "--json"]
    assert main(args + params) == 0
    report = _json(capsys)
    assert report["n"] == 60 and report["method"] == method
    assert report["columns"] == ["age", "income"]
    assert isinstance(report["parameters"], dict) and report["parameters"]["seed"] == 3
    original, masked = _rows(survey), _rows(out)
    assert masked[0] == original[0]
    assert [r[0] for r in masked] == [r[0] for r in original]  # ids and row order kept
    assert [r[2] for r in masked] == [r[2] for r in original]  # unselected column untouched
    x = load_csv(survey, ["age", "income"])
    y = load_csv(out, ["age", "income"])
    assert not np.array_equal(x.values, y.values)
    assert report["sse_sst_percent"] == pytest.approx(sse_sst_percent_pair(x, y), rel=1e-9)
    assert report["il1s"] == pytest.approx(il1s(x, y), rel=1e-9)
    if method == "rankswap":
        np.testing.assert_array_equal(np.sort(y.values, axis=0), np.sort(x.values, axis=0))
    # Same seed, same file.
    again = tmp_path / "again.csv"
    assert main([*args[:6], str(again), "--seed", "3", *params]) == 0
    assert again.read_text() == out.read_text()


def test_ordinal_column_is_written_as_labels_and_decimals_round(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "noisy.csv"
    args = ["anonymize", "noise", str(survey), "--columns", "age,edu", "--ordinal", EDU, "--a", "1", "-o", str(out),
            "--decimals", "1"]
    assert main(args) == 0
    assert "wrote" in capsys.readouterr().err
    assert main([*args, "--json"]) == 0
    report = _json(capsys)
    # The figures describe the file as written (ranks snapped to categories, numbers rounded).
    ordinal = {"edu": ("primary", "secondary", "tertiary")}
    x, y = load_csv(survey, ["age", "edu"], ordinal), load_csv(out, ["age", "edu"], ordinal)
    assert report["il1s"] == pytest.approx(il1s(x, y), rel=1e-12)
    assert report["sse_sst_percent"] == pytest.approx(sse_sst_percent_pair(x, y), rel=1e-12)
    rows = _rows(out)[1:]
    assert {r[2] for r in rows} <= {"primary", "secondary", "tertiary"}
    assert any(r[2] != o[2] for r, o in zip(rows, _rows(survey)[1:], strict=True))
    assert all(len(r[1].partition(".")[2]) <= 1 for r in rows)


@dataclass(frozen=True)
class _StubMicroaggregation:
    """The `coutil.sdc.mdav.Microaggregation` contract, for testing the CLI wiring on its own."""

    groups: np.ndarray
    centroids: np.ndarray
    sizes: np.ndarray

    @property
    def n_groups(self) -> int:
        return int(self.sizes.size)

    def masked(self) -> np.ndarray:
        return np.asarray(self.centroids[self.groups], dtype=np.float64)


def _stub_mdav(values: np.ndarray, k: int) -> _StubMicroaggregation:
    """Sort by the first attribute and cut into groups of k (the last one takes the remainder)."""
    n = values.shape[0]
    order = np.argsort(values[:, 0], kind="stable")
    groups = np.empty(n, dtype=np.intp)
    groups[order] = np.minimum(np.arange(n) // k, n // k - 1)
    sizes = np.bincount(groups)
    centroids = np.array([values[groups == g].mean(axis=0) for g in range(sizes.size)])
    return _StubMicroaggregation(groups, centroids, sizes)


def test_mdav_command_wiring_with_a_stub(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def stub_with_progress(
        values: np.ndarray, k: int, on_group: Callable[[int], None], block_size: int | None = None
    ) -> _StubMicroaggregation:
        result = _stub_mdav(values, k)
        for size in result.sizes:
            on_group(int(size))
        return result

    stub = types.ModuleType("coutil.sdc.mdav")
    stub.mdav = _stub_mdav  # type: ignore[attr-defined]
    stub.mdav_with_progress = stub_with_progress  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "coutil.sdc.mdav", stub)
    out = tmp_path / "stub.csv"
    code = main(["anonymize", "mdav", str(survey), "--k", "7", "--columns", "age,edu,income", "--ordinal", EDU,
                 "-o", str(out), "--json"])
    assert code == 0
    report = _json(capsys)
    x = load_csv(survey, ["age", "edu", "income"], {"edu": ("primary", "secondary", "tertiary")})
    expected = _stub_mdav(x.values, 7)
    assert (report["n"], report["k"], report["groups"], report["min_group_size"]) == (60, 7, 8, 7)
    assert report["partition_sse_sst_percent"] == pytest.approx(sse_sst_percent(x.values, expected.groups))
    y = load_csv(out, ["age", "edu", "income"], {"edu": ("primary", "secondary", "tertiary")})
    # The ordinal ranks are snapped to categories when written: SSE/SST describes the file, like IL1s.
    assert report["sse_sst_basis"] == "values as written"
    assert report["sse_sst_percent"] == pytest.approx(sse_sst_percent_pair(x, y), rel=1e-12)
    assert report["il1s"] == pytest.approx(il1s(x, y), rel=1e-12)
    np.testing.assert_allclose(y.values[:, [0, 2]], expected.masked()[:, [0, 2]])
    np.testing.assert_array_equal(y.values[:, 1], np.clip(np.rint(expected.masked()[:, 1]), 1, 3))
    assert [r[0] for r in _rows(out)] == [r[0] for r in _rows(survey)]


def test_mdav_writes_centroids_and_reports_groups(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mdav.csv"
    code = main(["anonymize", "mdav", str(survey), "--k", "4", "--columns", "age,income,edu", "--ordinal", EDU,
                 "-o", str(out), "--json"])
    assert code == 0
    report = _json(capsys)
    assert report["n"] == 60 and report["k"] == 4
    assert isinstance(report["min_group_size"], int) and report["min_group_size"] >= 4
    assert isinstance(report["groups"], int) and 60 // 7 <= report["groups"] <= 15
    assert 0 < float(report["sse_sst_percent"]) < 100  # type: ignore[arg-type]
    y = load_csv(out, ["age", "income", "edu"], {"edu": ("primary", "secondary", "tertiary")})
    assert k_anonymity(y.values[:, :2], required_k=4).holds
    assert _rows(out)[0] == ["id", "age", "edu", "income"]
    # The check command agrees.
    assert main(["check", "--release", str(out), "--qi", "age,income", "--k", "4"]) == 0


def test_mdav_k_larger_than_n_is_a_usage_error(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["anonymize", "mdav", str(survey), "--k", "100", "--columns", "age", "-o", str(tmp_path / "o.csv")])
    assert code == ExitCode.USAGE
    assert "fewer than k = 100" in capsys.readouterr().err


def test_info_loss_json_and_table(survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "swap.csv"
    assert main(["anonymize", "rankswap", str(survey), "--columns", "age,income", "--p", "20", "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["info-loss", "--original", str(survey), "--masked", str(out), "--columns", "age,income",
                 "--json"]) == 0
    report = _json(capsys)
    x, y = load_csv(survey, ["age", "income"]), load_csv(out, ["age", "income"])
    assert report["il1s"] == pytest.approx(il1s(x, y))
    attributes = report["attributes"]
    assert isinstance(attributes, list)
    # Rank swapping keeps every marginal: means and variances are unchanged.
    assert all(abs(a["mean_relative_difference"]) < 1e-12 for a in attributes)
    assert float(report["correlation_mean_abs_difference"]) > 0  # type: ignore[arg-type]
    assert main(["info-loss", "--original", str(survey), "--masked", str(out), "--columns", "age,income"]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""  # human output goes to stderr, stdout is for --json only
    assert "IL1s" in captured.err and "income" in captured.err and "overall" in captured.err


def test_info_loss_row_mismatch_and_missing_column(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = tmp_path / "short.csv"
    short.write_text("age,income\n30,100\n")
    code = main(["info-loss", "--original", str(survey), "--masked", str(short), "--columns", "age,income"])
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "60 records" in err and "1" in err and "Traceback" not in err
    code = main(["info-loss", "--original", str(survey), "--masked", str(short), "--columns", "age,edu",
                 "--ordinal", EDU])
    assert code == ExitCode.USAGE
    assert "unknown column 'edu'" in capsys.readouterr().err


def test_check_passes_and_fails_with_exit_code_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    release = tmp_path / "release.csv"
    release.write_text(
        "zip,age,disease,salary\n"
        "476**,2*,flu,3\n476**,2*,flu,4\n476**,2*,cold,5\n"
        "4790*,>=40,flu,6\n4790*,>=40,cancer,8\n4790*,>=40,cold,11\n"
        "476**,3*,flu,7\n476**,3*,cold,9\n476**,3*,cancer,10\n"
    )
    args = ["check", "--release", str(release), "--qi", "zip,age", "--confidential", "disease,salary"]
    assert main([*args, "--k", "3", "--l", "2", "--json"]) == 0
    report = _json(capsys)
    assert report["holds"] is True
    assert report["k_anonymity"] == {"n": 9, "k": 3, "classes": 3, "required_k": 3, "violating_classes": 0,
                                     "violating_records": 0, "holds": True}
    t_reports = report["t_closeness"]
    assert isinstance(t_reports, list) and [t["attribute"] for t in t_reports] == ["salary"]
    assert t_reports[0]["t"] == pytest.approx(0.375)
    code = main([*args, "--k", "4", "--json"])
    assert code == ExitCode.CHECK_FAILED
    captured = capsys.readouterr()
    assert json.loads(captured.out)["k_anonymity"]["violating_classes"] == 3
    assert "k-anonymity" in captured.err
    code = main(["check", "--release", str(release), "--qi", "zip,age", "--confidential", "salary", "--t", "0.3"])
    assert code == ExitCode.CHECK_FAILED
    assert "t-closeness of salary" in capsys.readouterr().err
    code = main([*args, "--l", "3"])
    assert code == ExitCode.CHECK_FAILED
    assert "l-diversity of disease" in capsys.readouterr().err
    # t-closeness needs an order: a text attribute is refused with a usage error.
    code = main([*args, "--t", "0.5"])
    assert code == ExitCode.USAGE
    assert "--ordinal" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["check", "--release", "{missing}", "--qi", "a"], "no such file"),
        (["check", "--release", "{data}", "--qi", "nope"], "unknown column 'nope'"),
        (["check", "--release", "{data}", "--qi", "age", "--k", "0"], "bad --k"),
        (["check", "--release", "{data}", "--qi", "age", "--t", "2"], "bad --t"),
        (["check", "--release", "{data}", "--qi", "age", "--confidential", "age"], "both"),
        (["anonymize", "noise", "{data}", "-o", "{out}"], "column 'id': not a number"),
        (["anonymize", "noise", "{data}", "--columns", "age", "--a", "-1", "-o", "{out}"], "bad --a"),
        (["anonymize", "rankswap", "{data}", "--columns", "age", "--p", "200", "-o", "{out}"], "bad --p"),
        (["anonymize", "local", "{data}", "--columns", "age", "--scales", "1,2", "-o", "{out}"], "--scales"),
        (["anonymize", "noise", "{data}", "--columns", "age", "--ordinal", "bad", "-o", "{out}"], "--ordinal"),
        (["anonymize", "noise", "{missing}", "-o", "{out}"], "no such file"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    survey: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    subst = {"{data}": str(survey), "{missing}": str(tmp_path / "missing.csv"), "{out}": str(tmp_path / "o.csv")}
    code = main([subst.get(a, a) for a in args])
    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_help_documents_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["anonymize"], ["anonymize", "mdav"], ["anonymize", "local"], ["info-loss"], ["check"]):
        assert main([*command, "--help"]) == 0
    text = capsys.readouterr().out
    for word in ("rankswap", "mult-noise", "synthetic", "--scales", "--qi", "--masked", "--ordinal"):
        assert word in text


def test_subprocess_bad_input_has_no_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("age,income\n30,100\n31\n")
    env = {k: v for k, v in os.environ.items() if k != "COUTIL_DEBUG"}
    proc = subprocess.run(
        [sys.executable, "-m", "coutil", "anonymize", "noise", str(bad), "-o", str(tmp_path / "o.csv")],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )
    assert proc.returncode == ExitCode.USAGE
    assert "Traceback" not in proc.stderr
    assert f"{bad}, line 3: ragged row" in proc.stderr
    assert proc.stdout == ""
