"""Studies end to end on small grids: the methods' ordering, a costly deviation, resumption, Dask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.cli import main
from coutil.experiment.config import load_study
from coutil.experiment.payoffs import payoff_table
from coutil.experiment.runner import collect, load_results, run_study
from tests.conftest import SDCMICRO

VOLATILE = ("cpu_seconds", "wall_seconds")


def _study(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(text)
    return path


METHODS = f"""
[study]
seeds = [1]
local_noise = [0.5]
intruder_random_records = 300
[grid]
dataset = ["{SDCMICRO / 'CASCrefmicrodata.csv'}"]
n = [90]
k = [3, 5]
attributes = ["census"]
[attributes.census]
qi = ["AFNLWGT", "AGI", "EMCONTRB", "PTOTVAL"]
confidential = ["FEDTAX", "FICA", "STATETAX"]
[round]
random_records = 50
"""


def test_methods_study_ratio_and_risk_ordering(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, METHODS))
    run_study(study, tmp_path / "out")
    collect(study, tmp_path / "out")
    for result in load_results(study, tmp_path / "out"):
        by_method = {s["method"]: s for s in result["summary"]}
        collaborative, centralized = by_method["collaborative"], by_method["centralized"]
        assert collaborative["completed"] and collaborative["released"] == 90
        # As useful as centralized MDAV, on the ground-truth mapping.
        assert round(collaborative["sse_sst_percent"] / centralized["sse_sst_percent"], 3) == 1.000
        assert collaborative["il1s"] == pytest.approx(centralized["il1s"])
        # Local anonymization loses far more; plain loses nothing.
        assert by_method["local:0.5"]["sse_sst_percent"] > 3 * centralized["sse_sst_percent"]
        assert by_method["plain"]["sse_sst_percent"] == 0.0
        # Risk against the collector: chance (1/g) for collaborative, certainty for centralized and plain.
        k = result["cell"]["k"]
        assert collaborative["collector_best_strategy"] == "uniform_guess"
        assert 1 / (2 * k) <= collaborative["r_collector"] <= 1 / k + 1e-12
        assert centralized["r_collector"] == 1.0 and by_method["plain"]["r_collector"] == 1.0
        assert by_method["decline"]["released"] == 0 and by_method["decline"]["utility"] == 0.0
    assert (tmp_path / "out" / "subjects.csv").exists() and (tmp_path / "out" / "summary.csv").exists()


DEVIATION = """
[study]
seeds = [1, 2, 3, 4]
methods = ["collaborative"]
focal = 3
intruder_random_records = 200
[grid]
dataset = ["synthetic"]
n = [30]
k = [3]
deviation = ["honest", "misreport-qi"]
[strategies.misreport-qi]
shift = 3.0
[types.no-privacy-concern]
a = 1.0
b = 0.0
c = 0.0
[round]
random_records = 50
"""


def test_misreporting_qis_costs_the_deviator(tmp_path: Path) -> None:
    """Registering QIs 3 sd away puts her centroid far from her: the release she gets is worth less."""
    study = load_study(_study(tmp_path, DEVIATION))
    run_study(study, tmp_path / "out")
    table = payoff_table(study, load_results(study, tmp_path / "out"))
    row = next(r for r in table["rows"] if r["strategy"] == "misreport-qi")
    assert row["seeds"] == 4
    assert row["gain"] < 0 and row["gain_hi"] < 0, row  # the interval excludes 0
    assert row["verdict"] == "costly"
    assert table["verdicts"][0]["self_enforcing"]


def _strip(result: dict[str, Any]) -> dict[str, Any]:
    rows = [{k: v for k, v in r.items() if k not in VOLATILE} for r in result["rows"]]
    summary = [{k: v for k, v in s.items() if k not in VOLATILE} for s in result["summary"]]
    return {"cell": result["cell"], "rows": rows, "summary": summary}


RESUME = """
[study]
seeds = [1, 2]
methods = ["collaborative", "centralized", "plain"]
focal = 2
intruder_random_records = 100
[grid]
dataset = ["synthetic"]
n = [20]
k = [4]
deviation = ["honest", "decline"]
[round]
random_records = 30
"""


def test_resumed_study_equals_uninterrupted_and_dask_equals_in_process(tmp_path: Path) -> None:
    study = load_study(_study(tmp_path, RESUME))
    whole = run_study(study, tmp_path / "whole")
    assert whole.computed == 4
    # Interrupted after one cell, then resumed: the finished cell is skipped.
    first = run_study(study, tmp_path / "resumed", limit=1)
    assert first.computed == 1
    (tmp_path / "resumed" / "cells" / ".stale.json.tmp").write_text("{")  # an interrupted write is ignored
    second = run_study(study, tmp_path / "resumed")
    assert second.skipped == 1 and second.computed == 3
    expected = [_strip(r) for r in load_results(study, tmp_path / "whole")]
    assert [_strip(r) for r in load_results(study, tmp_path / "resumed")] == expected
    pytest.importorskip("distributed")
    run_study(study, tmp_path / "dask", workers=1)
    assert [_strip(r) for r in load_results(study, tmp_path / "dask")] == expected


def test_cli_experiment_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    config = _study(tmp_path, RESUME)
    out = tmp_path / "cli"
    assert main(["experiment", "--config", str(config), "--out", str(out), "--workers", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["cells"] == 4 and report["computed"] == 4
    assert {r["strategy"] for r in report["payoffs"]["rows"]} == {"honest", "decline"}
    assert any(f.endswith("payoffs.png") for f in report["figures"])
    # A second run resumes: nothing left to compute.
    assert main(["experiment", "--config", str(config), "--out", str(out), "--workers", "0", "--json",
                 "--no-plots"]) == 0
    assert json.loads(capsys.readouterr().out)["computed"] == 0
    (out / "utility_vs_risk.png").unlink()
    assert main(["plot", str(out), "--json"]) == 0
    assert any(f.endswith("utility_vs_risk.png") for f in json.loads(capsys.readouterr().out)["figures"])
    assert main(["experiment", "--config", str(tmp_path / "missing.toml"), "--out", str(out)]) == 2


def test_cli_plot_of_a_malformed_summary_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`coutil plot` reads the result CSV files by the strict CSV reader: an unclosed quote is one line naming
    file and line, exit 2 (a lenient reader swallowed the rest of the file into one cell)."""
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    out.mkdir()
    (out / "study.toml").write_text(RESUME)
    (out / "summary.csv").write_text('method,n,k\ncollaborative,20,4\n"centralized,20,4\nplain,20,4\n')
    assert main(["plot", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("coutil: error:")
    assert f"{out / 'summary.csv'}, line 3: unclosed quote" in err
