"""A merge never makes a run whose blames cannot be sent (SPEC §4): a run's largest message, mixer 1's blame, grows
with the square of its members (`largest_run_message`), the round config bounds MDAV's groups (2k - 1 members) by
the limits, and a group fallen below k merges into the nearest group still sealed that, with its members, stays
within `largest_run_members` (the 64 MiB every subject applies: a protocol constant, which no collector can tune to
steer a merge); none such, its members are excluded `below_k_no_partner`. The auditor applies the same rule.

At the real limit the rule bites from k of about 390 (too large to simulate here), so these rounds run with the bound
of a 64 KiB limit (29 members, three confidential values) in the collector and the auditor. Before, a group of 15
that lost a member merged into its nearest group of 18: a run of 32 whose mixer 1 could not have sent her blame."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.cli import main
from coutil.protocol import codec, collector_core
from coutil.protocol.collector_groups import GroupState, merge_target
from coutil.protocol.shuffle import largest_group, largest_run_members, largest_run_message
from coutil.round import verify_grouping

CONFIDENTIAL = ("income", "savings", "medical_spend")
LIMIT = 2**16  # what the rounds below take for the subjects' limit
ROUND = f"""[round]
qi = ["age", "height_cm", "weight_kg", "hours_worked"]
confidential = {json.dumps(list(CONFIDENTIAL))}
k = 15
register_window = 30.0
step_timeout = 20.0
retry_interval = 2.0
audit_window = 60.0
random_records = 100

[data]
rows = {{rows}}

[[adversary.subjects]]
strategy = "silent"
rows = [0]
"""


@pytest.fixture(autouse=True)
def _small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector and the auditor take the members of a 64 KiB limit for the most a merged run may have."""
    def small(confidential: Sequence[str]) -> int:
        return largest_group(len(confidential), LIMIT)

    monkeypatch.setattr(collector_core, "largest_run_members", small)
    monkeypatch.setattr(verify_grouping, "largest_run_members", small)


def _round(tmp_path: Path, capsys: pytest.CaptureFixture[str], rows: int, extra: str = "") -> tuple[
        dict[str, Any], int, str]:
    config = tmp_path / f"merge-{rows}.toml"
    config.write_text(ROUND.format(rows=rows) + extra)
    out = tmp_path / f"out-{rows}"
    assert main(["simulate", "--config", str(config), "--out", str(out), "--with-registrations", "--json"]) in (0, 4)
    report = json.loads((out / "report.json").read_text())
    capsys.readouterr()
    code = main(["verify", str(out), "--json"])
    result = json.loads(capsys.readouterr().out)
    grouping = next(c for c in result["checks"] if c["check"] == "grouping")
    return report, code, f"{grouping['status']}: {result.get('first_problem')}"


def test_the_limits_admit_2k_minus_1_members_and_not_a_group_of_15_merged_into_one_of_18() -> None:
    most = largest_group(len(CONFIDENTIAL), LIMIT)
    assert most == 29 and largest_run_message(29, 3) <= LIMIT < largest_run_message(30, 3)
    # At the subjects' real limit (the protocol's constant, whatever the collector announces).
    assert largest_run_members(CONFIDENTIAL) == largest_group(3, codec.MAX_MESSAGE_BYTES) > 1000


def test_a_merge_passes_over_a_nearer_group_it_would_make_too_large(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MDAV forms 15, 15 and 18 (48 records); a member of a 15 goes silent and the 14 left merge into the other 15
    (29 members), farther than the 18 (32 would not fit). The auditor agrees; before, it failed this round (`not
    the nearest group`) and passed the merge into the 18."""
    report, code, grouping = _round(tmp_path, capsys, 48)
    assert report["group_sizes"] == {"18": 1, "29": 1} and report["excluded"] == {"silent": 1}, report
    assert report["released_rows"] == 47
    assert code == 0 and grouping.startswith("pass"), grouping


def test_with_no_group_that_fits_the_members_left_are_excluded_below_k_no_partner(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """MDAV forms 15 and 18 (33 records): the 14 left of the 15 fit nowhere; they are excluded, their records never
    opened, and the auditor agrees (before: a run of 32 members)."""
    report, code, grouping = _round(tmp_path, capsys, 33)
    assert report["group_sizes"] == {"18": 1}, report
    assert report["excluded"] == {"below_k_no_partner": 14, "silent": 1}, report
    assert code == 0 and grouping.startswith("pass"), grouping


def test_the_auditor_fails_a_merge_into_a_group_too_large(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A collector routing the merge into the nearest group regardless of size (`route-merge`, rank 1): the auditor
    names the merge above the members whose run's messages fit."""
    report, code, grouping = _round(tmp_path, capsys, 48, '[adversary.collector]\nstrategy = "route-merge"\n'
                                                          'rank = 1\ndrop = false\nvictim = 0\n')
    assert report["group_sizes"] == {"15": 1, "32": 1}, report
    assert code == 3 and "above the 29 members whose run's messages fit" in grouping, grouping


def test_merge_target_skips_the_groups_the_members_would_make_too_large() -> None:
    def group(label: int, size: int) -> GroupState:
        return GroupState(label, tuple(bytes([label, i]) * 16 for i in range(size)), tuple(range(size)), 0.0)

    source, near, far = group(0, 14), group(1, 18), group(2, 15)
    centre = {0: 0.0, 1: 1.0, 2: 5.0}
    def centroid(g: GroupState) -> np.ndarray:
        return np.array([centre[g.label]])

    assert merge_target(source, [source, near, far], centroid, 32) is near
    assert merge_target(source, [source, near, far], centroid, 29) is far
    assert merge_target(source, [source, near, far], centroid, 28) is None
