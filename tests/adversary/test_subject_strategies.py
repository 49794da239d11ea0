"""Every subject strategy of `coutil.adversary` in an otherwise honest round, over several seeds.

A deviation that breaks the protocol is detected and its author (never an honest member) excluded;
the round completes for the rest; no group below k is published; the deviator learns no honest
record. The two misreports cannot be told from the truth: what they do is measured.
"""

from __future__ import annotations

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
@pytest.mark.parametrize(("entry", "reason"), ATTRIBUTED, ids=[f"{e['strategy']}-{e.get('phase', '')}"
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
    trace-back through every mixer): her group is released only with k records, else suppressed."""
    p = play({"subjects": [{"strategy": "garbage-inner", "rows": [0]}]}, seed=seed)
    (entry,) = p.entries("subject")
    assert p.outcome.completed
    assert entry["detected"] and entry["detected_by"] == ["collector"] and not entry["excluded"]
    assert entry["evidence"] == {"undecryptable_item": 1}
    assert all(size >= CONFIG.k for size in p.outcome.group_sizes)
    assert p.released() <= p.records(p.honest_rows)  # never her record; honest ones, perhaps not all
    assert set(p.section["honest_complaints"]) <= {"not_included"}  # members of a suppressed group
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
