"""`coutil info-loss` never compares rows that are not the same records (issue 15, item 7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coutil.cli import main


def _files(tmp_path: Path) -> tuple[Path, Path]:
    original = tmp_path / "x.csv"
    original.write_text("a,b\n1,10\n2,20\n3,30\n4,40\n")
    release_dir = tmp_path / "round"
    release_dir.mkdir()
    release = release_dir / "release.csv"
    # Group order: records 3, 1, 4, 2 of the original (groups {1,3} and {2,4} on a).
    release.write_text("a,b\n2,30\n2,10\n3,40\n3,20\n")
    (release_dir / "manifest.json").write_text(json.dumps({"row_order": "group", "k": 2}))
    return original, release


def test_group_ordered_release_is_refused_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original, release = _files(tmp_path)
    assert main(["info-loss", "--original", str(original), "--masked", str(release), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "group order" in lines[0] and "--mapping" in lines[0]


def test_mapping_aligns_the_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original, release = _files(tmp_path)
    mapping = tmp_path / "rows.txt"
    mapping.write_text("2\n4\n1\n3\n")  # record 1 is release row 2, record 2 row 4, ...
    assert main(["info-loss", "--original", str(original), "--masked", str(release), "--mapping", str(mapping),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {a["name"]: a for a in report["attributes"]}
    assert by_name["b"]["sse_sst_percent"] == 0.0  # confidential values meet their own records
    # a: 1,2,3,4 released as 2,3,2,3: four unit errors over SST = 4 x 1.25 (population variance 1.25).
    assert by_name["a"]["sse_sst_percent"] == pytest.approx(100 * 4.0 / 5.0)
    mapping.write_text("2\n4\n1\n")
    assert main(["info-loss", "--original", str(original), "--masked", str(release), "--mapping", str(mapping)]) == 2
