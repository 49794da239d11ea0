"""`coutil report DIR`: a run directory as one self-contained HTML page (coutil.round.html_report)."""

from __future__ import annotations

import base64
import io
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.round.html_report import RUN_FILES, SECTIONS

pytest.importorskip("matplotlib", reason="coutil report needs the plot extra (matplotlib)")

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished round (in memory, 40 records of the shipped survey, k = 4) with all its outputs."""
    out = tmp_path_factory.mktemp("report") / "sim"
    code = main(["simulate", "--seed", "3", "--set", "k=4", "--set", "data.rows=40", "--out", str(out), "--json"])
    assert code == 0
    return out


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.images: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "section" and values.get("id"):
            self.sections.append(str(values["id"]))
        if tag == "img":
            self.images.append(str(values.get("src")))
        for name in ("src", "href"):
            link = values.get(name)
            if link and not link.startswith(("data:", "#")):
                self.external.append(link)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _check_png(uri: str) -> None:
    from PIL import Image  # matplotlib's own dependency

    prefix = "data:image/png;base64,"
    assert uri.startswith(prefix), uri[:40]
    data = base64.b64decode(uri[len(prefix):], validate=True)
    assert data.startswith(PNG_SIGNATURE)
    with Image.open(io.BytesIO(data)) as image:
        image.verify()
    with Image.open(io.BytesIO(data)) as image:
        assert image.size[0] > 300 and image.size[1] > 100


def test_the_page_has_every_section_and_only_embedded_pngs(run_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "page.html"
    assert main(["report", str(run_dir), "-o", str(target), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["report"] == str(target) and described["bytes"] == len(target.read_bytes())
    page = _parse(target)
    assert page.sections == list(SECTIONS)
    assert len(page.images) == described["images"] == 4  # timeline, traffic, d, marginals: all data known
    for uri in page.images:
        _check_png(uri)
    assert page.external == []  # self-contained
    # The shipped survey was recognised: information loss against centralized MDAV on the same 40 records.
    assert described["original_data"].endswith("survey.csv")
    loss = described["information_loss"]
    assert loss["records"] == 40
    # Every subject released: the protocol's groups are MDAV's, so the loss is the same.
    assert loss["release_sse_sst_percent"] == pytest.approx(loss["mdav_sse_sst_percent"], rel=1e-9)
    text = target.read_text()
    # Protocol v2 verdicts carry no d: the page says why it shows accept/reason counts instead.
    assert "centralized MDAV" in text and "accepts it or why she complains" in text
    assert described["released"] == 40 and described["complaining"] == 0 and described["round_ok"] is True


def test_the_default_output_is_inside_the_run_directory(run_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    assert main(["report", str(copy)]) == 0
    assert (copy / "report.html").is_file()


def test_without_the_data_or_d_the_page_says_so(run_dir: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Verdicts without d (a later protocol version) and data that do not match: the page still renders, with
    counts of accepts and reasons, and says why there is no information loss."""
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    audit = json.loads((copy / "audit.json").read_text())
    for verdict in audit["verdicts"]:
        verdict.pop("permutation_distance", None)
    audit.pop("permutation_distance_distribution", None)
    (copy / "audit.json").write_text(json.dumps(audit))
    other = tmp_path / "other.csv"
    other.write_text("age,height_cm,weight_kg,hours_worked,income,savings,medical_spend\n"
                     + "".join(f"{20 + i},170,70,40,{1000 + i},1,1\n" for i in range(50)))
    assert main(["report", str(copy), "--data", str(other), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["original_data"] is None and "does not come from" in described["original_data_missing"]
    assert described["permutation_distance"] is False
    page = _parse(copy / "report.html")
    assert page.sections == list(SECTIONS)
    assert len(page.images) == 3  # timeline, traffic, verdict reasons; no marginals without the data
    for uri in page.images:
        _check_png(uri)
    assert "Original data not available" in (copy / "report.html").read_text()


@pytest.mark.parametrize("missing", RUN_FILES)
def test_a_directory_without_one_of_its_files_is_a_one_line_error(run_dir: Path, tmp_path: Path, missing: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy)
    (copy / missing).unlink()
    assert main(["report", str(copy)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"no {missing}" in err and "Traceback" not in err


def test_missing_matplotlib_is_a_one_line_error(run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    assert main(["report", str(run_dir), "-o", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "install coutil[plot]" in err
    assert not (tmp_path / "x.html").exists()


def test_headless_chromium_renders_the_page(run_dir: Path, tmp_path: Path) -> None:
    """The page as a browser shows it (Debian's chromium, headless): a screenshot that is not blank."""
    if not CHROMIUM.exists():
        print(f"SKIP: no {CHROMIUM} (apt-get install chromium)")
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium package to run this test")
    from PIL import Image

    target = tmp_path / "page.html"
    assert main(["report", str(run_dir), "-o", str(target)]) == 0
    shot = tmp_path / "page.png"
    result = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1000,2900", f"--screenshot={shot}",
         target.as_uri()],
        capture_output=True, text=True, timeout=120, check=False)
    assert shot.is_file(), result.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1000, 2900)
        colours = image.convert("RGB").getcolors(maxcolors=1_000_000)
    # A rendered page with figures has many colours; a blank or error page a handful.
    assert colours is None or len(colours) > 200
