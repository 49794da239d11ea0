"""`coutil audit` in subject mode with a --group the round's manifest does not hold (a typo: 99999, -1):
one line and exit 2, not a "complain (not_included)" verdict with exit 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.protocol.config import RoundConfig
from coutil.round.memory import simulate_round
from coutil.round.simulation import synthetic_dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     min_permutation_distance=1)


@pytest.fixture(scope="module")
def round_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("round")
    simulated = simulate_round(synthetic_dataset(12, CONFIG, 3), CONFIG, seed=3, out_dir=out)
    assert simulated.report.completed
    return out


def _audit(out: Path, group: int) -> list[str]:
    return ["audit", "--record-values", "1,1,1", "--release", str(out / "release.csv"),
            "--manifest", str(out / "manifest.json"), "--group", str(group)]


@pytest.mark.parametrize("group", [-1, 99999])
def test_a_group_the_manifest_does_not_hold_is_exit_2(round_dir: Path, group: int,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_audit(round_dir, group)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--group {group}" in err and "complain" not in err, err


def test_the_message_names_the_groups_it_holds(round_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = json.loads((round_dir / "manifest.json").read_text())["group_ids"]
    assert main(_audit(round_dir, max(ids) + 1)) == 2
    assert f"its group_ids: 0-{max(ids)})" in capsys.readouterr().err


def test_a_group_it_holds_still_gets_a_verdict(round_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ids = json.loads((round_dir / "manifest.json").read_text())["group_ids"]
    assert main([*_audit(round_dir, ids[-1]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["group"] == ids[-1]
