"""Output people can read (issue 13): long distributions summarized, figures that are curves with a title,
piped tables with whole columns, --json where a command writes something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.round.setup import default_data_path

SURVEY = default_data_path()
QI = "age,height_cm,weight_kg,hours_worked"


@pytest.fixture(scope="module")
def mdav_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("attack") / "mdav.csv"
    assert main(["anonymize", "mdav", str(SURVEY), "--k", "5", "--columns", QI, "-o", str(out)]) == 0
    return out


def test_attack_summarizes_thousands_of_distances_and_titles_its_figure(
        mdav_release: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra draws the figure")
    figure = tmp_path / "attack.png"
    capsys.readouterr()
    assert main(["attack", "--original", str(SURVEY), "--release", str(mdav_release), "--columns", QI,
                 "--plot", str(figure)]) == 0
    err = capsys.readouterr().err
    # Was: a row per distance (3,854 lines for this data). Now: ranges, a count, and the JSON for the rest.
    assert len(err.splitlines()) < 120, len(err.splitlines())
    assert "distances binned into ranges; every distance in --json" in err
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    with Image.open(figure) as image:
        assert image.width >= 900  # the wide figure of a curve, not a comb of bars


def test_the_figure_title_names_the_data_and_n(mdav_release: Path, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra draws the figure")
    from coutil.audit import plots

    titles: list[str] = []
    original = plots.plot_distance_distributions

    def spy(*args: object, **kwargs: object) -> Path:
        titles.append(str(kwargs.get("title")))
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(plots, "plot_distance_distributions", spy)
    assert main(["attack", "--original", str(SURVEY), "--release", str(mdav_release), "--columns", QI,
                 "--plot", str(tmp_path / "f.png"), "--json"]) == 0
    assert titles and "survey.csv" in titles[0] and "mdav.csv" in titles[0] and "n = 10000" in titles[0]
    assert "reverse-mapped" in titles[0]  # what Z is, said on the figure


def test_piped_tables_keep_whole_values(tmp_path: Path) -> None:
    """stderr redirected to a file (not a terminal): rich used to cut columns at 80 characters."""
    result = subprocess.run([sys.executable, "-m", "coutil", "simulate", "--set", "data.rows=15", "--set", "k=3"],
                            capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert "…" not in result.stderr
    assert "subjects accepting the release / verdicts" in result.stderr


def test_reverse_map_has_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = Path(__file__).parent / "data" / "running-example"
    out = tmp_path / "z.csv"
    assert main(["reverse-map", "--original", str(data / "X.csv"), "--release", str(data / "Y.csv"), "-o", str(out),
                 "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["records"] == 20 and info["output"] == str(out) and out.exists()
