"""The test suite is self-contained: the reference data live in tests/data and nothing skips for lack of them."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data"


def _listed_sums() -> dict[str, str]:
    """The sha256 sums listed in tests/data/README.md, by path relative to tests/data."""
    text = (DATA / "README.md").read_text(encoding="utf-8")
    return {path: digest for digest, path in re.findall(r"^([0-9a-f]{64})  (\S+)$", text, flags=re.MULTILINE)}


def test_every_data_file_is_documented_and_unchanged() -> None:
    sums = _listed_sums()
    files = sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*.csv"))
    assert files == sorted(sums), "tests/data/README.md must list every data file with its provenance"
    for name, digest in sums.items():
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    assert "sdcMicro" in readme and "GPL" in readme and "1501.04186" in readme


def test_fixtures_point_inside_the_repository(
    running_example: Path, census_csv: Path, tarragona_csv: Path
) -> None:
    for path in (running_example, census_csv, tarragona_csv):
        assert path.resolve().is_relative_to(DATA), path
    assert sorted(p.name for p in running_example.glob("*.csv")) == ["X.csv", "Y.csv", "Z.csv"]
    assert census_csv.read_text(encoding="utf-8").count("\n") == 1081  # header + 1080 records
    assert tarragona_csv.read_text(encoding="utf-8").count("\n") == 835  # header + 834 records


@pytest.mark.parametrize(
    "path", sorted([*(TESTS / "sdc").glob("*.py"), TESTS / "conftest.py"]), ids=lambda p: p.name
)
def test_no_skip_of_coutil_code_or_data(path: Path) -> None:
    """A skipped test cannot fail: coutil's own modules and the repository's data are never optional."""
    text = path.read_text(encoding="utf-8")
    if path.name == Path(__file__).name:
        return
    assert "pytest.skip(" not in text
    assert "skipif" not in text
    assert 'importorskip("coutil' not in text and "importorskip('coutil" not in text
