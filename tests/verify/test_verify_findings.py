"""`coutil verify` on the findings of the third audit of the auditor: honest rounds it failed (dropouts at
the reveal, SafePub classes suppressed after a run) and forgeries it passed or crashed on."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from coutil.cli import main
from coutil.protocol import codec
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import ShuffleStart
from coutil.protocol.topics import sid_of
from coutil.round.simulation import synthetic_dataset
from coutil.round.transcript import read_transcript
from tests.verify.test_verify import CONFIG, Run, failed, run_round, verify
from tests.verify.test_verify_forgeries import MERGE_ROUND, Forge, _saved_and_failing, distance, move_to

SAFEPUB = RoundConfig.from_mapping({
    "qi": ("age", "height"), "confidential": ("income",), "k": 4, "grouping": "safepub",
    "safepub_bins": {"age": [18, 30, 40, 50, 60, 70, 90], "height": [140, 160, 175, 200]}, "safepub_beta": 1.0,
    "random_records": 50, "step_timeout": 10.0, "retry_interval": 1.0, "register_window": 5.0,
    "audit_window": 20.0})


# ------------------------------------------------------------------------------------------------ honest
def test_a_group_suppressed_at_the_reveal_verifies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A member vanishes during the reveal: the honest collector suppresses her group with a signed closing
    shuffle_start naming its members `suppressed`; they complain, and the auditor explains the complaints."""
    run = run_round(tmp_path, n=25, seed=4, vanish={4: 8.11, 0: 36.14}, config=dataclasses.replace(CONFIG, k=4))
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    complaints = next(c for c in result["checks"] if c["check"] == "complaints")
    assert sum(result["complaints_by_reason"].values()) > 0
    assert any("suppressed" in note for note in complaints["notes"])


@pytest.mark.parametrize("seed", [2, 3, 5])
def test_a_subject_excluded_silent_who_comes_back_and_complains_is_no_deviation(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker (a sweep of honest rounds over a lossy network): a subject cut off past her step
    deadline is excluded `silent` by the honest collector, comes back, gets the release and complains
    `not_included`, which the collector records. The auditor failed the honest round; her signed exclusion
    explains the complaint (a note), and a complaint of any other kind still fails."""
    run = run_round(tmp_path, n=20, seed=seed, cut_off=((2, 5.5, 19.0),))
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    assert result["complaints_by_reason"] == {"not_included": 1}
    complaints = next(c for c in result["checks"] if c["check"] == "complaints")
    assert any("excluded by a signed shuffle_start" in note for note in complaints["notes"])
    assert read_transcript(run.directory / "transcript.json").exclusions[run.subjects[2].sid] == "silent"


def test_a_safepub_class_suppressed_after_its_run_is_counted_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SafePub class run loses members below k: the rest, who hold assigns, are excluded `suppressed_class`
    and must not be counted twice against the roster. Here every class is suppressed: the release is empty, the
    member still online audits it (`not_included`, not `malformed_release`), and her signed closing notice
    explains her complaint."""
    run = run_round(tmp_path, n=15, seed=1055, vanish={7: 65.93, 11: 9.07, 10: 4.03, 14: 6.76}, config=SAFEPUB)
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    assert result["complaints_by_reason"] == {"not_included": 1}
    release = next(c for c in result["checks"] if c["check"] == "release")
    assert any(note.startswith("0 rows in 0 groups") for note in release["notes"]), release
    # `coutil audit` gives her the verdict she gave in the round (one function), not a refusal of the file.
    record = synthetic_dataset(15, SAFEPUB, 1055).select([*SAFEPUB.qi, *SAFEPUB.confidential]).values[0]
    code = main(["audit", "--release", str(run.directory / "release.csv"), "--manifest",
                 str(run.directory / "manifest.json"), "--record-values", ",".join(map(str, record)),
                 "--group", str(run.subjects[0].group or 0), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["verdict"]["reason"] == "not_included" and out["rows"] == 0


# ------------------------------------------------------------------------------------------------ forgeries
FAKE_KEY = bytes(range(32))


def _merge_parts(forge: Forge) -> tuple[ShuffleStart, set[bytes], ShuffleStart]:
    """The merge of MERGE_ROUND: the source's closing shuffle_start, its movers, the target's run with them."""
    [closing] = [s for s in forge.starts if not s.members and any(r == "merged" for _, r in s.excluded)]
    movers = {key for key, reason in closing.excluded if reason == "merged"}
    [target] = [s for s in forge.starts if s.members and movers <= set(s.members) and s.group != closing.group]
    return closing, movers, target


@pytest.mark.parametrize("also_merged", [False, True], ids=["in_target_run", "in_merged_list"])
def test_a_key_not_on_the_roster_in_a_merge_is_a_failure_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], also_merged: bool) -> None:
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge = Forge(run)
    closing, _, target = _merge_parts(forge)
    bigger = dataclasses.replace(target, members=tuple(sorted((*target.members, FAKE_KEY))))
    named = dataclasses.replace(closing, excluded=(*closing.excluded, (FAKE_KEY, "merged")))
    forge.starts = [bigger if s is target else named if (s is closing and also_merged) else s for s in forge.starts]
    assert "not on the roster" in _saved_and_failing(forge, run, capsys, "grouping")


def test_a_shuffle_start_with_unsorted_members_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge = Forge(run)
    forge.starts = [dataclasses.replace(s, members=tuple(reversed(s.members))) for s in forge.starts]
    assert "unsorted or repeated" in _saved_and_failing(forge, run, capsys, "exclusion_evidence")


def test_a_shuffle_start_with_a_repeated_member_is_caught(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge = Forge(run)
    first = next(s for s in forge.starts if s.members)
    repeated = dataclasses.replace(first, members=tuple(sorted((*first.members, first.members[0]))))
    forge.starts = [repeated if s is first else s for s in forge.starts]
    assert "unsorted or repeated" in _saved_and_failing(forge, run, capsys, "exclusion_evidence")


def _rerouted(run: Run) -> tuple[Forge, int, set[int]]:
    """MERGE_ROUND's merge re-routed into the farthest group, every statement consistent (as in
    test_verify_forgeries): the forge, the far group and the other groups."""
    forge = Forge(run)
    closing, movers, merge_run = _merge_parts(forge)
    near = merge_run.group
    here = forge.mean(movers)
    others = {a.group for a in forge.assigns} - {near, closing.group}
    far = max(others, key=lambda g: distance(forge.group(g)[0].centroid, here))
    far_members = tuple(sorted([a.subject for a in forge.group(far)] + sorted(movers)))
    far_runs = [s for s in forge.starts if s.group == far]
    forge.starts = [dataclasses.replace(s, members=tuple(m for m in s.members if m not in movers))
                    if s.group == near else s for s in forge.starts]
    forge.starts.append(dataclasses.replace(far_runs[-1], run=far_runs[-1].run + 1, members=far_members, excluded=(),
                                            deadline=merge_run.deadline))
    move_to(forge, movers, near, far, tuple(sorted(set(merge_run.members) - movers)), far_members,
            forge.mdav_centroid(near), forge.mean(far_members))
    return forge, far, (others | {near}) - {far}


def _touch_every_other_group(forge: Forge, groups: set[int], *, fake_assign: bool) -> None:
    """One member of each group excluded `blamed_unsolicited` in the unsigned summary (no statement: the
    post-reveal exemption), her assign (if ``fake_assign``) naming one more member: the group looks changed."""
    exclusions = dict(forge.doc["exclusions"])
    for g in groups:
        member = forge.group(g)[-1]
        if fake_assign:
            extra = next(a.subject for a in forge.assigns if a.group != g)
            fake = tuple(sorted({*member.members, extra}))
            forge.assigns = [dataclasses.replace(a, members=fake) if a.subject == member.subject else a
                             for a in forge.assigns]
        exclusions[sid_of(member.subject)] = "blamed_unsolicited"
    forge.doc["exclusions"] = exclusions


@pytest.mark.parametrize("starts", [True, False], ids=["with_shuffle_starts", "without_shuffle_starts"])
def test_an_exempt_members_assign_is_compared_with_her_group_mates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], starts: bool) -> None:
    """F1: the exempt member's assign names an extra member, to make her group look changed and exempt it
    from the nearest-group comparison; her assign is now compared with her group-mates'."""
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge, _, others = _rerouted(run)
    _touch_every_other_group(forge, others, fake_assign=True)
    if not starts:
        forge.doc["shuffle_starts_included"] = False
        forge.starts = []
    _saved_and_failing(forge, run, capsys, "roster")


def test_a_summary_only_blame_does_not_exempt_a_group_from_the_nearest_rule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """F1 without the shuffle_starts: a `blamed_unsolicited` in the summary alone (assigns untouched) while
    her group's release holds all its MDAV members' records: the group was sealed, so still compared."""
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge, _, others = _rerouted(run)
    _touch_every_other_group(forge, others, fake_assign=False)
    forge.doc["shuffle_starts_included"] = False
    forge.starts = []
    assert "not the nearest group" in _saved_and_failing(forge, run, capsys, "grouping")


def test_a_mover_split_off_to_a_group_of_colluders_is_caught(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """An honest merge kept, but one of its movers (the victim) assigned and added, as merged, to a later run
    of the farthest group (the collector's colluders), her record released there; the summary calls her
    `blamed_unsolicited` (a blame after the reveal_open needs no statement). Before: exit 0 (her target was
    not counted, being in the summary; any group's run could add any member stated merged anywhere). Now:
    her fellow movers' and her targets differ (`grouping`), and she is in two groups' last runs."""
    run = run_round(tmp_path, **MERGE_ROUND)  # type: ignore[arg-type]
    forge = Forge(run)
    [closing] = [s for s in forge.starts if not s.members and any(r == "merged" for _, r in s.excluded)]
    movers = sorted(key for key, reason in closing.excluded if reason == "merged")
    [merge_run] = [s for s in forge.starts if s.members and set(movers) <= set(s.members)
                   and abs(s.deadline - CONFIG.step_timeout - closing.deadline) < 1e-6]
    near, source, victim = merge_run.group, closing.group, movers[0]
    here = forge.mean(movers)
    far = max({a.group for a in forge.assigns} - {near, source},
              key=lambda g: distance(forge.group(g)[0].centroid, here))
    c_runs = sorted((s for s in forge.starts if s.group == far), key=lambda s: s.run)
    c_members = tuple(sorted(set(c_runs[-1].members) | {victim}))
    forge.starts.append(dataclasses.replace(c_runs[-1], run=c_runs[-1].run + 1, members=c_members, excluded=(),
                                            deadline=merge_run.deadline + 0.5))
    n_members = tuple(sorted(set(merge_run.members) - {victim}))
    move_to(forge, [victim], near, far, n_members, c_members, forge.mean(n_members), forge.mean(c_members))
    forge.doc["exclusions"] = {**forge.doc["exclusions"], sid_of(victim): "blamed_unsolicited"}
    forge.save()
    code, result, _ = verify(run.directory, capsys)
    problems = failed(result)
    assert code == 3 and {"grouping", "exclusion_evidence"} <= set(problems), problems
    assert any("split over groups" in p for p in problems["grouping"])
    assert any("in the last run of group" in p for p in problems["exclusion_evidence"])


@pytest.mark.parametrize(("accept", "reason"), [(True, "not_k_anonymous"), (False, "see https://evil.example"),
                                                (False, "ok")])
def test_a_verdict_that_is_not_accept_ok_or_a_reason_code_fails_verdicts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], accept: bool, reason: str) -> None:
    """Found by a reviewer: the auditor counted an accept stating `not_k_anonymous` as an accept and printed a
    free-text reason verbatim. SPEC §7.3: accept with `ok`, or a complaint with a reason code."""
    from coutil.protocol.messages import Verdict

    run = run_round(tmp_path)
    forge = Forge(run)
    first = forge.decode(forge.doc["verdicts"][0], Verdict)
    odd = dataclasses.replace(first, accept=accept, reason=reason)
    forge.doc["verdicts"][0] = codec.encode(odd, forge.subject[first.sender]._identity).hex()
    text = _saved_and_failing(forge, run, capsys, "verdicts")
    assert "not accept with `ok` or a complaint with a reason code" in text and "evil" not in text


def test_a_reordering_broker_does_not_turn_an_honest_merge_into_a_complaint(tmp_path: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker on the auditor (a broker holding 30 % of the messages back up to 2 s, a tamperer whose
    group merges): a member shown the merged group's run before her new assign asks for her assign; a re-sent copy
    of her old one, overtaken on the way, reached her first, and she took it for the collector's answer and refused
    the run (`run_not_in_group`), a complaint that failed the honest collector. She then took an answer only once
    her fetch waited a re-send interval; since a broker replaying that copy later emptied rounds (`answer-old-assign`,
    tests/adversary), no copy of the assign she holds is an answer: she fetches on until a covering assign comes."""
    config = tmp_path / "reorder.toml"
    config.write_text('[round]\nk = 3\nrandom_records = 50\n[data]\nrows = 36\n[[adversary.subjects]]\n'
                      'strategy = "tamper"\nrows = [4]\n[adversary.broker]\nstrategy = "reorder"\nprobability = 0.3\n')
    for seed in (3, 5, 7):
        out = tmp_path / f"reorder-{seed}"
        main(["simulate", "--config", str(config), "--seed", str(seed), "--out", str(out), "--with-registrations",
              "--json"])
        capsys.readouterr()
        assert main(["verify", str(out)]) == 0, (seed, capsys.readouterr().err[-400:])


@pytest.mark.parametrize("seed", [1, 2])
def test_a_safepub_class_above_2k_minus_1_runs_as_groups_of_mdav_size_that_verify(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A SafePub class has no upper size, and a group's shuffle is sequential in its members with its largest
    message growing with their square: one class of 1,200 members could not run at all (batches above 64 MiB).
    Classes above 2k - 1 are cut into groups of k to 2k - 1 in the cut order (SPEC §9.1), the release keeps each
    class's midpoints and the same records, and the auditor recomputes the cut. Before the cut, one bin for age
    and one for height made all 30 subjects one group of 30 at k = 4."""
    config = dataclasses.replace(SAFEPUB, safepub_bins=(("age", (0.0, 150.0)), ("height", (0.0, 100.0, 300.0))))
    run = run_round(tmp_path, n=30, seed=seed, config=config)
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)
    transcript = read_transcript(run.directory / "transcript.json")
    assert transcript.exclusions == {}
    groups = [subject.group for subject in run.subjects]
    sizes = sorted(groups.count(label) for label in set(groups))
    assert sum(sizes) == 30 and len(sizes) >= 30 // (2 * config.k - 1), sizes
    assert all(config.k <= size <= 2 * config.k - 1 for size in sizes), sizes
    rows = np.loadtxt(run.directory / "release.csv", delimiter=",", skiprows=1, ndmin=2)
    assert rows.shape[0] == 30 and {tuple(r) for r in rows[:, :2].tolist()} <= {(75.0, 50.0), (75.0, 200.0)}
