"""`coutil verify` recomputes manifest.json's privacy label from the signed round (SPEC §9.1): nothing signs the
label the collector writes, and data users read it to know whether a release is differentially private. Before
this check, each forged label below passed verify (the check did not exist: every other check passes)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from coutil.protocol.config import RoundConfig
from tests.verify.test_verify import CONFIG, failed, run_round, verify

# beta 0.6 (epsilon = -ln 0.4 = 0.916), k = 4: delta_for gives about 0.17, below the claimed 0.3.
DP_ROUND = RoundConfig.from_mapping({
    "qi": ("age", "height"), "confidential": ("income",), "k": 4, "grouping": "safepub",
    "safepub_bins": {"age": [0, 150], "height": [0, 170, 300]}, "safepub_beta": 0.6,
    "safepub_epsilon": 0.92, "safepub_delta": 0.3,
    "random_records": 50, "step_timeout": 10.0, "retry_interval": 1.0, "register_window": 5.0,
    "audit_window": 20.0})


def _label(directory: Path) -> dict[str, Any]:
    label: dict[str, Any] = json.loads((directory / "manifest.json").read_text())["privacy"]
    return label


def _relabel(directory: Path, privacy: object = None, **changes: object) -> None:
    """Rewrite manifest.json's label: ``privacy`` in place of it, or ``changes`` to some of its values."""
    path = directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["privacy"] = privacy if privacy is not None else {**manifest["privacy"], **changes}
    path.write_text(json.dumps(manifest))


def _privacy_check(result: dict[str, Any]) -> dict[str, Any]:
    check: dict[str, Any] = next(c for c in result["checks"] if c["check"] == "privacy_label")
    return check


@pytest.mark.parametrize("seed", [1, 2])
def test_an_honest_dp_label_verifies(seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, n=30, seed=seed, config=DP_ROUND)
    assert _label(run.directory)["differential_privacy"] is True
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    assert _privacy_check(result)["status"] == "pass"
    assert any("label holds" in note for note in _privacy_check(result)["notes"])


def test_a_dp_label_on_an_mdav_round_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, n=21, seed=3, config=CONFIG)
    assert _label(run.directory)["differential_privacy"] is False
    _relabel(run.directory, differential_privacy=True)
    code, result, _ = verify(run.directory, capsys)
    assert code != 0 and list(failed(result)) == ["privacy_label"], failed(result)
    assert "does not support" in failed(result)["privacy_label"][0]


def test_a_dp_label_kept_after_a_silent_member_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A member vanished mid-run (excluded `silent`): the theorem no longer covers which records are released; a
    collector that writes the label as if it held is caught, naming the condition."""
    run = run_round(tmp_path, n=30, seed=1, config=DP_ROUND, vanish={0: 7.0, 1: 7.0, 2: 7.0})
    label = _label(run.directory)
    assert label["differential_privacy"] is False and not label["conditions"]["no_exclusion_but_suppression"]
    _relabel(run.directory, differential_privacy=True,
             conditions={name: True for name in label["conditions"]})
    code, result, _ = verify(run.directory, capsys)
    assert code != 0 and "privacy_label" in failed(result), failed(result)
    assert "no_exclusion_but_suppression" in failed(result)["privacy_label"][0]


@pytest.mark.parametrize(("changes", "problem"), [
    ({"epsilon": 0.1}, "claims epsilon = 0.1"),
    ({"delta": 1e-9}, "claims delta = 1e-09"),
    ({"k": 40}, "claims k = 40"),
    ({"privacy": ["dp"]}, "privacy is a JSON list"),
])
def test_a_dp_label_with_other_values_than_the_signed_round_fails(
        changes: dict[str, object], problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, n=30, seed=1, config=DP_ROUND)
    _relabel(run.directory, **changes)
    code, result, _ = verify(run.directory, capsys)
    assert code != 0 and list(failed(result)) == ["privacy_label"], failed(result)
    assert problem in failed(result)["privacy_label"][0]


def test_an_honest_label_that_claims_nothing_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, n=30, seed=1, config=dataclasses.replace(DP_ROUND, safepub_delta=0.01))
    assert _label(run.directory)["differential_privacy"] is False  # k = 4 gives about 0.17, above 0.01
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    assert _privacy_check(result)["notes"] == ["manifest.json claims no differential privacy"]
