"""The auditor's `blame_evidence` check: every `blamed_*` exclusion the collector signs is proven by the
signed messages of the run it ended (the transcript's run evidence, replayed with the collector's rules).

Found by an attacker on the auditor (issue 12): a collector that excluded a live honest member as a
deviator (`blamed_tamper`, say) at once passed `coutil verify`, as nothing timed or proved a blame. Now
the library's ``drop-subject`` with a blame as its ``reason`` fails it, and every subject deviation the
collector blames, honestly, is proven (no honest round convicted).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from coutil.adversary import SUBJECT_STRATEGIES
from coutil.cli import main
from coutil.protocol import codec, crypto
from coutil.protocol.collector_groups import proven_exclusions
from coutil.protocol.equivocation import EquivocationEvidence, check_equivocation
from coutil.protocol.messages import Batch, Blame, Message, ShuffleStart, Submit, Vote
from coutil.protocol.shuffle import NO_BATCH, batch_digest, outer_aad
from coutil.protocol.topics import sid_of
from tests.adversary.common import Played, play

#: Subject deviations of the library that an honest collector excludes with a blame.
BLAMED = ("bad-key", "copycat", "early-no-go", "equivocate", "false-complaint", "keys-ahead", "late-no-go", "resubmit",
          "tamper", "unsolicited-blame", "withhold")


def _simulate(tmp_path: Path, name: str, seed: int, adversary: str, rows: int = 36) -> Path:
    out = tmp_path / f"{name}-{seed}"
    config = tmp_path / f"{name}.toml"
    config.write_text(f"[round]\nk = 3\nrandom_records = 50\n[data]\nrows = {rows}\n" + adversary)
    assert main(["simulate", "--config", str(config), "--seed", str(seed), "--out", str(out),
                 "--with-registrations", "--json"]) in (0, 3, 4)
    return out


def _verify(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    capsys.readouterr()
    code = main(["verify", str(path), "--json"])
    result = json.loads(capsys.readouterr().out)
    return code, result, next(c for c in result["checks"] if c["check"] == "blame_evidence")


@pytest.mark.parametrize("strategy", sorted(SUBJECT_STRATEGIES))
def test_no_subject_deviation_convicts_an_honest_collector(
        strategy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every subject strategy of the library against an honest collector: verify passes, and every blame the
    collector signed is proven by its run. `garbage-inner` failed it before (found with this test): the group
    its garbage left below k was suppressed with no signed statement, its members neither released nor
    excluded, which the auditor takes for a collector dropping records; the collector now states the
    suppression (`suppressed`, as after a dropout at the reveal)."""
    for seed in (3, 5):
        out = _simulate(tmp_path, strategy, seed, f'[[adversary.subjects]]\nstrategy = "{strategy}"\nrows = [4]\n')
        transcript = json.loads((out / "transcript.json").read_text())
        reasons = {r for r in transcript["exclusions"].values() if r.startswith("blamed_")}
        assert bool(reasons) == (strategy in BLAMED), (strategy, seed, transcript["exclusions"])
        code, result, check = _verify(out, capsys)
        assert code == 0, (strategy, seed, result["first_problem"])
        assert check["status"] == "pass", check
        if strategy in BLAMED:
            assert "each proven by the signed messages" in check["notes"][0], check


def test_garbage_in_a_group_above_k_suppresses_it_with_a_statement(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker on the auditor: garbage inner layers in a group of four (k = 3) left three records,
    which were released; the auditor saw four live members and three records (`membership`: one dropped without
    an exclusion) and failed the honest collector. Any item that does not open now suppresses its group, stated."""
    plan = '[[adversary.subjects]]\nstrategy = "garbage-inner"\nrows = [4]\n'
    for seed in (3, 5):
        out = _simulate(tmp_path, "garbage-37", seed, plan, rows=37)
        exclusions = json.loads((out / "transcript.json").read_text())["exclusions"]
        assert set(exclusions.values()) == {"suppressed"} and len(exclusions) >= 3, exclusions
        code, result, _ = _verify(out, capsys)
        assert code == 0, (seed, result["first_problem"])


@pytest.mark.parametrize("reason", ["blamed_tamper", "blamed_unsolicited", "blamed_split_view", "blamed_equivocation"])
def test_a_false_blame_of_a_live_member_is_caught(reason: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """drop-subject with a blame: the victim, live and honest, is excluded as a deviator once her run has
    every member's keys. Before, verify passed it (no check timed or proved a blame)."""
    for seed in (3, 5, 7):
        out = _simulate(tmp_path, reason, seed,
                        f'[adversary.collector]\nstrategy = "drop-subject"\nreason = "{reason}"\n')
        report = json.loads((out / "report.json").read_text())
        [entry] = report["adversary"]["deviants"]
        assert entry["strategy"] == "drop-subject" and entry["deviated"], entry
        # The simulation's own auditor view (report.json) says the same, from the collector's run evidence.
        assert entry["detected_by"] == ["auditor"] and entry["auditor"] == {"blame_not_proven": 1}, entry
        victim = [sid for sid, r in json.loads((out / "transcript.json").read_text())["exclusions"].items()
                  if r == reason]
        assert len(victim) == 1
        code, _, check = _verify(out, capsys)
        assert code == 3 and check["status"] == "fail", (seed, check)
        [problem] = check["problems"]
        assert victim[0] in problem and f"({reason})" in problem and "a false blame" in problem, problem


def test_evidence_without_the_blames_proves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The replay needs the run's messages: with the members' blames (their outer secrets, which re-execution
    needs) left out of the evidence the tamperer's exclusion is not proven; an envelope altered is a bad
    signature; no evidence of the run at all is a blame with nothing to show; a transcript without run
    evidence fails, its announce committing to it (SPEC §8.5: withheld, a downgrade; an older coutil's round,
    announced without the commitment, skips the check: tests/verify/test_verify_forgeries.py)."""
    out = _simulate(tmp_path, "tamper", 3, '[[adversary.subjects]]\nstrategy = "tamper"\nrows = [4]\n')
    path = out / "transcript.json"
    honest = json.loads(path.read_text())
    [entry] = honest["run_evidence"]

    def forged(envelopes: list[str] | None, included: bool = True) -> dict[str, Any]:
        doc = json.loads(json.dumps(honest))
        doc["run_evidence"] = [] if envelopes is None else [{**entry, "envelopes": envelopes}]
        doc["run_evidence_included"] = included
        path.write_text(json.dumps(doc))
        return _verify(out, capsys)[2]

    kept = [e for e in entry["envelopes"] if not isinstance(codec.decode(bytes.fromhex(e)).message, Blame)]
    assert len(kept) < len(entry["envelopes"])
    check = forged(kept)
    assert check["status"] == "fail" and "do not prove (a false blame)" in check["problems"][0], check
    altered = [*entry["envelopes"]]
    altered[-1] = altered[-1][:-2] + ("00" if altered[-1][-2:] != "00" else "01")
    check = forged(altered)
    assert check["status"] == "fail" and "bad_signature" in check["problems"][0], check
    check = forged(None)
    assert check["status"] == "fail" and "holds no evidence of run 0" in check["problems"][0], check
    check = forged(None, included=False)
    assert check["status"] == "fail" and "withheld (a downgrade)" in check["problems"][0], check
    path.write_text(json.dumps(honest))
    assert _verify(out, capsys)[0] == 0


@pytest.mark.parametrize("entry", [
    {"group": -1, "run": 0, "envelopes": []}, {"group": 0, "envelopes": []}, {"group": 0, "run": 0, "envelopes": "x"},
    {"group": 0, "run": 0, "envelopes": ["zz"]}, [1, 2],
])
def test_malformed_run_evidence_is_a_one_line_error(entry: object, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = _simulate(tmp_path, "honest", 3, "")
    path = out / "transcript.json"
    doc = json.loads(path.read_text())
    doc["run_evidence"] = [entry]
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "run_evidence" in err and len(err.strip().splitlines()) == 1, err


def _false_complaint_evidence() -> tuple[Played, ShuffleStart, list[tuple[Message, bytes]], bytes, bytes]:
    """A round with a false-complaint member: its one run of blames, with the start, the evidence as the collector
    keeps it (what the transcript exports), the announce digest and the roster root."""
    p = play({"subjects": [{"strategy": "false-complaint", "rows": [4]}]}, seed=3)
    collector = p.round.collector
    [envelopes] = collector.run_evidence().values()
    messages = [(codec.decode(e).message, e) for e in envelopes]
    start = next(m for m, _ in messages if isinstance(m, ShuffleStart))
    honest = proven_exclusions(start, messages, collector.announce_digest, collector.roster_root, {})
    [(complainer, reasons)] = honest.items()
    assert reasons == {"blamed_false_complaint"} and p.excluded() == {sid_of(complainer): "blamed_false_complaint"}
    return p, start, messages, collector.announce_digest, collector.roster_root


def test_a_batch_left_out_of_the_evidence_frames_nobody() -> None:
    """SPEC §3, the false-blame row (was a limit): a member votes no-go falsely, every member blames; the honest
    evidence proves her `blamed_false_complaint`. With an honest mixer's batch and every later one left out (and
    the go votes), re-execution named that mixer (batch withheld), so a collector colluding with the no-go voter
    could sign that and pass. Now each blame carries the batches its author took (her input, the final batch) and
    states the digest of the one she published: left out, they come back with the blames, and the replay proves
    what the honest evidence proves."""
    _, start, messages, announce_digest, root = _false_complaint_evidence()
    complainer = next(m.sender for m, _ in messages if isinstance(m, Vote) and not m.go)
    g = len(start.members)
    blames = [m for m, _ in messages if isinstance(m, Blame)]
    assert len(blames) == g and all(b.batch_digest != NO_BATCH for b in blames)
    assert sum(len(b.taken) for b in blames) >= g - 1  # an input each but mixer 1's (and the final batch)
    honest = proven_exclusions(start, messages, announce_digest, root, {})
    assert honest == {complainer: {"blamed_false_complaint"}}
    for position in range(g):
        kept = [(m, e) for m, e in messages if not (isinstance(m, Batch) and m.step > position) and not (
            isinstance(m, Vote) and m.go)]
        assert proven_exclusions(start, kept, announce_digest, root, {}) == honest, position


@pytest.mark.parametrize("seed", [3, 8])
def test_a_tamperer_colluding_with_the_collector_cannot_leave_her_batch_out(seed: int) -> None:
    """A tamperer's batch left out of the evidence, her blame stating she never mixed (she colludes): the batches
    the other blames carry bring it back, and the replay proves her deviation, nobody else's. With blames carrying
    nothing, the same evidence named honest members: the next mixer (a batch mixed from nothing) or, for the final
    step, the honest no-go voters."""
    p = play({"subjects": [{"strategy": "tamper", "rows": [4]}]}, seed=seed)
    collector = p.round.collector
    [envelopes] = collector.run_evidence().values()
    messages = [(codec.decode(e).message, e) for e in envelopes]
    start = next(m for m, _ in messages if isinstance(m, ShuffleStart))
    args = (collector.announce_digest, collector.roster_root, {})
    [tamperer] = [m for m, reasons in proven_exclusions(start, messages, *args).items() if "blamed_tamper" in reasons]
    step = start.members.index(tamperer) + 1

    def colluding(m: Message) -> Message:
        return dataclasses.replace(m, batch_digest=NO_BATCH) if isinstance(m, Blame) and m.sender == tamperer else m

    kept = [(colluding(m), e) for m, e in messages if not (isinstance(m, Batch) and m.step == step)]
    assert set(proven_exclusions(start, kept, *args)) == {tamperer}
    bare = [(dataclasses.replace(m, taken=()), e) if isinstance(m, Blame) else (m, e) for m, e in kept]
    framed = proven_exclusions(start, bare, *args)
    assert framed and tamperer not in framed, framed


@pytest.mark.parametrize(("seed", "row"), [(3, 4), (8, 5), (13, 4)])
def test_a_second_batch_of_a_colluder_in_the_evidence_does_not_frame_the_next_mixer(seed: int, row: int) -> None:
    """Found by an attacker on this check: a false complainer (not the last mixer) signs a second batch of her step
    under another permutation, and a blame stating it; the collector's evidence holds them in place of the real
    ones. The next mixer's blame carries the real batch, rejected as her equivocation; the replay then re-executed
    the run without it and proved the next mixer `blamed_tamper` (6 of 6 cases). A run in which something was
    rejected is never re-executed (the collector ends it at the first proven deviation)."""
    p = play({"subjects": [{"strategy": "false-complaint", "rows": [row]}]}, seed=seed)
    collector = p.round.collector
    [((group, run), envelopes)] = collector.run_evidence().items()
    messages = [(codec.decode(e).message, e) for e in envelopes]
    start = next(m for m, _ in messages if isinstance(m, ShuffleStart))
    mallory = next(m.sender for m, _ in messages if isinstance(m, Vote) and not m.go)
    step = start.members.index(mallory) + 1
    assert step < len(start.members)
    identity = next(x for x in p.round.subjects if x.public_key == mallory)._identity
    blame = next(m for m, _ in messages if isinstance(m, Blame) and m.sender == mallory)
    real = next(m for m, _ in messages if isinstance(m, Batch) and m.step == step)
    assert isinstance(blame, Blame) and isinstance(real, Batch)
    if step == 1:
        onions = {m.sender: m.onion for m, _ in messages if isinstance(m, Submit)}
        inputs = [onions[k] for k in start.members]
    else:
        inputs = list(next(m.items for m, _ in messages if isinstance(m, Batch) and m.step == step - 1))
    key = crypto.KxKey.from_secret(blame.outer_secret)
    peeled = [crypto.peel(key, item, outer_aad(collector.round_id, group, run, step)) for item in inputs]
    other = blame.permutation[1:] + blame.permutation[:1]
    second = dataclasses.replace(real, items=tuple(peeled[i] for i in other))
    restated = dataclasses.replace(blame, permutation=other, batch_digest=batch_digest(second.items))
    forged = [(second, codec.encode(second, identity)) if m is real else
              (restated, codec.encode(restated, identity)) if m is blame else (m, e) for m, e in messages]
    proven = proven_exclusions(start, forged, collector.announce_digest, collector.roster_root, {})
    assert proven == {mallory: {"blamed_equivocation"}}, proven


@pytest.mark.parametrize("seed", [3, 8])
def test_a_no_go_shown_to_one_member_after_the_reveal_open_convicts_its_voter(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker on the blames that carry votes: a member votes go and signs a no-go towards one fellow,
    and a colluding broker hands that fellow the no-go in place of her go vote, late, so that the fellow's blame
    reaches the collector after its reveal_open. The collector took no notice of what the blame carried (REJECT
    `unjustified_blame`); the fellow, who withholds her reveal, was excluded `silent`, the group suppressed and the
    voter only `suppressed`. Now the blame's no-go beside her kept go vote excludes the voter
    `blamed_equivocation` in the suppression's signed statement, and the auditor's replay proves it."""
    plan = ('[[adversary.subjects]]\nstrategy = "direct-no-go"\nrows = [4]\n'
            '[adversary.broker]\nstrategy = "swap-vote"\ndelay = 3.0\n')
    out = _simulate(tmp_path, "swap-vote", seed, plan)
    transcript = json.loads((out / "transcript.json").read_text())
    blamed = {sid: r for sid, r in transcript["exclusions"].items() if r.startswith("blamed_")}
    assert list(blamed.values()) == ["blamed_equivocation"], transcript["exclusions"]
    # The fellow who blamed withholds her reveal for it: `suppressed` with the others, not `silent` (was).
    others = {r for r in transcript["exclusions"].values() if not r.startswith("blamed_")}
    assert others == {"suppressed"}, transcript["exclusions"]
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)


TWO_FINALS = ('[[adversary.subjects]]\nstrategy = "two-finals"\nrows = [4]\n'
              '[adversary.broker]\nstrategy = "split-final"\nvictim = 4\n')


@pytest.mark.parametrize("relay", ["keep", "drop"])
@pytest.mark.parametrize("seed", [3, 8])
def test_two_final_batches_split_by_a_broker_convict_the_final_mixer(
        seed: int, relay: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC §3 (was a limit, found by an attacker on the blames): the final mixer signs two final batches and a
    colluding broker gives the collector one and the members the other. The members voted go on theirs, the
    collector's group was never ready (no vote no-go, nobody missing), its deadline kept moving and the reveal
    barrier held every group: nothing released, nobody excluded. Now a run whose votes name another final batch
    than the collector's is relayed; a member holding two final batches of the mixer blames with both (no no-go
    vote), which proves the mixer's `blamed_equivocation`; the round completes without her, no honest member is
    excluded, and `coutil verify` proves the blame. With the relay kept from the members too (``relay = "drop"``,
    found by an attacker on the fix: 5 honest members excluded `silent`, the mixer kept), the mixer's go vote naming
    another final batch than the one she signed for them is the proof their blame carries (an honest final mixer
    votes on her own batch)."""
    out = _simulate(tmp_path, "two-finals", seed, TWO_FINALS + f'relay = "{relay}"\n')
    report = json.loads((out / "report.json").read_text())
    adversary = report["adversary"]
    [subject] = [e for e in adversary["deviants"] if e["role"] == "subject"]
    [broker] = [e for e in adversary["deviants"] if e["role"] == "broker"]
    assert subject["deviated"] and broker["deviated"], (subject, broker)
    transcript = json.loads((out / "transcript.json").read_text())
    assert transcript["exclusions"] == {subject["node"]: "blamed_equivocation"}, transcript["exclusions"]
    assert adversary["honest_excluded"] == {}
    assert report["completed"] and report["released_rows"] == 35 and report["accepted"] == 35, report
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)
    assert "1 `blamed_*` exclusion(s), each proven" in check["notes"][0], check


@pytest.mark.parametrize("seed", [3, 8])
def test_a_second_final_batch_shown_just_before_the_reveal_open_convicts_the_final_mixer(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Found by an attacker on the fix above: the broker holds the second final batch and shows it to one fellow just
    before the reveal_open, so that her blame (two final batches) reaches the collector after it. The collector
    names the final mixer `blamed_equivocation` in the suppression's statement (`late_equivocation`); the blamer,
    who withholds her reveal for it, is excluded `suppressed` with the others (was `silent`), never
    `blamed_unsolicited`. The mixer,
    who had revealed, complains `excluded_after_reveal`: that failed the honest collector in verify (exit 3); a
    closing statement's proven blame now explains it."""
    plan = TWO_FINALS.replace('"split-final"', '"late-final"')
    out = _simulate(tmp_path, "late-final", seed, plan)
    report = json.loads((out / "report.json").read_text())
    [subject] = [e for e in report["adversary"]["deviants"] if e["role"] == "subject"]
    exclusions = json.loads((out / "transcript.json").read_text())["exclusions"]
    assert exclusions[subject["node"]] == "blamed_equivocation", exclusions
    others = [reason for sid, reason in exclusions.items() if sid != subject["node"]]
    assert set(others) == {"suppressed"}, exclusions
    assert report["completed"] and report["released_rows"] == 36 - len(exclusions)
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)
    complaints = next(c for c in result["checks"] if c["check"] == "complaints")
    assert complaints["status"] == "pass" and any("excluded_after_reveal" in n for n in complaints["notes"]), complaints


def test_a_go_vote_kept_instead_of_her_no_go_convicts_the_voter_not_the_blamers() -> None:
    """SPEC §3, the false-blame row (was a limit, found by an attacker): the colluding member signs a no-go vote
    and a go vote; the collector keeps her go vote, so the evidence showed blames with every vote go and the honest
    blamers `blamed_unsolicited`. Each blame now carries the signed no-go vote it answers: the replay sees her two
    votes (her equivocation) and no unsolicited blame. A blame carrying no no-go vote is still unsolicited."""
    p, start, messages, announce_digest, root = _false_complaint_evidence()
    [(no_go, no_go_envelope)] = [(m, e) for m, e in messages if isinstance(m, Vote) and not m.go]
    final = next(m for m, _ in messages if isinstance(m, Batch) and m.step == len(start.members))
    go = dataclasses.replace(no_go, go=True, final_digest=batch_digest(final.items))
    voter = next(s for s in p.round.subjects if s.public_key == no_go.sender)
    swapped = [(go, codec.encode(go, voter._identity)) if e == no_go_envelope else (m, e) for m, e in messages]
    # (Her no-go may also prove her false complaint: a blame carrying it can reach the collector before her vote.)
    proven = proven_exclusions(start, swapped, announce_digest, root, {})
    assert list(proven) == [no_go.sender] and "blamed_equivocation" in proven[no_go.sender], proven
    blames = [(m, e) for m, e in messages if isinstance(m, Blame)]
    assert blames and all(m.no_go_vote == no_go_envelope for m, _ in blames if isinstance(m, Blame))
    # Stripped of the vote (re-signed by its author): that blame proves her unsolicited, and nothing else holds.
    blame, envelope = next((m, e) for m, e in blames if m.sender != no_go.sender)
    assert isinstance(blame, Blame)
    author = next(s for s in p.round.subjects if s.public_key == blame.sender)
    bare = dataclasses.replace(blame, no_go_vote=b"")
    stripped = [(bare, codec.encode(bare, author._identity)) if e == envelope else (m, e) for m, e in swapped]
    proven = proven_exclusions(start, stripped, announce_digest, root, {})
    assert set(proven) == {no_go.sender, blame.sender} and proven[blame.sender] == {"blamed_unsolicited"}, proven


def test_a_run_shown_to_one_member_alone_is_proven_by_her_two_starts(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """lure-run (found by an attacker on the auditor): the victim answers a next run shown to her alone, and the
    collector's own rule excludes her `blamed_equivocation` with her answer as the proof, which the replay
    accepts. The real next run, which excludes her, reaches her too: two different signed shuffle_starts of
    one run, her proof of equivocation (evidence.json). Even with its lure left out of the transcript (a
    collector exporting only its honest messages: then every transcript check passes), verify fails on it."""
    for seed in (3, 5, 7):
        out = _simulate(tmp_path, "lure", seed, '[adversary.collector]\nstrategy = "lure-run"\n')
        [entry] = json.loads((out / "report.json").read_text())["adversary"]["deviants"]
        assert entry["deviated"] and entry["equivocation_proofs"] == 1 and entry["public"], entry
        path = out / "transcript.json"
        doc = json.loads(path.read_text())
        assert list(doc["exclusions"].values()) == ["blamed_equivocation"]
        runs: dict[tuple[int, int], list[str]] = {}
        for envelope in doc["shuffle_starts"]:
            start = codec.decode(bytes.fromhex(envelope)).message
            assert isinstance(start, ShuffleStart)
            runs.setdefault((start.group, start.run), []).append(envelope)
        [lure] = [envelopes[0] for envelopes in runs.values() if len(envelopes) == 2]
        doc["shuffle_starts"] = [e for e in doc["shuffle_starts"] if e != lure]
        path.write_text(json.dumps(doc))
        code, result, check = _verify(out, capsys)
        # (The edit also breaks the collector's signature of the transcript: a forging collector signs again.)
        failed = {c["check"]: c["problems"] for c in result["checks"]
                  if c["status"] == "fail" and c["check"] != "transcript_signature"}
        assert code == 3 and list(failed) == ["equivocation"], failed
        assert "two different shuffle_starts of group" in failed["equivocation"][0]
        assert check["status"] == "pass"  # her answer alone proves what the collector says


def test_two_shuffle_starts_prove_equivocation_only_when_they_differ_for_one_run(tmp_path: Path) -> None:
    out = _simulate(tmp_path, "lure", 3, '[adversary.collector]\nstrategy = "lure-run"\n')
    doc = json.loads((out / "transcript.json").read_text())
    announce, roster = bytes.fromhex(doc["announce"]), bytes.fromhex(doc["roster"])
    starts = [bytes.fromhex(e) for e in doc["shuffle_starts"]]
    by_run: dict[tuple[int, int], list[bytes]] = {}
    for envelope in starts:
        start = codec.decode(envelope).message
        assert isinstance(start, ShuffleStart)
        by_run.setdefault((start.group, start.run), []).append(envelope)
    [pair] = [e for e in by_run.values() if len(e) == 2]
    other = next(e[0] for e in by_run.values() if len(e) == 1)
    assert "two different shuffle_starts" in check_equivocation(EquivocationEvidence(announce, *pair)).statement
    same = EquivocationEvidence(announce, pair[0], pair[0])
    assert "the same shuffle_start twice" in check_equivocation(same).problem
    assert "two different runs" in check_equivocation(EquivocationEvidence(announce, pair[0], other)).problem
    assert "another kind" in check_equivocation(EquivocationEvidence(announce, pair[0], roster)).problem


#: A member re-sending a second submission with her blame, and a broker hiding her first one from the collector.
RESUBMIT = ('[[adversary.subjects]]\nstrategy = "resubmit"\nrows = [4]\n'
            '[adversary.broker]\nstrategy = "hide-first-submit"\nvictim = 4\n')


def _resubmit_round(tmp_path: Path, seed: int) -> tuple[Path, str, dict[str, str], dict[str, Any]]:
    """The round of `RESUBMIT`: its directory, the resubmitter's sid, the exclusions and the report's adversary."""
    out = _simulate(tmp_path, "resubmit", seed, RESUBMIT)
    adversary = json.loads((out / "report.json").read_text())["adversary"]
    [subject] = [e for e in adversary["deviants"] if e["role"] == "subject"]
    [broker] = [e for e in adversary["deviants"] if e["role"] == "broker"]
    assert subject["deviated"] and broker["deviated"], (subject, broker)
    exclusions = json.loads((out / "transcript.json").read_text())["exclusions"]
    return out, str(subject["node"]), exclusions, adversary


@pytest.mark.parametrize("seed", [3, 8])
def test_a_second_submission_re_sent_with_a_blame_convicts_its_signer_not_mixer_1(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SPEC §3 (was a limit, found by an attacker on the blames): a member votes no-go and re-sends with her blame a
    second signed submission of her sealed item under a new onion, a colluding broker having kept her first one,
    which mixer 1 mixed, from the collector. Re-execution from the submissions the collector held named the honest
    mixer 1 `blamed_tamper` (the test below), and the auditor's replay agreed. Mixer 1's blame now carries the
    submissions she mixed: the two submissions are the member's `blamed_equivocation`, nothing is re-executed, no
    honest member is excluded, the round completes, and `coutil verify` proves the blame."""
    out, resubmitter, exclusions, adversary = _resubmit_round(tmp_path, seed)
    assert exclusions == {resubmitter: "blamed_equivocation"}, exclusions
    assert adversary["honest_excluded"] == {}
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)
    assert "1 `blamed_*` exclusion(s), each proven" in check["notes"][0], check


def test_with_mixer_1_carrying_no_submission_the_honest_mixer_1_is_framed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with blames carrying no submission (the rule before), the resubmitter stays and
    every run she deviates in excludes its honest mixer 1 `blamed_tamper`, which the auditor's replay proves."""
    from coutil.protocol.subject_core import SubjectRun

    monkeypatch.setattr(SubjectRun, "taken_envelopes",
                        lambda self: tuple(self.taken[key] for key in sorted(self.taken) if key[0] > 0))
    out, resubmitter, exclusions, adversary = _resubmit_round(tmp_path, 3)
    assert resubmitter not in exclusions
    assert set(exclusions.values()) == {"blamed_tamper"} and adversary["honest_excluded"] == {"blamed_tamper": 4}
    code, result, check = _verify(out, capsys)
    assert code == 0 and check["status"] == "pass", (result["first_problem"], check)


def test_a_blame_carrying_submissions_it_did_not_mix_is_unsolicited() -> None:
    """Thinking as the attacker on mixer 1's blame carrying submissions: a blame may carry a submission only as mixer
    1's, one per member, at most g + 2 messages in all (g + 1, and a second final batch of its mixer); any other such
    blame (re-signed by its author) is her own `blamed_unsolicited`, and frames nobody else. The honest evidence
    proves the false complaint alone."""
    p, start, messages, announce_digest, root = _false_complaint_evidence()
    g = len(start.members)
    submits = [e for m, e in messages if isinstance(m, Submit)]
    blames = {m.sender: (m, e) for m, e in messages if isinstance(m, Blame)}
    mixer_1, mixer_2 = start.members[0], start.members[1]
    assert len(blames[mixer_1][0].taken) == g + 1  # every submission and the final batch

    def forged(author: bytes, taken: tuple[bytes, ...]) -> dict[bytes, set[str]]:
        blame, envelope = blames[author]
        assert isinstance(blame, Blame)
        other = dataclasses.replace(blame, taken=taken)
        identity = next(s for s in p.round.subjects if s.public_key == author)._identity
        kept = [(other, codec.encode(other, identity)) if e == envelope else (m, e) for m, e in messages]
        return proven_exclusions(start, kept, announce_digest, root, {})

    first = blames[mixer_1][0]
    second = blames[mixer_2][0]
    assert isinstance(first, Blame) and isinstance(second, Blame)
    for author, taken in ((mixer_2, (*second.taken, submits[0])),  # not mixer 1
                          (mixer_1, (submits[0], *first.taken)),  # one member's submission twice
                          (mixer_1, (*first.taken, *second.taken))):  # more than g + 2
        proven = forged(author, taken)
        assert proven.get(author) == {"blamed_unsolicited"}, proven


def test_a_blame_carried_messages_are_verified_once_however_often_it_is_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A blame is checked up to three times as the collector takes it (observed, its carried messages taken, the
    late check) and twice by the replay, each check verifying up to g + 2 signatures: at k = 400 a re-sent blame of
    mixer 1 cost the collector about 120 ms (found by a reviewer). The last check is kept with the members it was
    made against, so the replay verifies each carried message once; a refused blame is refused again, unverified."""
    from coutil.protocol import collector_groups

    _, start, messages, announce_digest, root = _false_complaint_evidence()
    blames = [m for m, _ in messages if isinstance(m, Blame)]
    carried = sum(len(b.taken) + bool(b.no_go_vote) for b in blames)
    decoded: list[bytes] = []
    real = codec.decode

    def counting(envelope: bytes, *args: Any, **kwargs: Any) -> codec.Decoded:
        decoded.append(envelope)
        return real(envelope, *args, **kwargs)

    monkeypatch.setattr(collector_groups.codec, "decode", counting)
    honest = proven_exclusions(start, messages, announce_digest, root, {})
    assert len(honest) == 1 and carried > 0
    assert len(decoded) == carried, (len(decoded), carried)
    # Refused (a carried vote of another run): the memo answers the second check with the same refusal.
    group = collector_groups.GroupState(start.group, start.members, (), start.deadline)
    group.new_run(start.round_id, announce_digest, start.sender, start.excluded, start.deadline)
    blame = next(b for b in blames if b.no_go_vote)
    bad = dataclasses.replace(blame, no_go_vote=blame.taken[0] if blame.taken else b"x")
    refusals = []
    for _ in range(2):
        with pytest.raises(collector_groups.RemoteProtocolError) as info:
            group.blame_carried(bad)
        refusals.append(info.value.reason)
    assert refusals == ["unjustified_blame"] * 2
    decoded.clear()
    assert group.blame_carried(blame) == group.blame_carried(blame) and len(decoded) == len(blame.taken) + 1
