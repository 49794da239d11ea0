"""Every broker strategy of `coutil.adversary.broker` on the in-memory bus, over several seeds (SPEC §3,
"broker operator").

A broker signs nothing: whatever it replays, copies or substitutes is IGNOREd or REJECTed with a counted
reason (``wrong_round``, ``late``, ``stale_run``, ``duplicate``, ``bad_signature``, ...) and the round
releases exactly what the same round releases through an honest broker; what it drops costs liveness
only (its victim is excluded as ``silent`` when she truly cannot be reached, or recovers); it attributes
no honest record (its leak is measured: every payload it carried is searched for every honest record).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from coutil.adversary import BROKER_STRATEGIES, broker_strategy
from coutil.adversary.outcome import plaintext_hits
from coutil.adversary.plan import parse_adversary
from coutil.cli import main
from coutil.errors import InputError
from coutil.protocol.collector import CollectorNode
from coutil.protocol.crypto import encode_record
from coutil.protocol.node import SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.sdc.mdav import mdav
from tests.adversary.common import CONFIG, ROUND_FILE, SEEDS, Played, play

VICTIM = 2
#: What a replay of another round may get: ignored as another round's, or its announce as too late.
ROUND_REPLAY_REASONS = {"wrong_round", "late"}
#: What a replay of an earlier run may get: ignored as over (or for another group, after a merge), or
#: rejected when its sender is no member of the current run (the member excluded in between).
RUN_REPLAY_REASONS = {"stale_run", "wrong_group", "early", "unexpected", "own_message", "duplicate", "not_a_member"}


def broker_entry(p: Played) -> dict[str, Any]:
    (entry,) = p.entries("broker")
    return entry


@functools.cache
def _honest(seed: int, subjects: str) -> Played:
    return play({"subjects": json.loads(subjects)}, seed=seed)


def honest(seed: int, subjects: list[dict[str, Any]] | None = None) -> Played:
    """The same round (seed, data, deviating subjects) through an honest broker."""
    return _honest(seed, json.dumps(subjects or []))


def same_release(p: Played, q: Played) -> bool:
    a, b = p.outcome, q.outcome
    return bool(np.array_equal(a.rows, b.rows)) and list(a.group_ids) == list(b.group_ids) \
        and list(a.group_sizes) == list(b.group_sizes)


def assert_defeated(p: Played, baseline: Played) -> None:
    """The release and the exclusions are those of the honest-broker round; every honest verdict accepts."""
    assert p.outcome.completed, p.outcome.phase
    assert same_release(p, baseline)
    assert p.excluded() == baseline.excluded()
    verdicts = p.verdicts()
    assert all(verdicts[p.sid(r)]["accept"] is True for r in p.honest_rows)
    assert len(verdicts) == len(baseline.verdicts())
    entry = broker_entry(p)
    assert entry["deviated"] and entry["leak"] == [] and entry["release_discloses"] == 0
    assert entry["leak_measure"]["payloads_searched"] > 0 and not entry["leak_measure"]["sampled"]


def test_every_broker_strategy_is_registered_with_its_class() -> None:
    assert set(BROKER_STRATEGIES) == {"replay-runs", "replay-round", "replay-pre-merge", "drop-victim", "duplicate",
                                      "reorder",
                                      "split-retained", "split-keys", "hide-submits",
                                      "split-announce", "swap-vote", "hide-first-submit", "split-final",
                                      "late-final", "answer-old-assign"}
    for name in BROKER_STRATEGIES:
        assert name == broker_strategy(name).NAME


@pytest.mark.parametrize("seed", SEEDS)
def test_a_replay_of_an_earlier_round_is_ignored_as_another_rounds_and_changes_nothing(seed: int) -> None:
    """The collector's previous round (same key, another round id), every publication of it injected
    into this round at the same phase, on this round's topics and the same row's subject's."""
    p = play({"broker": "replay-round"}, seed=seed)
    assert_defeated(p, honest(seed))
    entry = broker_entry(p)
    # Every phase of the earlier round was replayed ...
    assert {"announce", "register", "register_ack", "roster", "assign", "shuffle_start", "run_keys", "submit",
            "batch", "vote", "reveal_open", "reveal", "group_done", "release", "verdict", "verdict_ack",
            "withdrawn"} <= set(entry["made_by_kind"])
    # ... and nothing of it was taken: ignored as another round's (the announce: after its deadline).
    assert entry["accepted_by_kind"] == {}
    assert set(entry["received"]) <= ROUND_REPLAY_REASONS
    assert entry["received"]["wrong_round"] > 100 and entry["received"]["late"] > 0
    assert not entry["detected"]  # IGNOREs, not REJECTs: defeated, silently
    assert p.round.report.rejections["wrong_round"] == entry["received"]["wrong_round"]


def test_without_the_round_id_check_the_replayed_round_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the subjects' round-id check (SPEC §7.2 step 7) disabled, they take
    the earlier round's roster and the round is lost."""
    monkeypatch.setattr(SubjectNode, "_of_another_round", lambda self, message: False)
    p = play({"broker": "replay-round"}, seed=SEEDS[0])
    entry = broker_entry(p)
    assert entry["accepted_by_kind"].get("roster", 0) > 0
    assert not same_release(p, honest(SEEDS[0]))
    assert p.section["honest_accepting"] < p.data.n


def test_without_the_collectors_round_id_check_the_topic_check_still_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth at the collector: a replayed subject message, re-addressed to a subject of this
    round, is on a topic that is not its (old) sender's."""
    monkeypatch.setattr(CollectorNode, "_of_another_round", lambda self, message: False)
    p = play({"broker": "replay-round"}, seed=SEEDS[0])
    assert_defeated(p, honest(SEEDS[0]))
    assert broker_entry(p)["received"]["topic_mismatch"] > 0


@pytest.mark.parametrize("seed", SEEDS)
def test_a_replay_of_earlier_runs_is_ignored_as_stale_and_changes_nothing(seed: int) -> None:
    """A tamperer makes her group run again; the broker replays every message of run 0 into every phase
    of run 1. Disabling the ``stale_run`` checks (once, by hand) broke this test: honest members were
    excluded ``blamed_split_view`` and no verdict accepted."""
    subjects = [{"strategy": "tamper", "rows": [seed % 7]}]
    p = play({"broker": "replay-runs", "subjects": subjects}, seed=seed)
    assert_defeated(p, honest(seed, subjects))
    entry = broker_entry(p)
    assert entry["actions"]["injected"] > 0 and {"run_keys", "submit", "vote", "blame"} <= set(entry["made_by_kind"])
    assert entry["accepted_by_kind"] == {}
    assert set(entry["received"]) <= RUN_REPLAY_REASONS and entry["received"]["stale_run"] > 50
    # A REJECT is only ever ``not_a_member``: the replayed messages of the member excluded since.
    assert entry["rejected"] == entry["received"].get("not_a_member", 0)


def _in_a_group_of_k(seed: int) -> int:
    """A row whose MDAV group has exactly k members: silent, she makes it merge."""
    data = play({}, seed=seed).data
    groups = mdav(data.select(list(CONFIG.qi)).values, CONFIG.k).groups
    sizes = Counter(int(g) for g in groups)
    return next(r for r in range(data.n) if sizes[int(groups[r])] == CONFIG.k)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("mode", ["start", "assign", "assign-after-reveal"])
def test_a_replay_of_what_came_before_a_merge_is_ignored_as_stale_and_changes_nothing(mode: str, seed: int) -> None:
    """A dropout makes her group merge into the nearest one; the broker re-delivers that group's collector
    messages from before the merge (found by an attacker). Before the fix, in 3 of 3 seeds: the movers took
    the old shuffle_start (without them) and were excluded `silent` (27 of 29 rows released); members took
    their old assign as a new merge and excluded each other (2 to 30 `silent`, one round released nothing);
    after a reveal they complained `regroup_after_reveal` against an honest collector."""
    subjects = [{"strategy": "silent", "rows": [_in_a_group_of_k(seed)]}]
    p = play({"broker": {"strategy": "replay-pre-merge", "mode": mode}, "subjects": subjects}, seed=seed)
    assert_defeated(p, honest(seed, subjects))
    entry = broker_entry(p)
    assert entry["made_by_kind"] and entry["accepted_by_kind"] == {}
    assert set(entry["received"]) == {"stale_run"}


@pytest.mark.parametrize("seed", SEEDS)
def test_an_old_assign_replayed_while_the_merges_assign_is_held_changes_nothing(seed: int) -> None:
    """`answer-old-assign`: a dropout makes her group merge; the broker holds the new assign of each member of the
    target group 4 s (less than a step) and replays her own pre-merge assign 2.5 s after the merge, a re-send
    interval after she asked for hers (the merged run names members her assign does not). A copy of the assign she
    holds is no answer to her fetch (a broker replays it at will): IGNORE ``duplicate``; she joins the merged run once
    its assign comes. Before (the test below), in 3 of 3 seeds, every target member refused it (`run_not_in_group`),
    was excluded `silent`, and the merges that followed emptied the round: 28 of 30 `silent`, nothing released."""
    subjects = [{"strategy": "silent", "rows": [_in_a_group_of_k(seed)]}]
    p = play({"broker": "answer-old-assign", "subjects": subjects}, seed=seed)
    assert_defeated(p, honest(seed, subjects))
    entry = broker_entry(p)
    assert entry["made_by_kind"] == {"assign": entry["actions"]["injected"]} and entry["actions"]["delayed"] > 0
    assert entry["accepted_by_kind"] == {} and set(entry["received"]) == {"duplicate"}


def test_with_a_copy_of_her_assign_taken_for_the_answer_the_merges_empty_the_round(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the rule before the fix (her current assign again, once she asked for hers, taken
    for the collector's answer that it does not cover the run), the replays are taken and the round is lost."""
    original = SubjectNode._on_assign

    def old_rule(self: SubjectNode, message: Any, digest: bytes, now: float) -> Any:
        pending = self._pending_start
        if pending is not None and message.group == self._group and message.members == self._assigned \
                and self._resend.pending(("fetch", "assign")):
            self._resend.cancel(("fetch", "assign"))
            return self._refuse(pending.group, pending.run, "run_not_in_group", now)
        return original(self, message, digest, now)

    monkeypatch.setattr(SubjectNode, "_on_assign", old_rule)
    seed = SEEDS[0]
    subjects = [{"strategy": "silent", "rows": [_in_a_group_of_k(seed)]}]
    p = play({"broker": "answer-old-assign", "subjects": subjects}, seed=seed)
    assert broker_entry(p)["accepted_by_kind"].get("assign", 0) > 0
    assert sum(1 for reason in p.excluded().values() if reason == "silent") > 10
    assert len(p.outcome.rows) < len(honest(seed, subjects).outcome.rows) - 10
    assert any(v["reason"] == "run_not_in_group" for v in p.verdicts().values())


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_a_merges_assign_held_past_the_step_is_liveness_and_the_complaint_it_leaves_verifies(
        seed: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same broker holding the new assign 12 s, past the merged run's step deadline: its target members are cut
    off from it for a step, excluded `silent` (liveness, as `drop-victim`), and complain `run_not_in_group` once a
    signed start excludes them while they still wait for it. An auditor explains each such complaint by her signed
    exclusion and the assign the collector signed her, which covers that run (`complaints`): `coutil verify` passes
    the honest collector. A run of members outside her group that no assign covers still fails it (`isolate-victim`
    with ``via = "run"``, tests/adversary/test_collector_strategies.py)."""
    row = _in_a_group_of_k(seed)
    config = tmp_path / "round.toml"
    config.write_text(ROUND_FILE + f'[[adversary.subjects]]\nstrategy = "silent"\nrows = [{row}]\n'
                      '[adversary.broker]\nstrategy = "answer-old-assign"\nhold = 12.0\n')
    out = tmp_path / "out"
    main(["simulate", "--config", str(config), "--seed", str(seed), "--out", str(out), "--with-registrations",
          "--json"])
    capsys.readouterr()
    section = json.loads((out / "report.json").read_text())["adversary"]
    complaints = section["honest_complaints"]
    assert set(complaints) == {"run_not_in_group"} and section["honest_excluded"] == {"silent": complaints[
        "run_not_in_group"]}
    code = main(["verify", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err[-600:]
    assert "complained run_not_in_group, each excluded by a signed shuffle_start" in err


@pytest.mark.parametrize("seed", SEEDS)
def test_a_broker_dropping_everything_of_a_member_for_good_gets_her_excluded_as_silent_only(seed: int) -> None:
    """Liveness: she truly cannot be reached, so she is excluded ``silent``; nobody else is; her group
    re-runs without her; the release holds every other record; nothing leaks."""
    p = play({"broker": {"strategy": "drop-victim", "victim": VICTIM}}, seed=seed)
    entry = broker_entry(p)
    assert p.outcome.completed
    assert p.excluded() == {p.sid(VICTIM): "silent"}
    assert entry["victim"] == {"node": p.sid(VICTIM), "row": VICTIM, "grouped": True, "excluded": "silent",
                               "verdict": None}
    others = [r for r in range(p.data.n) if r != VICTIM]
    assert p.released() == p.records(others)
    assert all(p.verdicts()[p.sid(r)]["accept"] is True for r in others)
    assert entry["actions"]["dropped_to_victim"] > 0 and entry["leak"] == []
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_member_cut_off_for_less_than_a_step_recovers_and_nothing_changes(seed: int) -> None:
    p = play({"broker": {"strategy": "drop-victim", "victim": VICTIM, "duration": 3.0}}, seed=seed)
    assert_defeated(p, honest(seed))
    entry = broker_entry(p)
    assert entry["actions"]["dropped_to_victim"] > 0 and entry["victim"]["verdict"] == "accept"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_member_cut_off_at_the_reveal_suppresses_her_group_liveness_only(seed: int) -> None:
    """Dropped from ``reveal_open`` on: her inner secret never arrives, so her group cannot be opened
    and is suppressed (never re-run: some members revealed). Her fellow members are excluded
    ``suppressed``, not blamed; no group below k; nothing leaks."""
    p = play({"broker": {"strategy": "drop-victim", "victim": VICTIM, "after": "reveal_open"}}, seed=seed)
    entry = broker_entry(p)
    assert p.outcome.completed
    excluded = p.excluded()
    assert excluded[p.sid(VICTIM)] == "silent"
    assert set(excluded.values()) <= {"silent", "suppressed"}
    assert sum(1 for reason in excluded.values() if reason == "silent") == 1
    assert p.released() == p.records([r for r in range(p.data.n) if p.sid(r) not in excluded])
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert entry["leak"] == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strategy", ["duplicate", "reorder"])
def test_duplicated_or_reordered_deliveries_change_nothing(strategy: str, seed: int) -> None:
    p = play({"broker": {"strategy": strategy, "probability": 0.3}}, seed=seed)
    assert_defeated(p, honest(seed))
    entry = broker_entry(p)
    assert entry["actions"]["duplicated" if strategy == "duplicate" else "delayed"] > 100
    if strategy == "duplicate":
        assert entry["received"]["duplicate"] > 50  # the copies after the first: IGNORE duplicate


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("bulletin", "times"), [("roster", 1), ("release", 0)])
def test_another_rounds_retained_bulletin_shown_to_one_subject_has_no_effect(bulletin: str, times: int,
                                                                             seed: int) -> None:
    """She ignores it (``wrong_round``) and fetches the real one (§4; the roster: published again on its
    retained topic, which her submission waits for): no effect."""
    p = play({"broker": {"strategy": "split-retained", "victim": VICTIM, "bulletin": bulletin, "times": times}},
             seed=seed)
    assert_defeated(p, honest(seed))
    entry = broker_entry(p)
    substituted = entry["actions"]["substituted"]
    assert substituted >= 1 and entry["received"] == {"wrong_round": substituted}
    assert entry["victim"]["verdict"] == "accept"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_forged_retained_roster_is_rejected_by_the_subject_shown_it(seed: int) -> None:
    """A broker cannot sign: the roster it alters is REJECT ``bad_signature`` (detected by her); she fetches
    it, the collector publishes it again on its retained topic, and the next delivery is the real one."""
    p = play({"broker": {"strategy": "split-retained", "victim": VICTIM, "source": "forged", "times": 1}}, seed=seed)
    assert_defeated(p, honest(seed))
    entry = broker_entry(p)
    assert entry["received"] == {"bad_signature": entry["actions"]["substituted"]} == {"bad_signature": 1}
    assert entry["detected"] and entry["detected_by"] == [p.sid(VICTIM)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("source", ["earlier", "forged"])
def test_a_subject_never_shown_the_real_retained_roster_submits_nothing_liveness_only(source: str, seed: int) -> None:
    """Every delivery of the roster topic to her is another one: she never holds her roster's root from its
    retained topic, so she submits nothing (SPEC §4 group: a roster shown on her inbox alone may be one of her
    own, ``split-roster``) and is excluded ``silent`` alone at the step deadline, as if the broker dropped her;
    her group runs without her, the rest is released and accepted, nothing leaks."""
    p = play({"broker": {"strategy": "split-retained", "victim": VICTIM, "source": source}}, seed=seed)
    entry = broker_entry(p)
    assert p.outcome.completed and p.excluded() == {p.sid(VICTIM): "silent"}
    assert entry["leak"] == [] and entry["actions"]["substituted"] >= 2  # the first and the re-published one
    others = [r for r in range(p.data.n) if r != VICTIM]
    assert p.released() == p.records(others)
    assert all(p.verdicts()[p.sid(r)]["accept"] is True for r in others)


@pytest.mark.parametrize("seed", SEEDS)
def test_an_old_announce_shown_to_one_subject_keeps_her_out_liveness_only(seed: int) -> None:
    """Every announce she is shown is the earlier round's, past its deadline (``late``): she never
    registers. The round goes on without her; she is not excluded (never in it); nothing leaks."""
    p = play({"broker": {"strategy": "split-retained", "victim": VICTIM, "bulletin": "announce"}}, seed=seed)
    entry = broker_entry(p)
    assert p.outcome.completed and p.excluded() == {}
    assert entry["victim"] == {"node": p.sid(VICTIM), "row": VICTIM, "grouped": False, "excluded": None,
                               "verdict": None}
    assert set(entry["received"]) == {"late"}
    others = [r for r in range(p.data.n) if r != VICTIM]
    assert p.released() == p.records(others)
    assert all(p.verdicts()[p.sid(r)]["accept"] is True for r in others)
    assert entry["leak"] == []
    # Within this round nothing leaks; against the earlier round's release, hers does (the limit below).
    assert entry["across_rounds"]["leak"] == [p.sid(VICTIM)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("after", ["start", "shuffle_start"])
def test_a_victim_kept_out_of_a_second_round_over_the_same_records_is_attributed_the_measured_limit(
        after: str, seed: int) -> None:
    """SPEC §3, the known limit across rounds: two public releases over the same records differ by the
    records of whoever is in one and not the other. A broker that keeps one subject out of the second
    round (she never registers, or is cut off after grouping and excluded ``silent``) subtracts the two
    releases and attributes her exact record, every seed; nobody notices (she is cut off, the others
    accept). Each round on its own holds: no group below k, nothing leaks within it. The protocol has no
    memory across rounds: a difference of releases is composition, not something a round can refuse."""
    p = play({"broker": {"strategy": "drop-victim", "victim": VICTIM, "after": after, "against_earlier": True}},
             seed=seed)
    entry = broker_entry(p)
    assert p.outcome.completed and all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert entry["leak"] == []  # within the round
    assert entry["across_rounds"] == {"earlier_released": p.data.n, "released": p.data.n - 1, "difference": 1,
                                      "attributed": [p.sid(VICTIM)], "leak": [p.sid(VICTIM)]}
    others = [r for r in range(p.data.n) if r != VICTIM]
    assert all(p.verdicts()[p.sid(r)]["accept"] is True for r in others)
    assert not entry["detected"]


def test_a_replayed_round_over_the_same_records_gives_no_difference() -> None:
    """The same measure when nobody is kept out: the two releases hold the same records."""
    entry = broker_entry(play({"broker": "replay-round"}, seed=SEEDS[0]))
    assert entry["across_rounds"]["difference"] == 0 and entry["across_rounds"]["leak"] == []


@pytest.mark.parametrize(("table", "message"), [
    ({"broker": "gossip"}, "unknown broker strategy 'gossip'"),
    ({"broker": {"strategy": "drop-victim", "victim": 1, "when": "now"}}, "unknown key(s) when for drop-victim"),
    ({"broker": {"strategy": "drop-victim", "after": "lunch"}}, "after must be one of"),
    ({"broker": {"strategy": "duplicate", "probability": 2}}, "probability must be in [0, 1]"),
    ({"broker": {"strategy": "reorder", "delay": -1.0}}, "delay must be 0 or more"),
    ({"broker": {"strategy": "replay-round", "earlier_offset": 0}}, "earlier_offset must be 1 or more"),
    ({"broker": {"strategy": "split-retained", "bulletin": "gossip"}}, "bulletin must be one of"),
    ({"broker": 3}, "broker must be a strategy name or a table"),
])
def test_bad_broker_plans_are_one_line_input_errors(table: dict[str, object], message: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_adversary(table, "f.toml")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_victim_outside_the_data_is_a_one_line_error() -> None:
    with pytest.raises(InputError, match="victim row 30 is not in the data set"):
        play({"broker": {"strategy": "drop-victim", "victim": 30}}, seed=SEEDS[0])


ROUND = ROUND_FILE + '[adversary]\nbroker = { strategy = "drop-victim", victim = 2 }\n'


def test_simulate_applies_the_broker_of_a_round_file_and_reports_it(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "round.toml"
    path.write_text(ROUND)
    out = tmp_path / "out"
    code = main(["simulate", "--config", str(path), "--seed", "3", "--json", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert code == 0, err  # the victim a broker cut off is not owed a place, as a vanished subject is not
    report = json.loads((out / "report.json").read_text())
    for section in (json.loads(stdout)["adversary"], report["adversary"]):
        (entry,) = section["deviants"]
        assert entry["role"] == "broker" and entry["strategy"] == "drop-victim" and entry["params"] == {"victim": 2}
        assert entry["victim"]["excluded"] == "silent" and entry["leak"] == []
        assert section["plan"]["broker"] == {"strategy": "drop-victim", "victim": 2}
    code = main(["simulate", "--config", str(path), "--seed", "3", "--set", 'adversary.broker="replay-round"'])
    err = capsys.readouterr().err
    assert code == 0 and "adversary broker replay-round: 1 node(s), 0 detected" in err and "wrong_round" in err


def test_run_refuses_a_broker_strategy_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Over MQTT the broker is a real one: no deviating broker can be put in the process."""
    path = tmp_path / "round.toml"
    path.write_text(ROUND)
    assert main(["run", "--config", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "broker = 'drop-victim' needs the in-memory bus" in err and len(err.strip().splitlines()) == 1


def test_the_leak_measure_finds_a_record_carried_in_the_clear_outside_a_release() -> None:
    """The broker's leak is measured, so the measure must be able to find one: a payload carrying a
    subject's record in its wire encoding names her; the same bytes in a release do not."""
    p = play({"broker": "duplicate"}, seed=SEEDS[0])
    assert p.round.bus.publications is not None
    conf = p.data.select(list(CONFIG.confidential)).values
    truth = {p.sid(r): conf[r] for r in range(p.data.n)}
    leaky = SimpleNamespace(sender="x", topic="t", payload=b"\x00" * 5 + encode_record(conf[4].tolist()) + b"\x01")
    rng = SeededRandom(1)
    found, measure = plaintext_hits([*p.round.bus.publications, leaky], truth, rng)
    releases = len(p.round.bus.publications) + 1 - int(measure["payloads_searched"])
    assert found == [p.sid(4)] and releases >= 1
    found, _ = plaintext_hits(list(p.round.bus.publications), truth, rng)
    assert found == []  # the release (left out) holds every record; ciphertexts hold none


def _merge_after_an_exclusion(seed: int) -> list[dict[str, Any]]:
    """x of a group above k falls silent while sharing (excluded by a statement), then y of the nearest group of
    exactly k at submit: y's group merges into x's, whose pre-merge assign still names x."""
    data = play({}, seed=seed, n=31).data
    grouping = mdav(data.select(list(CONFIG.qi)).values, CONFIG.k)
    labels, centroids = np.asarray(grouping.groups), np.asarray(grouping.centroids)
    sizes = Counter(labels.tolist())
    target = next(t for t in sorted(sizes) if sizes[t] > CONFIG.k)
    distance = ((centroids - centroids[target]) ** 2).sum(axis=1)
    source = next(int(s) for s in np.argsort(distance) if s != target and sizes[int(s)] == CONFIG.k)
    x, y = int(np.flatnonzero(labels == target)[0]), int(np.flatnonzero(labels == source)[0])
    return [{"strategy": "silent", "rows": [x], "phase": "sharing"},
            {"strategy": "silent", "rows": [y], "phase": "submit"}]


@pytest.mark.parametrize("seed", [3, 8, 13, 21, 34])
@pytest.mark.parametrize("mode", ["assign", "assign-after-reveal"])
def test_a_replayed_pre_merge_assign_of_a_group_that_lost_a_member_is_stale(mode: str, seed: int) -> None:
    """Found by a reviewer of the subset rule: the target group lost a member (a statement) before the merge, so
    its members' pre-merge assign is no subset of the merged group; replayed, it excluded 3 honest members
    (`assign`) or made them complain `regroup_after_reveal` against an honest collector. An assign she took
    before is stale."""
    subjects = _merge_after_an_exclusion(seed)
    p = play({"broker": {"strategy": "replay-pre-merge", "mode": mode}, "subjects": subjects}, seed=seed, n=31)
    baseline = play({"subjects": subjects}, seed=seed, n=31)
    assert p.excluded() == baseline.excluded()
    assert all(p.verdicts()[p.sid(r)]["accept"] is True for r in p.honest_rows if p.sid(r) not in p.excluded())


#: Each broker strategy's table with the parameters it needs (its defaults otherwise).
_NEEDS_A_VICTIM = {"drop-victim", "split-announce", "split-retained"}


@pytest.mark.parametrize("seed", SEEDS)
def test_no_broker_strategy_gives_a_subject_a_proof_against_an_honest_collector(seed: int) -> None:
    """A proof of equivocation (two roster roots its collector signed for her round, `coutil.round.evidence`)
    needs the collector's signature twice: whatever a broker replays, drops, reorders or substitutes (another
    round's roster: ``wrong_round``, before anything is kept), no subject of an honest collector holds one."""
    for name in sorted(BROKER_STRATEGIES):
        table: dict[str, object] = {"strategy": name, **({"victim": VICTIM} if name in _NEEDS_A_VICTIM else {})}
        p = play({"broker": table}, seed=seed)
        assert not any(s.equivocation_evidence() is not None for s in p.round.subjects), name
