"""The command line as a whole: version, help that reads right, refusals that protect the user."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coutil import __version__
from coutil.cli import main


def test_version_option_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == __version__
    assert main(["version", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == __version__


def test_help_shows_no_type_for_flags_and_keeps_bracketed_text() -> None:
    result = subprocess.run([sys.executable, "-m", "coutil", "run", "--help"], capture_output=True, text=True,
                            check=True, env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"})
    assert "<bool>" not in result.stdout
    assert "mqtt[s]://[user:pass@]host:port" in result.stdout  # not eaten as rich markup
    assert "KEY=VALUE" in result.stdout


def test_k_1_is_refused_unless_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--set", "k=1", "--set", "data.rows=12"]) == 2
    assert "--allow-k1" in capsys.readouterr().err
    assert main(["run", "--k", "1", "--subjects", "10", "--out", str(tmp_path / "r")]) == 2
    assert "--allow-k1" in capsys.readouterr().err and not (tmp_path / "r").exists()
    code = main(["simulate", "--set", "k=1", "--set", "data.rows=6", "--allow-k1", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["groups"] == 6


def test_manifest_json_holds_typed_values_and_says_the_release_is_in_group_order(tmp_path: Path) -> None:
    assert main(["simulate", "--set", "data.rows=15", "--set", "k=3", "--out", str(tmp_path / "s"), "--json"]) == 0
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert manifest["row_order"] == "group"
    values = manifest["manifest"]
    assert values["k"] == 3 and values["qi"] == ["age", "height_cm", "weight_kg", "hours_worked"]
    assert values["alpha"] == 0.05 and values["method"] == "mdav"


def test_run_never_shows_the_broker_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.net.helpers import free_port

    url = f"mqtt://collector:s3cret-pw@127.0.0.1:{free_port()}"
    for extra in ([], ["--json"]):
        code = main(["run", "--broker", url, "--subjects", "10", "--out", str(tmp_path / "r"), "--timeout", "3",
                     *extra])
        captured = capsys.readouterr()
        assert code in (4, 6)  # nobody listens there: the round cannot complete
        assert "s3cret-pw" not in captured.err and "s3cret-pw" not in captured.out
        assert "collector@127.0.0.1" in captured.err + captured.out


def test_simulate_closes_with_one_outcome_line_as_run_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a user walking the README: `simulate` printed its table and where it wrote, but no outcome line as
    `run` does. Subjects the fault plan made vanish are not owed a place in the release: said, and still OK."""
    assert main(["simulate", "--set", "data.rows=15", "--set", "k=3", "--out", str(tmp_path / "s")]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-3].startswith("round OK: 15 of 15 subjects released, 0 excluded, 0 complaining; k = 3;"), lines[-3:]
    assert lines[-2].startswith(f"outputs written to {tmp_path / 's'}/")
    faults = Path(__file__).resolve().parents[1] / "simulations" / "configs" / "faults.toml"
    assert main(["simulate", "--config", str(faults)]) == 0
    outcome = capsys.readouterr().err.strip().splitlines()[-2]
    assert outcome.startswith("round OK: ") and "vanished by the fault plan)" in outcome, outcome


def test_simulate_ends_with_how_to_see_its_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a user walking the README: after `simulate --out DIR` nothing said how to look at DIR, as `run`
    does (`coutil report DIR`); without --out, it says nothing was written. --json (the machine interface) is
    one JSON object, unchanged, and nothing more."""
    out = tmp_path / "my run"  # a space: the command shown must be one a shell runs as is
    assert main(["simulate", "--set", "data.rows=15", "--set", "k=3", "--out", str(out)]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-2].startswith(f"outputs written to {out}/")
    assert lines[-1] == f"all of it on one HTML page: coutil report '{out}'", lines[-2:]
    assert main(["report", str(out), "--json"]) == 0  # the command shown works
    assert json.loads(capsys.readouterr().out)
    assert main(["simulate", "--set", "data.rows=15", "--set", "k=3"]) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-2].startswith("round OK: ") and lines[-1] == "nothing written (no --out)", lines[-2:]
    assert main(["simulate", "--set", "data.rows=15", "--set", "k=3", "--json"]) == 0
    captured = capsys.readouterr()
    assert "nothing written" not in captured.err + captured.out and "coutil report" not in captured.out
    assert captured.out.count("\n") == 1 and json.loads(captured.out)["completed"] is True


@pytest.mark.parametrize("group", [[], ["collector"], ["subject"], ["anonymize"]])
def test_each_command_is_summed_up_in_at_most_two_lines_at_80_columns(group: list[str]) -> None:
    """Found by a user walking the README: `verify`'s summary in `coutil --help` ran to nine lines, broken
    mid-sentence where its docstring's lines broke, and `anonymize`'s to four."""
    result = subprocess.run([sys.executable, "-m", "coutil", *group, "--help"], capture_output=True, text=True,
                            check=True, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    box = result.stdout.split("Commands")[1].splitlines()[1:]
    spans: dict[str, int] = {}
    name = ""
    for line in box:
        if not line.startswith("│"):
            break
        cell = line.strip("│ ")
        if not line.startswith("│  "):  # a command's name in the first column
            name = cell.split()[0]
            spans[name] = 0
        spans[name] += 1
    assert spans and max(spans.values()) <= 2, spans
