"""One round file for every runner: every shipped file runs as written, overrides apply, and a runner
refuses (never ignores) the tables it cannot honour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.errors import InputError
from coutil.round.setup import load_round_spec

CONFIGS = Path(__file__).parents[2] / "simulations" / "configs"
SHIPPED = sorted(CONFIGS.glob("*.toml"))


def test_there_are_shipped_round_files() -> None:
    assert {p.name for p in SHIPPED} >= {"small.toml", "faults.toml", "census.toml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_file_simulates_as_written(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--config", str(path), "--seed", "1", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["completed"] is True and summary["released_rows"] > 0


@pytest.mark.parametrize("path", [p for p in SHIPPED if not {"network", "faults"} & load_round_spec(p).tables],
                         ids=lambda p: p.name)
def test_every_shipped_file_without_a_simulated_network_runs_over_mqtt(
        path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Over the embedded broker (its first 40 records, to keep the test short: an override, as a user would)."""
    code = main(["run", "--config", str(path), "--set", "data.rows=40", "--out", str(tmp_path / "run"), "--json",
                 *(["--set", "k=3"] if "safepub" in path.name else [])])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    # A SafePub round leaves out, by design, the sampled-out subjects and the classes below k.
    by_design = summary["subject_states"].get("sampled_out", 0) + summary["excluded"].get("suppressed_class", 0)
    assert summary["released_rows"] + by_design == 40 and summary["accepted"] == summary["released_rows"] > 0


def test_run_and_serve_refuse_a_simulated_network(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "--config", str(CONFIGS / "faults.toml"), "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "[network], [faults]" in err and "coutil simulate" in err
    assert not (tmp_path / "run").exists()
    code = main(["run", "--set", "network.loss=0.1", "--out", str(tmp_path / "run")])
    assert code == 2 and "[network]" in capsys.readouterr().err
    code = main(["collector", "serve", "--broker", "mqtt://127.0.0.1:1", "--db", str(tmp_path / "c.sqlite"),
                 "--config", str(CONFIGS / "faults.toml")])
    assert code == 2 and "[network]" in capsys.readouterr().err


def test_overrides_reach_the_round_config_without_dict_round_trips(tmp_path: Path) -> None:
    spec = load_round_spec(CONFIGS / "small.toml", sets=["k=3", "round.alpha=0.1", "data.rows=30"], qi="age,weight_kg")
    assert spec.config.k == 3 and spec.config.alpha == 0.1 and spec.config.qi == ("age", "weight_kg")
    assert spec.data.rows == 30 and spec.data.load(spec.config, 1).n == 30
    assert {"k", "alpha", "step_timeout"} <= spec.fixed_round_keys
    # Command-line options win over the file, --set over both.
    assert load_round_spec(CONFIGS / "small.toml", k=4, sets=["k=6"]).config.k == 6
    synthetic = load_round_spec(CONFIGS / "faults.toml", sets=["data.subjects=30"])
    with pytest.raises(InputError, match="not both"):
        load_round_spec(CONFIGS / "census.toml", sets=["data.subjects=30"])
    assert synthetic.data.synthetic == 30 and synthetic.data.load(synthetic.config, 1).n == 30


@pytest.mark.parametrize(("sets", "message"), [
    (["k"], "expected key=value"),
    (["bogus.k=3"], "unknown table"),
    (["k=0"], "k must be"),
    (["nonsense=1"], "unknown key"),
    (["data.rows=-1"], "positive integer"),
    (["faults.vanish_fraction=2"], "vanish_fraction"),
])
def test_bad_overrides_are_one_line_input_errors(sets: list[str], message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_round_spec(CONFIGS / "small.toml", sets=sets)


@pytest.mark.parametrize("sets", [["nonsense=1"], ["k=0"]])
def test_a_bad_override_without_a_round_file_says_round_config_once(sets: list[str]) -> None:
    """Without --config the message read "round config: round config: unknown key(s) ..."."""
    with pytest.raises(InputError) as caught:
        load_round_spec(None, sets=sets)
    assert str(caught.value).startswith("round config: ") and str(caught.value).count("round config") == 1, caught.value


@pytest.mark.parametrize("kind", ["directory", "binary", "not-toml", "missing"])
def test_a_config_that_is_not_a_round_file_is_exit_2(kind: str, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.toml"
    if kind == "directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\xff\xfe\x00\x01" * 10)
    elif kind == "not-toml":
        path.write_text("this is = = not toml\n")
    assert main(["simulate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_run_directory_with_its_html_report_is_run_again_and_every_file_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`coutil report DIR` writes DIR/report.html by default; a second round into DIR was then refused ("holds
    files that are not outputs of a round (report.html)"). The page is replaced with the rest; a file of the
    user's own still is not. The closing line names every file written, evidence.json too (it did not)."""
    out = tmp_path / "run"
    argv = ["simulate", "--config", str(CONFIGS / "small.toml"), "--set", "data.rows=10", "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err
    written = err[err.index("outputs written to"):].split("\n")[0]
    assert all(name in written for name in ("transcript.json", "evidence.json")), written
    (out / "report.html").write_text("<p>the previous round</p>")
    assert main(argv) == 0, capsys.readouterr().err
    assert not (out / "report.html").exists() and (out / "evidence.json").exists()
    (out / "notes.txt").write_text("mine")
    assert main(argv) == 2
    assert "notes.txt" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"
