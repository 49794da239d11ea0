"""Attacks on the privacy label check (4ec48f0) and on what it rests on, found by an attacker of that commit.
Each test failed before its fix (the forged round verified: exit 0, every check passing).

- `suppressed_class` was an exclusion no check looked at (`_check_statement` returned at once): a collector could
  drop a live member at once in any round (drop-subject, no deadline), or pass a silent member off as suppressed to
  keep a SafePub round's (epsilon, delta) label.
- A label whose differential_privacy is "true" or 1 was taken for no claim, whatever epsilon and delta it showed;
  beside a true claim, delta_achieved, conditions and keys of the collector's own were not compared.
- manifest.json's ``manifest`` (the announce's parameters: method, k, SafePub's epsilon) was never compared.
- A DP label on a transcript without the shuffle_starts passed on the collector's unsigned exclusion summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.protocol.collector import CollectorNode
from coutil.protocol.node import Outgoing
from coutil.round.transcript import read_transcript
from tests.verify.test_verify import failed, run_round, verify
from tests.verify.test_verify_privacy_label import DP_ROUND, _label, _privacy_check, _relabel


class DropAsSuppressed(CollectorNode):
    """drop-subject under SafePub's reason: run 0 of the first group above k starts without its last member,
    stated `suppressed_class` (a reason no deadline applies to)."""

    victim: bytes | None = None

    def _start_run(self, group: Any, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self.victim is None and group.run == -1 and len(group.members) > self.config.k:
            self.victim = group.members[-1]
            self._excluded[self.victim] = "suppressed_class"
            group.set_members(group.members[:-1], self._index_of)
            excluded = ((self.victim, "suppressed_class"),)
        return super()._start_run(group, excluded, now)


class SilentAsSuppressed(CollectorNode):
    """Every member that went silent is stated `suppressed_class` instead: the label's no_exclusion_but_suppression
    then holds, and the collector writes a true (epsilon, delta) claim."""

    def _exclude(self, group: Any, culprits: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        culprits = tuple((m, "suppressed_class" if reason == "silent" else reason) for m, reason in culprits)
        return super()._exclude(group, culprits, now)


@pytest.mark.parametrize("dp", [False, True])
def test_a_live_member_dropped_as_suppressed_class_is_caught(
        dp: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, DropAsSuppressed, **({"n": 30, "seed": 1, "config": DP_ROUND} if dp else {"n": 22}))
    assert isinstance(run.collector, DropAsSuppressed) and run.collector.victim is not None
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and "exclusion_evidence" in problems, problems
    assert any("suppressed_class" in p and "drop-subject" in p for p in problems["exclusion_evidence"]), problems


def test_a_silent_member_passed_off_as_suppressed_to_keep_the_dp_label_is_caught(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, SilentAsSuppressed, n=30, seed=1, config=DP_ROUND, vanish={3: 7.0})
    assert set(read_transcript(run.directory / "transcript.json").exclusions.values()) == {"suppressed_class"}
    assert _label(run.directory)["differential_privacy"] is True  # the collector's own label claims it
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and "exclusion_evidence" in problems, problems


@pytest.mark.parametrize(("changes", "problem"), [
    ({"differential_privacy": "true", "epsilon": 0.01, "delta": 1e-12}, "neither true nor false"),
    ({"differential_privacy": 1}, "neither true nor false"),
    ({"delta_achieved": 1e-30}, "delta_achieved"),
    ({"conditions": {"audited_by_a_third_party": True}}, "conditions"),
    ({"guarantee": "(0.01, 1e-9)-DP"}, "guarantee"),
    ({"differential_privacy": False, "mechanism": "Laplace noise"}, "claims mechanism = Laplace noise"),
])
def test_a_label_with_values_of_the_collectors_own_fails(
        changes: dict[str, object], problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, n=30, seed=1, config=DP_ROUND)
    _relabel(run.directory, **changes)
    code, result, _ = verify(run.directory, capsys)
    assert code == 3 and list(failed(result)) == ["privacy_label"], failed(result)
    assert problem in failed(result)["privacy_label"][0]


def test_manifest_parameters_other_than_the_signed_announce_fail(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An MDAV round at k = 3 written up as SafePub at k = 40 with epsilon 0.01, the privacy label left honest."""
    run = run_round(tmp_path, n=21, seed=3)
    path = run.directory / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["manifest"].update(method="safepub", k=40, safepub_epsilon=0.01)
    path.write_text(json.dumps(manifest))
    code, result, _ = verify(run.directory, capsys)
    assert code == 3 and list(failed(result)) == ["release_files"], failed(result)
    assert "not the signed announce's parameters (k, method, safepub_epsilon)" in failed(result)["release_files"][0]


def test_a_dp_label_resting_on_an_unsigned_exclusion_summary_is_not_verified(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A member went silent (the label cannot hold); the collector publishes its transcript without the signed
    shuffle_starts (as `collector export` does), writes her `suppressed_class` in the unsigned summary and a label
    recomputed on it: every condition then holds on what the auditor has, which is the collector's word."""
    run = run_round(tmp_path, n=30, seed=1, config=DP_ROUND, vanish={3: 7.0})
    path = run.directory / "transcript.json"
    doc = json.loads(path.read_text())
    assert set(doc["exclusions"].values()) == {"silent"}
    doc.update(shuffle_starts=[], shuffle_starts_included=False,
               exclusions={sid: "suppressed_class" for sid in doc["exclusions"]})
    path.write_text(json.dumps(doc))
    label = _label(run.directory)
    label.update(differential_privacy=True, suppressed=len(doc["exclusions"]),
                 conditions={name: True for name in label["conditions"]})
    _relabel(run.directory, label)
    code, result, _ = verify(run.directory, capsys)
    check = _privacy_check(result)
    # The announce commits to the shuffle_starts (SPEC §8.5): withholding them fails; the label is not verified.
    assert code == 3 and "withheld (a downgrade)" in failed(result)["exclusion_evidence"][0], failed(result)
    assert check["status"] == "skip", check
    assert any("was not verified" in note for note in check["notes"]), check
    assert result["summary"] != "every check passes"
