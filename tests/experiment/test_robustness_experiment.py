"""`coutil experiment` on bad input: a damaged cell file on resume, a directory as --config, values of the
wrong type in the study file. Each is one line and exit 2, never a traceback; a damaged cell file is left
as it is (refused, not overwritten: nothing of it is lost) and named."""

from __future__ import annotations

from pathlib import Path

import pytest

from coutil.cli import main
from coutil.errors import InputError
from coutil.experiment.config import load_study
from coutil.experiment.runner import cell_file, run_study

TINY = """
[study]
name = "tiny"
seeds = [1, 2]
methods = ["collaborative"]
intruder_random_records = 100
[grid]
dataset = ["synthetic"]
n = [30]
k = [3]
[round]
random_records = 50
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished tiny study (two cells) to damage copies of."""
    tmp = tmp_path_factory.mktemp("tiny")
    (tmp / "study.toml").write_text(TINY)
    study = load_study(tmp / "study.toml")
    run_study(study, tmp / "out")
    return tmp


def _copy(finished: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(study file, out directory, the first cell's file) of a copy of the finished study."""
    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    for path in (finished / "out" / "cells").iterdir():
        (out / "cells" / path.name).write_bytes(path.read_bytes())
    config = tmp_path / "study.toml"
    config.write_text(TINY)
    study = load_study(config)
    return config, out, cell_file(out, study.cells()[0])


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "internal error" not in err, err
    return lines[0]


@pytest.mark.parametrize(("damage", "problem"), [
    ('{"cell": ', "damaged cell result (not JSON)"),
    ("[1, 2, 3]", "a JSON list, not an object"),
    ("{}", "no 'cell' object"),
    ('{"cell": {"id": "other"}, "rows": [], "summary": []}', "the result of another cell"),
    ('{"cell": {}, "rows": [], "summary": [], "x": ' + "9" * 5000 + "}", "damaged cell result (not JSON)"),
    (None, "is a directory"),
])
def test_a_damaged_cell_file_on_resume_is_exit_2_naming_it_and_left_as_it_is(
        finished: Path, tmp_path: Path, damage: str | None, problem: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    config, out, damaged = _copy(finished, tmp_path)
    if damage is None:
        damaged.unlink()
        damaged.mkdir()
    else:
        damaged.write_text(damage)
    argv = ["experiment", "--config", str(config), "--out", str(out), "--workers", "0", "--no-plots", "--json"]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(damaged) in line and problem in line and "move it away" in line, line
    assert damaged.is_dir() if damage is None else damaged.read_text() == damage  # not overwritten


def test_a_damaged_cell_file_is_found_before_any_cell_runs(finished: Path, tmp_path: Path) -> None:
    config, out, damaged = _copy(finished, tmp_path)
    second = cell_file(out, load_study(config).cells()[1])
    second.unlink()  # a cell still to compute
    damaged.write_text("[]")
    with pytest.raises(InputError, match="damaged cell result"):
        run_study(load_study(config), out)
    assert not second.exists()


def test_a_directory_as_config_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["experiment", "--config", str(tmp_path), "--out", str(tmp_path / "out"), "--workers", "0"]) == 2
    assert f"{tmp_path}: is a directory, not a study file" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize(("edit", "problem"), [
    (("n = [30]", 'n = ["a"]'), "[grid] n: each value must be an integer, got 'a'"),
    (("n = [30]", "n = [0]"), "[grid] n: each value must be at least 1, got 0"),
    (("k = [3]", "k = [true]"), "[grid] k: each value must be an integer, got True"),
    (('dataset = ["synthetic"]', "dataset = [1]"), "[grid] dataset: each value must be a name"),
    (("seeds = [1, 2]", 'seeds = ["x"]'), "[study] seeds[0] must be an integer, got 'x'"),
    (("intruder_random_records = 100", 'intruder_random_records = "many"'),
     "[study] intruder_random_records must be an integer"),
    (('methods = ["collaborative"]', 'methods = ["collaborative"]\nlocal_noise = ["a"]'),
     "[study] local_noise[0] must be a number"),
    (('methods = ["collaborative"]', 'methods = ["collaborative"]\nfocal = 1.5'), "[study] focal must be an integer"),
    (("[round]", "[mix.m]\nhonest = \"all\"\n[round]"), "[mix.m] honest must be a number"),
    (("[round]", "[risk]\ncollector = \"x\"\n[round]"), "[risk]: collector must be a number"),
    (("[round]", "[attributes.a]\nqi = \"x\"\n[round]"), "[attributes.a] qi must be a list of names"),
    # No focal subject (focal defaults to 0): the deviation ran as honest play under its name, silently.
    (("k = [3]", 'k = [3]\ndeviation = ["honest", "copycat"]'), "[grid] deviation copycat: [study] focal is 0"),
])
def test_values_of_the_wrong_type_in_the_study_file_are_exit_2(
        tmp_path: Path, edit: tuple[str, str], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(TINY.replace(*edit))
    argv = ["experiment", "--config", str(config), "--out", str(tmp_path / "out"), "--workers", "0", "--no-plots"]
    assert main(argv) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(config) in line and problem in line, line


def test_a_top_level_key_that_should_be_a_table_is_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("attributes = 5\n" + TINY)
    with pytest.raises(InputError, match=r"attributes must be a table"):
        load_study(config)


def test_out_that_is_an_existing_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "study.toml").write_text(TINY)
    (tmp_path / "out").write_text("a file")
    assert main(["experiment", "--config", str(tmp_path / "study.toml"), "--out", str(tmp_path / "out"),
                 "--workers", "0"]) == 2
    assert "exists and is not a directory" in _one_line(capsys.readouterr().err)
