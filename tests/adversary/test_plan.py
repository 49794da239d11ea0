"""The ``[adversary]`` table: parsing, one-line errors, the seeded choice of rows, and the commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coutil.adversary import COLLECTOR_STRATEGIES, SUBJECT_STRATEGIES, collector_strategy, subject_strategy
from coutil.adversary.plan import parse_adversary
from coutil.cli import main
from coutil.errors import InputError
from coutil.round.setup import load_round_spec
from tests.adversary.common import ROUND_FILE

ROUND = ROUND_FILE


def test_every_name_of_the_issue_is_registered_with_its_class() -> None:
    assert set(SUBJECT_STRATEGIES) == {
        "silent", "leave-after-grouping", "tamper", "withhold", "copycat", "false-complaint", "unsolicited-blame",
        "garbage-inner", "misreport-qi", "misreport-confidential", "free-rider",
        # Found since (SPEC §3): views shown to one member, two signed batches, keys of small order or ahead.
        "key-split", "equivocate", "direct-no-go", "bad-key", "keys-ahead", "hide-submit",
        # A no-go before the run reaches the honest mixers (they blamed without mixing and were named).
        "early-no-go",
        # A second submission re-sent with her blame, her first hidden from the collector (mixer 1 was named).
        "resubmit",
        # Two final batches split by a broker, a go vote on a final batch nobody signed (the round stalled).
        "two-finals", "wrong-digest",
        # Her own no-go shown with her blame after the reveal_open (she was excluded like the members she suppressed).
        "late-no-go"}
    assert set(COLLECTOR_STRATEGIES) == {
        "rerun-subtract", "split-view-roster", "split-view-release", "drop-subject", "isolate-victim",
        "fabricate-members", "publish-below-k", "erase-complaints", "split-assign", "split-announce", "split-roster",
        "split-roster-early",
        # Found since: a merge routed to a group of its choosing (SPEC §3, the auditor's grouping check), a run
        # shown to one member alone so that her answer "proves" she equivocated (the auditor's blame_evidence).
        "route-merge", "lure-run",
        # A run of members outside her group, her refusal covered by an assign it never sent (the auditor's complaints).
        "cover-run"}
    for name in SUBJECT_STRATEGIES:
        assert name == subject_strategy(name).NAME
    for name in COLLECTOR_STRATEGIES:
        assert name == collector_strategy(name).NAME


def test_a_plan_parses_names_rows_fractions_and_parameters() -> None:
    plan = parse_adversary({"collector": {"strategy": "isolate-victim", "victim": 4, "via": "run"},
                            "subjects": [{"strategy": "silent", "rows": [1, 2], "phase": "vote"},
                                         {"strategy": "misreport-qi", "fraction": 0.1, "shift": 2}]}, "f.toml")
    assert plan.collector == "isolate-victim" and dict(plan.collector_params) == {"victim": 4, "via": "run"}
    assert plan.victim_row() == 4
    rows = plan.subject_rows(40, seed=7)
    assert rows == plan.subject_rows(40, seed=7)  # a function of the seed
    assert {r for r, a in rows.items() if a.strategy == "silent"} == {1, 2}
    assert sum(1 for a in rows.values() if a.strategy == "misreport-qi") == 4
    assert dict(plan.subjects[1].params) == {"shift": 2.0}


@pytest.mark.parametrize(("table", "message"), [
    ({"collector": "bogus"}, "unknown collector strategy 'bogus'"),
    ({"subjects": [{"strategy": "nope", "rows": [0]}]}, "unknown subject strategy 'nope'"),
    ({"subjects": [{"strategy": "silent", "rows": [0], "colour": 1}]}, "unknown key(s) colour for silent"),
    ({"subjects": [{"strategy": "silent", "rows": [0], "phase": "lunch"}]}, "phase must be one of"),
    ({"subjects": [{"strategy": "misreport-qi", "rows": [0], "shift": "big"}]}, "shift must be a float"),
    ({"subjects": [{"strategy": "copycat"}]}, "give rows"),
    ({"subjects": [{"strategy": "copycat", "rows": [0], "fraction": 0.1}]}, "give rows"),
    ({"subjects": [{"strategy": "copycat", "fraction": 1.5}]}, "fraction must be in"),
    ({"collector": {"strategy": "drop-subject", "victim": -1}}, "victim must be"),
    ({"collector": {"strategy": "drop-subject", "reason": "merged"}}, "reason must be one of"),
    ({"villain": "me"}, "unknown key(s) villain"),
])
def test_bad_plans_are_one_line_input_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_adversary(table, "f.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_rows_outside_the_data_or_given_twice_are_refused() -> None:
    with pytest.raises(InputError, match="not in the data set"):
        parse_adversary({"subjects": [{"strategy": "copycat", "rows": [30]}]}, "f").subject_rows(30, 1)
    with pytest.raises(InputError, match="two strategies"):
        parse_adversary({"subjects": [{"strategy": "copycat", "rows": [3]},
                                      {"strategy": "tamper", "rows": [3]}]}, "f").subject_rows(30, 1)


def test_the_table_comes_from_the_file_or_set_and_serve_refuses_it(tmp_path: Path) -> None:
    path = tmp_path / "round.toml"
    path.write_text(ROUND + '[adversary]\ncollector = "rerun-subtract"\n')
    spec = load_round_spec(path)
    assert spec.adversary is not None and spec.adversary.collector == "rerun-subtract"
    spec = load_round_spec(path, sets=["adversary.collector=drop-subject",
                                       'adversary.subjects=[{strategy="tamper", rows=[2]}]'])
    assert spec.adversary is not None and spec.adversary.collector == "drop-subject"
    assert spec.adversary.subjects[0].strategy == "tamper"
    assert load_round_spec(tmp_path / "round.toml", sets=[]).adversary is not None
    spec.require("coutil run", simulated_network=False, deviations=True)
    with pytest.raises(InputError, match=r"\[adversary\]"):
        spec.require("coutil collector serve", simulated_network=False)


def test_simulate_runs_a_round_file_with_an_adversary_and_reports_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "round.toml"
    path.write_text(ROUND + '[[adversary.subjects]]\nstrategy = "copycat"\nrows = [0]\n')
    out = tmp_path / "out"
    code = main(["simulate", "--config", str(path), "--seed", "3", "--json", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(stdout)
    report = json.loads((out / "report.json").read_text())
    for section in (summary["adversary"], report["adversary"]):
        (entry,) = section["deviants"]
        assert entry["strategy"] == "copycat" and entry["row"] == 0
        assert entry["detected"] and entry["excluded"] and entry["exclusion_reason"] == "blamed_copy"
        assert entry["leak"] == []
    # Human output: one line per strategy.
    code = main(["simulate", "--config", str(path), "--seed", "3"])
    err = capsys.readouterr().err
    assert code == 0 and "adversary subject copycat: 1 node(s), 1 detected, 1 excluded, 0 honest" in err


def test_an_unknown_strategy_is_a_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "round.toml"
    path.write_text(ROUND + '[adversary]\ncollector = "evil-genius"\n')
    assert main(["simulate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown collector strategy 'evil-genius'" in err and len(err.strip().splitlines()) == 1
    assert main(["simulate", "--set", "adversary.collector=nobody", "--set", "data.subjects=30"]) == 2
    err = capsys.readouterr().err
    assert "unknown collector strategy 'nobody'" in err and "Traceback" not in err


def test_run_builds_the_strategies_over_mqtt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`coutil run` (the embedded broker): the same node factory, the same report section."""
    path = tmp_path / "round.toml"
    path.write_text(ROUND + '[adversary]\ncollector = "split-view-release"\n'
                    '[[adversary.subjects]]\nstrategy = "tamper"\nrows = [5]\n')
    code = main(["run", "--config", str(path), "--out", str(tmp_path / "run"), "--json", "--seed", "3"])
    stdout, err = capsys.readouterr()
    summary = json.loads(stdout)
    entries = {e["strategy"]: e for e in summary["adversary"]["deviants"]}
    assert entries["tamper"]["excluded"] and entries["tamper"]["exclusion_reason"] == "blamed_tamper"
    assert entries["split-view-release"]["detected_by"] == ["auditor"]
    assert entries["split-view-release"]["leak"] == []
    assert code == 5, err  # subjects shown the other release: their verdicts bind it (no accept of this one)


def _run_against(collector: str, workers: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
                 ) -> tuple[int, str, Path, dict[str, Any]]:
    """`coutil run` against the collector strategy table ``collector`` (TOML lines): exit code, stderr, the run
    directory and the report's collector entry."""
    path = tmp_path / "round.toml"
    path.write_text(ROUND + "[adversary.collector]\n" + collector)
    out = tmp_path / "run"
    code = main(["run", "--config", str(path), "--out", str(out), "--json", "--seed", "3", "--workers", str(workers)])
    stdout, err = capsys.readouterr()
    (entry,) = [e for e in json.loads(stdout)["adversary"]["deviants"] if e["role"] == "collector"]
    return code, err, out, entry


@pytest.mark.parametrize("workers", [0, 2])
def test_run_keeps_the_subjects_evidence_of_hidden_verdicts(workers: int, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """`coutil run` against a collector that hides the complaints it acknowledged: the subjects' pairs
    reach the run directory's evidence.json and the report, whether they ran in this process or in
    worker processes (which report them), and `coutil verify` names every hidden verdict."""
    code, err, out, entry = _run_against('strategy = "split-view-release"\nhide_complaints = true\n', workers,
                                         tmp_path, capsys)
    assert code in (0, 5), err
    kept = json.loads((out / "evidence.json").read_text())
    evidence = [e for e in kept if "verdict" in e]
    assert evidence, "nothing hidden"
    assert len([e for e in kept if "receipt" in e]) == 1  # one roster: one receipt, from every worker together
    assert entry["auditor"]["acknowledged_verdict_missing"] == len(evidence) and entry["public"]
    assert main(["verify", str(out), "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert len(checks["acknowledged_verdicts"]["problems"]) == len(evidence)


@pytest.mark.parametrize("workers", [0, 2])
def test_run_keeps_the_subjects_proofs_of_equivocation(workers: int, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`coutil run` against a collector showing one group another roster (``split-view-roster``): the subjects
    shown two roster roots keep both signed messages; their proofs reach evidence.json and the report, from this
    process or from worker processes, and `coutil verify` fails its ``equivocation`` check on them alone."""
    code, err, out, entry = _run_against('strategy = "split-view-roster"\n', workers, tmp_path, capsys)
    assert code in (4, 5), err  # the group shown the other roster is excluded, or complains
    proofs = [e for e in json.loads((out / "evidence.json").read_text()) if "equivocation" in e]
    assert proofs
    assert entry["equivocation_proofs"] >= 1 and entry["public"]
    brought = tmp_path / "proofs.json"
    brought.write_text(json.dumps(proofs))
    key = json.loads((out / "transcript.json").read_text())["collector_key"]
    assert main(["verify", "--evidence", str(brought), "--collector-key", key, "--json"]) == 3
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "fail"
