"""Every subject strategy of `coutil.adversary` in an otherwise honest round, over several seeds.

A deviation that breaks the protocol is detected and its author (never an honest member) excluded;
the round completes for the rest; no group below k is published; the deviator learns no honest
record. The two misreports cannot be told from the truth: what they do is measured.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.adversary.common import CONFIG, SEEDS, Played, play

#: Strategy (and parameters) -> the exclusion reason that attributes it.
ATTRIBUTED: list[tuple[dict[str, Any], str]] = [
    ({"strategy": "silent", "phase": "keys"}, "silent"),
    ({"strategy": "silent", "phase": "submit"}, "silent"),
    ({"strategy": "silent", "phase": "mix"}, "silent"),
    ({"strategy": "silent", "phase": "vote"}, "silent"),
    ({"strategy": "leave-after-grouping"}, "silent"),
    ({"strategy": "free-rider"}, "silent"),
    ({"strategy": "tamper"}, "blamed_tamper"),
    ({"strategy": "withhold"}, "blamed_tamper"),
    ({"strategy": "copycat"}, "blamed_copy"),
    ({"strategy": "false-complaint"}, "blamed_false_complaint"),
    ({"strategy": "unsolicited-blame"}, "blamed_unsolicited"),
    # A no-go before the run reached the honest mixers: they blamed without mixing, the voter alone is false.
    ({"strategy": "early-no-go"}, "blamed_false_complaint"),
    # Her two signed submissions (the collector holds her first one; her second comes with her blame), or the one
    # mixer 1 mixed, carried by mixer 1's blame, beside the second (``via = "inbox"``: the collector held none).
    ({"strategy": "resubmit", "via": "broker"}, "blamed_equivocation"),
    ({"strategy": "resubmit", "via": "inbox"}, "blamed_equivocation"),
    # The honest batch towards another member is refused; the tampered one is what re-execution sees.
    ({"strategy": "equivocate", "via": "other-member"}, "blamed_tamper"),
    ({"strategy": "equivocate", "via": "same-topic"}, "blamed_equivocation"),
    ({"strategy": "bad-key", "which": "inner"}, "blamed_bad_key"),
    ({"strategy": "bad-key", "which": "outer"}, "blamed_bad_key"),
    # A signed message for a run the collector never started her in is proof (no honest member has one).
    ({"strategy": "keys-ahead", "target": "next-run"}, "blamed_equivocation"),
    ({"strategy": "keys-ahead", "target": "other-group"}, "blamed_equivocation"),
]


def assert_author_alone_excluded(p: Played, reason: str) -> None:
    outcome = p.outcome
    assert outcome.completed, outcome.phase
    deviants = {p.sid(r) for r in p.deviant_rows}
    assert p.excluded() == dict.fromkeys(deviants, reason)
    assert p.released() == p.records(p.honest_rows)  # every honest record, no deviator's
    assert all(size >= CONFIG.k for size in outcome.group_sizes)
    verdicts = p.verdicts()
    assert all(verdicts[p.sid(r)]["accept"] is True for r in p.honest_rows)
    for entry in p.entries("subject"):
        assert entry["deviated"] and entry["detected"] and entry["excluded"], entry
        assert entry["exclusion_reason"] == reason and "collector" in entry["detected_by"]
        assert entry["leak"] == []
    assert p.section["honest_excluded"] == {} and p.section["honest_baseline_leak"] == 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("entry", "reason"), ATTRIBUTED,
                         ids=[f"{e['strategy']}-{e.get('phase', e.get('via', e.get('which', e.get('target', ''))))}"
                              for e, _ in ATTRIBUTED])
def test_a_deviating_member_is_detected_and_excluded_and_the_round_completes(entry: dict[str, Any], reason: str,
                                                                             seed: int) -> None:
    p = play({"subjects": [{**entry, "rows": [seed % 7]}]}, seed=seed)
    assert_author_alone_excluded(p, reason)


@pytest.mark.parametrize("strategy", ["tamper", "copycat", "unsolicited-blame"])
def test_a_fraction_of_deviators_are_all_excluded_even_two_in_one_group(strategy: str) -> None:
    p = play({"subjects": [{"strategy": strategy, "fraction": 0.1}]}, seed=5, n=60)
    assert len(p.deviant_rows) == 6
    reason = {"tamper": "blamed_tamper", "copycat": "blamed_copy", "unsolicited-blame": "blamed_unsolicited"}[strategy]
    # A copycat alone with copycats has nothing to copy: she is silent instead.
    allowed = {reason, "silent"}
    outcome = p.outcome
    assert outcome.completed
    deviants = {p.sid(r) for r in p.deviant_rows}
    assert set(p.excluded()) == deviants and set(p.excluded().values()) <= allowed
    assert p.released() == p.records(p.honest_rows)
    assert all(size >= CONFIG.k for size in outcome.group_sizes)


@pytest.mark.parametrize("seed", SEEDS)
def test_silent_at_the_reveal_suppresses_her_group_without_publishing_it(seed: int) -> None:
    """Liveness, not privacy: her group cannot be opened without her secret, so it is suppressed
    (its honest members excluded ``suppressed``); nothing below k, nothing leaks."""
    p = play({"subjects": [{"strategy": "silent", "phase": "reveal", "rows": [0]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed and entry["excluded"] and entry["exclusion_reason"] == "silent"
    assert set(p.section["honest_excluded"]) <= {"suppressed"}
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert entry["leak"] == []


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_silent_at_the_verdict_only_withholds_her_verdict(seed: int) -> None:
    p = play({"subjects": [{"strategy": "silent", "phase": "verdict", "rows": [0]}]}, seed=seed)
    assert p.outcome.completed and p.sid(0) not in p.verdicts()
    assert p.released() == p.records(list(range(p.data.n)))  # her record was shuffled in as usual
    assert all(p.verdicts()[p.sid(r)]["accept"] for r in p.honest_rows)


@pytest.mark.parametrize("seed", SEEDS)
def test_garbage_inner_is_detected_not_attributed_and_never_yields_a_group_below_k(seed: int) -> None:
    """SPEC §3: detected after the reveal (an item that does not open), not attributed (that needs a
    trace-back through every mixer): her group is released only with k records, else suppressed by a signed
    closing statement that excludes every member of it alike (`suppressed`), her honest group-mates too."""
    p = play({"subjects": [{"strategy": "garbage-inner", "rows": [0]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed
    assert entry["detected"] and entry["detected_by"] == ["collector"]
    suppressed = p.section["honest_excluded"]
    assert set(suppressed) <= {"suppressed"} and entry["excluded"] == bool(suppressed)  # her group, not her alone
    assert entry["evidence"] == {"undecryptable_item": 1, **({"excluded:suppressed": 1} if suppressed else {})}
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert p.released() <= p.records(p.honest_rows)  # never her record; honest ones, perhaps not all
    # Members of a suppressed group, as the release or the statement reaches them first.
    assert set(p.section["honest_complaints"]) <= {"not_included", "excluded_after_reveal"}
    assert entry["leak"] == []


@pytest.mark.parametrize("seed", SEEDS)
def test_misreported_qis_cannot_be_told_from_the_truth(seed: int) -> None:
    p = play({"subjects": [{"strategy": "misreport-qi", "shift": 15.0, "rows": [0]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed and not entry["detected"] and not entry["excluded"]
    assert p.released() == p.records(list(range(p.data.n)))  # the release carries her true record
    assert all(v["accept"] for v in p.verdicts().values())
    effect = entry["effect"]
    # Her centroid is nearer what she reported than the truth: the release is less useful for her
    # record, and an intruder who knows her true QIs may look in another group.
    assert effect["released"] and effect["true_record_in_release"]
    assert effect["reported_qi_distance_to_her_centroid"] < effect["true_qi_distance_to_her_centroid"]
    assert isinstance(effect["intruder_finds_her_group"], bool)


@pytest.mark.parametrize("seed", SEEDS)
def test_misreported_confidential_values_cannot_be_told_from_the_truth(seed: int) -> None:
    p = play({"subjects": [{"strategy": "misreport-confidential", "shift": 1000.0, "rows": [0]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed and not entry["detected"] and not entry["excluded"]
    assert all(v["accept"] for v in p.verdicts().values())  # she audits what she submitted
    effect = entry["effect"]
    # The release carries her false values, not her true ones: nobody can find her true record.
    assert effect["reported_record_in_release"] and not effect["true_record_in_release"]
    assert effect["released_value_error"] == pytest.approx(1000.0)


#: Sent to one fellow member alone, where a member message meant for everyone (or for the collector) has
#: no place: her run_keys with another inner key (key split), her no-go vote and blame.
REFUSED: list[dict[str, Any]] = [
    {"strategy": "key-split", "via": "direct"},
    {"strategy": "key-split", "via": "inbox"},
    {"strategy": "direct-no-go"},
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("entry", REFUSED, ids=[f"{e['strategy']}-{e.get('via', '')}" for e in REFUSED])
def test_a_view_shown_to_one_member_alone_is_refused_and_changes_nothing(entry: dict[str, Any], seed: int) -> None:
    """The fellow member REJECTs it (``topic_mismatch``: on a topic towards one member only a submission
    or a batch meant for her travels) and names its signer; the round goes on as if it had not been sent:
    nobody excluded, every honest record released, every verdict an accept, nothing learned."""
    p = play({"subjects": [{**entry, "rows": [seed % 7]}]}, seed=seed)
    assert p.outcome.completed and p.excluded() == {}
    assert p.released() == p.records(list(range(p.data.n)))
    assert all(v["accept"] for v in p.verdicts().values())
    (found,) = p.entries("subject")
    assert found["deviated"] and found["detected"] and not found["excluded"], found
    assert set(found["evidence"]) == {"rejected:topic_mismatch"} and found["leak"] == []
    assert p.section["honest_excluded"] == {}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_key_split_carried_by_a_colluding_broker_opens_nothing(seed: int) -> None:
    """``key-split`` with the broker strategy ``split-keys``: each fellow member gets her own odd inner
    key of the splitter's on the splitter's group topic (no signature check can see it). The votes
    bind the run's keys (`keys_digest`): they disagree, nobody reveals, no record of that run is ever
    opened. The collector, which saw other keys than the voters, excludes those voters
    ``blamed_split_view``: against a broker and a member together attribution fails (honest members
    excluded, as a broker can exclude anyone by dropping her messages), privacy does not: no leak, no
    group below k, every released record is a true one."""
    p = play({"subjects": [{"strategy": "key-split", "rows": [seed % 7]}], "broker": "split-keys"}, seed=seed)
    (splitter,) = p.entries("subject")
    assert p.outcome.completed and splitter["deviated"] and splitter["leak"] == []
    assert "rejected:view_mismatch" in splitter["evidence"]
    honest_excluded = {sid: reason for sid, reason in p.excluded().items() if sid != splitter["node"]}
    assert honest_excluded and set(honest_excluded.values()) <= {"blamed_split_view", "merged", "suppressed"}
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert not (p.released() - p.records(list(range(p.data.n))))  # no record that is not someone's true one
    (broker,) = p.entries("broker")
    assert broker["deviated"] and broker["accepted_by_kind"].get("run_keys", 0) >= 1  # the split took place
    assert broker["leak"] == [] and p.section["honest_baseline_leak"] == 0


def _old_blame_rules(monkeypatch: pytest.MonkeyPatch, *, whole_group: bool) -> None:
    """The collector's rules before: a blame resolved once every member blamed, whatever it lacked, and
    on a gap the no-go voters excluded (``whole_group``: every member, the rule of f49165b); mixer 1's blame
    carrying no submission (it did not then, and the submissions it carries fill the gaps these tests make)."""
    from coutil.protocol import collector_groups
    from coutil.protocol.shuffle import BlameResult
    from coutil.protocol.subject_core import SubjectRun

    monkeypatch.setattr(SubjectRun, "taken_envelopes",
                        lambda self: tuple(self.taken[key] for key in sorted(self.taken) if key[0] > 0))

    resolve = collector_groups.GroupState.blame

    def blame(self: collector_groups.GroupState, round_id: bytes) -> BlameResult:
        d = self.data
        if len(d.submissions) == len(d.keys) == len(self.members):
            return resolve(self, round_id)
        culprits = self.members if whole_group else [m for m, v in d.votes.items() if not v.go]
        return BlameResult(tuple((m, "blame_inconclusive") for m in culprits), "incomplete transcript")

    monkeypatch.setattr(collector_groups.GroupState, "blame_complete",
                        lambda self: self.no_go and len(self.data.blames) == len(self.members))
    monkeypatch.setattr(collector_groups.GroupState, "blame", blame)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_tamperer_whose_broker_hides_the_submissions_gets_no_honest_member_attributed(seed: int) -> None:
    """``tamper`` with the broker strategy ``hide-submits`` (the collector never gets a submission, not even
    the copies members re-send with their blame): before, the collector excluded the no-go voters
    (``blame_inconclusive``): the tamperer's honest victims went and she was released (the test below). Then a
    blame waited for every submission, and at the deadline the members whose submission was missing were
    excluded ``silent``, her group as a whole (liveness). Now mixer 1's blame carries the submissions she mixed:
    the collector holds them all, re-execution names the tamperer alone, and the round completes for the rest."""
    p = play({"subjects": [{"strategy": "tamper", "rows": [4]}], "broker": "hide-submits"}, seed=seed)
    assert_author_alone_excluded(p, "blamed_tamper")
    (broker,) = p.entries("broker")
    assert broker["deviated"]


def test_with_the_old_rule_the_honest_no_go_voters_are_excluded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with the collector's rule before (on a gap, the no-go voters excluded),
    honest members are excluded ``blame_inconclusive`` and the tamperer is released."""
    _old_blame_rules(monkeypatch, whole_group=False)
    p = play({"subjects": [{"strategy": "tamper", "rows": [4]}], "broker": "hide-submits"}, seed=SEEDS[1])
    tamperer = p.sid(4)
    assert tamperer not in p.excluded() and p.records([4]) & p.released()
    assert any(reason == "blame_inconclusive" for sid, reason in p.excluded().items() if sid != tamperer)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("via", ["withhold", "inbox"])
def test_a_member_who_keeps_her_submission_from_the_collector_is_the_one_excluded(via: str, seed: int) -> None:
    """``hide-submit`` (honest broker): she keeps her submission from the collector (mixer 1 of every run,
    mixing it without publishing it; or sending it to mixer 1's inbox, which the collector does not read)
    and votes no-go. Found by a reviewer: under the rule that a gap re-runs the group and then excludes it
    whole, her whole group went. Now the blame waits for every submission (the honest members re-send
    theirs with their blame) and at the deadline she alone is missing: excluded ``silent``, no honest
    member excluded, the round completes. Sent to mixer 1's inbox, it comes to the collector with mixer 1's
    blame (which carries the submissions she mixed): re-execution shows her no-go false."""
    p = play({"subjects": [{"strategy": "hide-submit", "rows": [5], "via": via}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert entry["deviated"] and entry["excluded"] and entry["leak"] == []
    assert p.excluded()[entry["node"]] == {"withhold": "silent", "inbox": "blamed_false_complaint"}[via]
    assert p.section["honest_excluded"] == {} and p.outcome.completed
    assert all(v["accept"] for v in p.verdicts().values())


def test_with_the_rule_of_f49165b_her_whole_group_is_excluded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: with a gap excluding every member, honest members go with her."""
    _old_blame_rules(monkeypatch, whole_group=True)
    p = play({"subjects": [{"strategy": "hide-submit", "rows": [5]}]}, seed=SEEDS[0])
    assert any(reason == "blame_inconclusive" for reason in p.section["honest_excluded"])


@pytest.mark.parametrize("seed", SEEDS)
def test_equivocate_in_runs_of_two_does_not_crash(seed: int) -> None:
    """At k = 2 a mixer before the last has no fellow but the next mixer to show her other batch to: the strategy
    signs both on the next mixer's topic (found by an attacker: it raised StopIteration and crashed the round)."""
    config = dataclasses.replace(CONFIG, k=2)
    p = play({"subjects": [{"strategy": "equivocate", "rows": [0]}]}, seed=seed, config=config)
    (entry,) = p.entries("subject")
    assert p.outcome.completed and entry["deviated"] and entry["excluded"], entry


@pytest.mark.parametrize("seed", SEEDS[:2])
def test_two_final_batches_without_a_broker_are_refused_where_they_travel(seed: int) -> None:
    """``two-finals`` alone: her second final batch goes on her topics towards each fellow, where a final batch never
    travels (REJECT ``topic_mismatch``): everyone takes her real one and the round completes as if she were honest.
    With the broker ``split-final`` the members take the second one instead, and she is convicted
    (`tests/verify/test_verify_blames.py::test_two_final_batches_split_by_a_broker_convict_the_final_mixer`)."""
    p = play({"subjects": [{"strategy": "two-finals", "rows": [seed % 7]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed and entry["deviated"] and p.excluded() == {}
    assert p.released() == p.records(list(range(p.data.n)))
    assert all(p.verdicts()[p.sid(r)]["accept"] for r in p.honest_rows)
    assert entry["leak"] == [] and p.section["honest_excluded"] == {}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_go_vote_on_a_final_batch_nobody_signed_excludes_its_voter_and_the_round_completes(seed: int) -> None:
    """``wrong-digest`` (found while closing ``two-finals``; before, the whole round stalled): the run is relayed,
    and at its deadline she is still not on the collector's final batch: excluded `silent` (the collector cannot
    tell her from a member a broker kept from the relay, so it states no blame). As the final mixer (seed 13) her
    vote names another final batch than the one she signed: `blamed_equivocation`, proven."""
    p = play({"subjects": [{"strategy": "wrong-digest", "rows": [seed % 7]}]}, seed=seed)
    (entry,) = p.entries("subject")
    final_mixer = entry["exclusion_reason"] == "blamed_equivocation"
    assert entry["exclusion_reason"] in ("silent", "blamed_equivocation") and final_mixer == (seed == 13), entry
    assert_author_alone_excluded(p, entry["exclusion_reason"])
