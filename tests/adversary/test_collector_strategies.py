"""Every collector strategy of `coutil.adversary` against honest subjects, over several seeds.

Each either fails (the subjects refuse) or is detected and made public (a signed complaint, or
evidence any auditor holding the verdicts and the roster checks), and the collector attributes no
honest subject's record. The exception is fabricate-members (and isolate-victim with Sybils): its
defence is admission control, which v2 does not have; the leak is measured.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import numpy as np
import pytest

from coutil.adversary.collector import CollectorStrategy, RerunSubtract
from coutil.protocol import topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.equivocation import EquivocationEvidence, RosterReceipt, check_equivocation, combine_receipts
from coutil.protocol.subject import STATE_EDGES, SubjectState
from coutil.protocol.topics import sid_of
from coutil.sdc.mdav import mdav
from tests.adversary.common import CONFIG, SEEDS, Played, play


def assert_no_leak(p: Played) -> None:
    entry = p.collector_entry
    assert entry["deviated"], entry
    assert entry["leak"] == [] and entry["attributions"] == 0
    assert p.section["honest_baseline_leak"] == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_rerun_subtract_gets_one_opening_only_and_is_reported(seed: int) -> None:
    p = play({"collector": "rerun-subtract"}, seed=seed)
    collector = p.round.collector
    assert isinstance(collector, RerunSubtract) and collector.rerun_label is not None
    # It re-ran the group, but nobody who revealed took part again: one opening, nothing to subtract.
    assert [o.group for o in collector.openings].count(collector.rerun_label) == 1
    (opened,) = [o for o in collector.openings if o.group == collector.rerun_label]
    entry = p.collector_entry
    assert entry["refusals"].keys() == {"rerun_after_reveal", "excluded_after_reveal"}
    assert entry["complaints"].keys() == {"rerun_after_reveal", "excluded_after_reveal"}
    # Every member of the opened group refused and complains, the one claimed silent too.
    assert entry["public"] and entry["detectors"] == len(opened.members)
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_split_roster_is_a_signed_complaint_of_the_group_shown_it(seed: int) -> None:
    p = play({"collector": {"strategy": "split-view-roster", "victim": seed % 5}}, seed=seed)
    entry = p.collector_entry
    shown = p.round.collector.shown  # type: ignore[attr-defined]
    assert entry["complaints"] == {"roster_mismatch": len(shown)} and entry["public"]
    verdicts = p.verdicts()
    for subject in p.round.subjects:
        v = verdicts[subject.sid]
        assert (v["reason"] == "roster_mismatch") if subject.public_key in shown else v["accept"], v
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_split_release_is_caught_by_the_verdicts_bindings(seed: int) -> None:
    p = play({"collector": {"strategy": "split-view-release", "victim": seed % 5}}, seed=seed)
    entry = p.collector_entry
    shown = p.round.collector.shown  # type: ignore[attr-defined]
    # Her accept names the release she saw: it counts as no accept of the one published to the rest.
    assert entry["auditor"] == {"verdict_bound_to_another_release_or_roster": len(shown)}
    assert entry["detected_by"] == ["auditor"] and entry["public"]
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_dropping_a_live_subject_is_liveness_only(seed: int) -> None:
    """Out of scope (SPEC §2: the collector is trusted for liveness): the victim is excluded as
    silent and nobody can prove she was not; nothing of hers is opened, nothing leaks."""
    p = play({"collector": {"strategy": "drop-subject", "victim": 1}}, seed=seed)
    entry = p.collector_entry
    assert p.outcome.completed and p.excluded() == {p.sid(1): "silent"}
    assert not entry["detected"]  # recorded as it is: no honest party can tell
    assert p.released() == p.records([r for r in range(p.data.n) if r != 1])
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_isolating_a_victim_among_honest_members_is_seen_by_an_auditor_and_learns_nothing(seed: int) -> None:
    p = play({"collector": {"strategy": "isolate-victim", "victim": 2}}, seed=seed)
    entry = p.collector_entry
    assert p.outcome.completed and all(v["accept"] for v in p.verdicts().values())
    # Subjects cannot tell (no subject sees QIs); an auditor recomputing MDAV on the roster can.
    assert entry["detected_by"] == ["auditor"] and entry["auditor"]["groups_not_mdav_on_the_roster"] >= 1
    assert entry["victim"]["members"] == CONFIG.k and entry["victim"]["own_members"] == 0
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_run_of_members_outside_her_group_is_refused(seed: int) -> None:
    p = play({"collector": {"strategy": "isolate-victim", "victim": 2, "via": "run"}}, seed=seed)
    entry = p.collector_entry
    assert entry["refusals"] == {"run_not_in_group": 1} and entry["complaints"] == {"run_not_in_group": 1}
    assert entry["detected_by"] == [p.sid(2)] and entry["public"]
    assert p.verdicts()[p.sid(2)]["reason"] == "run_not_in_group"
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_group_below_k_is_published_only_against_every_subjects_complaint(seed: int) -> None:
    p = play({"collector": "publish-below-k"}, seed=seed)
    entry = p.collector_entry
    assert min(p.outcome.group_sizes) == CONFIG.k - 1  # the deviation itself
    verdicts = p.verdicts()
    assert verdicts and not any(v["accept"] for v in verdicts.values())
    assert set(entry["complaints"]) <= {"not_k_anonymous"} and entry["detectors"] >= len(verdicts) - CONFIG.k
    assert entry["public"]
    assert_no_leak(p)


# ------------------------------------------------------------------------------------- Sybils: the limit
SYBIL_TABLES: list[dict[str, Any]] = [
    {"strategy": "fabricate-members", "isolate": True},
    {"strategy": "isolate-victim", "members": "sybils"},
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("table", SYBIL_TABLES, ids=["fabricate-isolate", "isolate-sybils"])
def test_a_victim_alone_with_sybils_is_attributed_the_measured_limit(table: dict[str, Any], seed: int) -> None:
    """SPEC §3, the remaining limit: k - 1 fabricated members beside the victim leave her record alone
    in the release once the collector's own are taken out. Measured: exactly her record, nobody
    else's; nothing in v2 lets a subject tell a Sybil from a respondent."""
    victim = seed % 5
    p = play({"collector": {**table, "victim": victim}}, seed=seed)
    collector = p.round.collector
    assert isinstance(collector, CollectorStrategy)
    entry = p.collector_entry
    assert entry["fabricated"] == CONFIG.k - 1
    assert entry["leak"] == [p.sid(victim)] and entry["attributions"] == 1
    record = next(iter(collector.attributions().values()))
    assert record == tuple(p.data.select(list(CONFIG.confidential)).values[victim].tolist())
    # No subject notices anything; an auditor recomputing MDAV on the roster notices the forced
    # group only when MDAV itself would not have put the Sybils with her (then nothing at all does).
    assert set(entry["detected_by"]) <= {"auditor"} and all(v["accept"] for v in p.verdicts().values())
    view = entry["victim"]
    assert view["own_members"] == CONFIG.k - 1 and view["members_she_can_verify"] == 0
    # What she can see herself today: her group's centroid is exactly her own QIs (every other
    # member registered them), and her audit says so on her device (a local warning, not a complaint:
    # honest duplicates in discrete data look the same). Sybil QIs chosen off hers would hide even that.
    assert view["centroid_equals_her_qi"] is True
    assert view["she_noticed"] is True
    others = [s for s in p.round.subjects if s.sid != p.sid(victim)]
    assert not any(s.audit is not None and s.audit.centroid_is_own_qi for s in others)


@pytest.mark.parametrize("seed", SEEDS)
def test_fabricated_members_without_isolation_leak_only_when_mdav_groups_them_with_her(seed: int) -> None:
    victim = seed % 5
    p = play({"collector": {"strategy": "fabricate-members", "victim": victim}}, seed=seed)
    entry = p.collector_entry
    view = entry["victim"]
    assert entry["fabricated"] == CONFIG.k - 1 and p.outcome.completed
    alone = view["members"] - view["own_members"] == 1
    assert entry["leak"] == ([p.sid(victim)] if alone else [])
    assert set(entry["leak"]) <= {p.sid(victim)}  # never anyone else's
    assert view["she_noticed"] is alone  # her audit warns her exactly when she is alone with them


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("strategy", ["split-view-roster", "split-view-release", "rerun-subtract"])
def test_hidden_complaints_are_public_through_the_subjects_evidence(strategy: str, seed: int) -> None:
    """``hide_complaints`` on top of a strategy: every tell-tale verdict is acknowledged, then missing
    from what the collector records (its report shows those subjects as silent); each of those subjects
    holds her verdict and the collector's signed verdict_ack, which any auditor checks."""
    params: dict[str, Any] = {"strategy": strategy, "hide_complaints": True}
    if strategy != "rerun-subtract":
        params["victim"] = seed % 5
    p = play({"collector": params}, seed=seed)
    collector = p.round.collector
    assert isinstance(collector, CollectorStrategy) and collector.hidden
    hidden = {k.hex()[:32] for k in collector.hidden}
    assert hidden.isdisjoint(p.verdicts())  # gone from the record
    by_sid = {s.sid: s for s in p.round.subjects}
    assert all(by_sid[sid].verdict_evidence() is not None for sid in hidden)
    entry = p.collector_entry
    assert entry["auditor"]["acknowledged_verdict_missing"] == len(hidden)
    assert "auditor" in entry["detected_by"] and entry["public"]
    assert_no_leak(p)


# ------------------------------------------------------------------------------- runs that do not follow
@pytest.mark.parametrize("seed", SEEDS)
def test_a_statement_that_excludes_members_it_keeps_is_refused_and_public(seed: int) -> None:
    """``erase-complaints``: the victim is shown her group's first run without one member; the later runs
    name every member they keep as excluded, for the members' complaints to be dropped. Each member
    refuses a run whose signed statement excludes members it keeps (``run_not_as_stated``, SPEC §4
    share.1 (d)): the complaints stand, signed; nothing is opened."""
    p = play({"collector": "erase-complaints"}, seed=seed, n=31)  # n = 31, k = 3: one group of four
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    group = [s for s in p.round.subjects if victim in s._assigned]
    assert len(group) == CONFIG.k + 1 and entry["public"]
    complaints = {p.verdicts()[s.sid]["reason"] for s in group}
    assert complaints <= {"run_not_as_stated", "split_view"} and "run_not_as_stated" in complaints
    assert_no_leak(p)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_victim_kept_apart_with_identities_off_the_roster_refuses_and_complains(seed: int) -> None:
    """``split-assign``: the victim's assign names her group but, beside her, k - 1 identities the collector
    holds and never registered; her group-mates are assigned and run without her. Every assign carries each
    fellow member's roster entry (SPEC §8.3): no entry of an identity off the roster leads to the root, so she
    takes no part (`fellow_not_on_roster`) and complains in her signed verdict. Before (no fellow entries): her
    run of her own opened and her record was attributed, 3 of 3 seeds."""
    p = play({"collector": "split-assign"}, seed=seed, n=31)
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    assert victim is not None and entry["deviated"]
    assert entry["leak"] == [] and p.round.collector.attributions() == {}  # type: ignore[attr-defined]
    assert p.verdicts()[sid_of(victim)]["reason"] == "fellow_not_on_roster"
    assert entry["public"] and entry["complaints"] == {"fellow_not_on_roster": 1}
    assert p.outcome.completed and len(p.outcome.rows) == p.data.n - 1  # everyone else, released and accepting
    assert sum(1 for v in p.verdicts().values() if v["accept"] is True) == p.data.n - 1


@pytest.mark.parametrize("seed", SEEDS)
def test_a_victim_kept_apart_then_the_release_withheld_learns_nothing(seed: int) -> None:
    """``split-assign`` with ``withhold = true`` (found by an attacker before the fellow entries: it aborted once
    her run of her own opened, so that nothing was ever audited, and attributed her record unseen, 3 of 3
    seeds). Now her run never opens: the abort costs liveness only."""
    p = play({"collector": {"strategy": "split-assign", "withhold": True}}, seed=seed, n=31)
    entry = p.collector_entry
    assert not p.outcome.completed and p.outcome.phase == "aborted"
    assert entry["leak"] == [] and p.round.collector.attributions() == {}  # type: ignore[attr-defined]


def _victim_above_k_row(seed: int, n: int) -> int:
    """A row whose MDAV group has more than k members (her mates still run without her)."""
    from collections import Counter

    import numpy as np

    from coutil.round.simulation import synthetic_dataset
    from coutil.sdc.mdav import mdav

    data = synthetic_dataset(n, CONFIG, seed)
    groups = np.asarray(mdav(data.select(list(CONFIG.qi)).values, CONFIG.k).groups)
    sizes = Counter(groups.tolist())
    return next(r for r in range(n) if sizes[int(groups[r])] > CONFIG.k)


def _split_announce(seed: int, n: int = 32) -> tuple[Played, int]:
    row = _victim_above_k_row(seed, n)
    return play({"collector": {"strategy": "split-announce", "victim": row},
                 "broker": {"strategy": "split-announce", "victim": row}}, seed=seed, n=n), row


@pytest.mark.parametrize("seed", SEEDS)
def test_an_announce_of_k_1_shown_to_one_subject_alone_is_refused_by_her_floor(seed: int) -> None:
    """``split-announce`` (a collector that runs the broker): the victim alone gets an announce of the same
    round with k = 1, then a group and a run of her own, with no identity of the collector's beside her.
    Measured before her floor: her record opened alone and attributed in 3 of 3 seeds, every other verdict
    an accept. Now she does not take part below k = 2 (``k_below_floor``): nothing of hers is ever
    sent, the collector learns nothing, the round completes for the others."""
    from coutil.protocol.states import SubjectState

    p, _ = _split_announce(seed)
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    node = next(s for s in p.round.subjects if s.public_key == victim)
    assert node.state == SubjectState.INCOMPATIBLE and node.rejections == []
    broker = p.entries("broker")[0]
    assert broker["made_by_kind"] == {"announce": 1}  # she was shown it
    assert entry["leak"] == [] and p.section["honest_baseline_leak"] == 0
    assert p.outcome.completed and p.section["honest_excluded"] == {}
    assert all(v["accept"] for v in p.verdicts().values())


def test_without_her_floor_the_split_announce_opens_her_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: subjects built with no floor of their own (k = 1 taken) are isolated
    and their record attributed."""
    import coutil.round.nodes

    monkeypatch.setattr(coutil.round.nodes, "MIN_K", 1)
    p, _ = _split_announce(SEEDS[0])
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    assert p.collector_entry["leak"] == [sid_of(victim)]


class _EarlyRevealOpen(CollectorNode):
    """Sends every member, with each shuffle_start, a reveal_open naming a final batch that does not
    exist (all zeros), ahead of the batch (an attacker's probe of the reveal barrier)."""

    def _start_run(self, group: Any, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Any]:
        from coutil.protocol import topics
        from coutil.protocol.messages import RevealOpen
        from coutil.protocol.node import Outgoing

        out = super()._start_run(group, excluded, now)
        bogus = self._sign(RevealOpen(self.round_id, self.public_key, group.label, group.run, bytes(32)))
        return [*out, *(Outgoing(topics.inbox(self.round_id, m), bogus) for m in group.members)]


def test_a_reveal_open_ahead_of_the_final_batch_is_compared_when_the_batch_comes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before, a reveal_open that came before a member's final batch was never compared to it: each
    member revealed on the bogus one as soon as every vote was go (no leak, the barrier bypassed with no
    trace). Now it is kept with its digest and compared: a REJECT ``bad_reveal_open`` recorded by every
    member, who then reveals only on the real reveal_open; the round completes as an honest one."""
    from coutil.round import nodes
    from coutil.round.memory import simulate_round
    from coutil.round.simulation import synthetic_dataset

    data = synthetic_dataset(30, CONFIG, SEEDS[0])
    monkeypatch.setattr(nodes, "CollectorNode", _EarlyRevealOpen)
    played = simulate_round(data, CONFIG, seed=SEEDS[0])
    assert isinstance(played.collector, _EarlyRevealOpen)
    assert played.collector.outcome().completed
    flagged = [s for s in played.subjects if any(r.reason == "bad_reveal_open" for r in s.rejections)]
    assert flagged  # (the others had not started the run yet: IGNORE, as for any early message)
    # Nobody revealed on the bogus one: the collector got no reveal before the group was ready.
    assert not [r for r in played.collector.rejections if r.kind == "reveal"]
    assert all(v["accept"] for v in played.collector.outcome().verdicts)


def _intersected(rounds: list[Played]) -> tuple[int, int]:
    """A collector's intersection of releases over the same respondents: each subject linked across rounds by
    her exact QIs (she registers them), her candidates are the confidential records every group she was in
    released (as multisets); one candidate left attributes it. (right, wrong) attributions, by ground truth."""
    data = rounds[0].data
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    candidates: list[Counter[tuple[float, ...]] | None] = [None] * data.n
    for played in rounds:
        outcome, k = played.outcome, played.k
        starts = np.cumsum((0, *outcome.group_sizes))
        groups = np.asarray(mdav(qi, k).groups)
        for label in set(groups.tolist()):
            members = np.flatnonzero(groups == label)
            centroid = qi[members].mean(axis=0)
            (g,) = [g for g in range(len(outcome.group_sizes))
                    if np.allclose(outcome.rows[starts[g], :len(CONFIG.qi)], centroid)]
            released = Counter(tuple(r) for r in outcome.rows[starts[g]:starts[g + 1], len(CONFIG.qi):].tolist())
            for i in members:
                previous = candidates[i]
                candidates[i] = released if previous is None else previous & released
    right = sum(1 for i, c in enumerate(candidates) if c is not None and list(c) == [tuple(conf[i].tolist())])
    wrong = sum(1 for i, c in enumerate(candidates) if c is not None and len(c) == 1 and
                list(c) != [tuple(conf[i].tolist())])
    return right, wrong


@pytest.mark.parametrize("seed", SEEDS)
def test_two_releases_of_the_same_respondents_with_another_k_are_intersected_the_measured_limit(seed: int) -> None:
    """Two honest rounds over the same respondents, k = 2 then k = 3 (found by an attacker; SPEC §3, across
    rounds): every verdict accepts in each, and the collector, linking each subject's two registrations by her
    QIs, attributes a large share of the records (about half on the attacker's 1,000 survey respondents). The
    same k twice gives nothing (MDAV is deterministic). The protocol has no memory across rounds."""
    two, three = (play({}, seed=seed, config=dataclasses.replace(CONFIG, k=k)) for k in (2, 3))
    for played in (two, three):
        assert played.outcome.completed and all(v["accept"] is True for v in played.outcome.verdicts)
    right, wrong = _intersected([two, three])
    assert wrong == 0 and right >= 0.2 * two.data.n, right
    assert _intersected([three, play({}, seed=seed, config=dataclasses.replace(CONFIG, k=3))]) == (0, 0)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("retained", [False, True], ids=["inbox-only", "real-retained"])
@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_a_victim_shown_a_roster_of_her_own_refuses_at_the_bulletin(withhold: bool, retained: bool, seed: int) -> None:
    """``split-roster`` (found by a reviewer of the fellow entries): the victim alone is shown, on her inbox, a
    roster that also holds the collector's puppets, and her fellows lead to its root. Before, her record was
    attributed (3 of 3 seeds), and withheld nobody noticed. Now her reveal waits for her roster broadcast on its
    retained bulletin topic (SPEC §7.3 roster): the real one reaches her there (retained, or broadcast again at
    the others' fetch), she refuses and complains `roster_mismatch`; her run of her own never opens. She holds
    both signed rosters, a proof of equivocation: public withheld too."""
    p = play({"collector": {"strategy": "split-roster", "withhold": withhold, "retained": retained}}, seed=seed, n=31)
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    assert victim is not None and entry["deviated"]
    assert entry["leak"] == [] and p.round.collector.attributions() == {}  # type: ignore[attr-defined]
    (node,) = [s for s in p.round.subjects if s.public_key == victim]
    proof = node.equivocation_evidence()
    assert proof is not None and entry["public"] and entry["equivocation_proofs"] == 1
    assert not check_equivocation(EquivocationEvidence(*proof), p.round.collector.round_id,
                                  p.round.collector.public_key).problem
    if withhold:
        assert p.outcome.phase == "aborted" and p.verdicts() == {}
    else:
        assert p.verdicts()[sid_of(victim)]["reason"] == "roster_mismatch"
        assert entry["public"] and entry["complaints"] == {"roster_mismatch": 1}
        assert p.outcome.completed and len(p.outcome.rows) == p.data.n - 1  # everyone else, released
        assert sum(1 for v in p.verdicts().values() if v["accept"] is True) == p.data.n - 1


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_a_victim_alone_on_the_bulletin_before_the_others_arrive_is_attributed_the_measured_limit(
        withhold: bool, seed: int) -> None:
    """``split-roster-early`` (found by an attacker on the roster gate): the broadcast reaches only who
    subscribes at the time. The victim answers the announce 2 s before the others; the collector keeps her off
    its roster, shows her a roster of her own (her leaf and k - 1 puppets) on the retained roster topic, clears
    it, and runs her alone with its puppets before the others arrive. Her record is attributed, 3 of 3 seeds;
    the others play an honest round (released: n - 1 rows, all accepting) and her complaint is refused
    (`not_registered`). The Sybil limit in time (SPEC §3). But it is public, released or withheld: the real
    roster (and the release) then reach her too, two roster roots the collector signed for one round, which
    she keeps with the announce as a proof any auditor checks without her trust or the collector's transcript
    (before: nothing public)."""
    p = play({"collector": {"strategy": "split-roster-early", "withhold": withhold, "others_after": 2.0}},
             seed=seed, n=31)
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    assert entry["leak"] == [sid_of(victim)] and p.excluded() == {}
    (node,) = [s for s in p.round.subjects if s.public_key == victim]
    proof = node.equivocation_evidence()
    assert proof is not None and entry["public"] and entry["equivocation_proofs"] == 1
    checked = check_equivocation(EquivocationEvidence(*proof), p.round.collector.round_id,
                                 p.round.collector.public_key)
    assert not checked.problem and checked.collector_key == p.round.collector.public_key
    if withhold:
        assert p.outcome.phase == "aborted" and p.verdicts() == {}
    else:
        assert p.outcome.completed and len(p.outcome.rows) == p.data.n - 1
        assert sid_of(victim) not in p.verdicts()
        assert sum(1 for v in p.verdicts().values() if v["accept"] is True) == p.data.n - 1
        # She did complain; the collector refused her verdict: she is on no roster it publishes.
        assert node.verdict is not None and node.verdict.reason == "roster_mismatch"
        her_up = topics.subject_up(p.round.collector.round_id, victim)
        assert any(r.reason == "not_registered" and r.kind == "verdict" and r.topic == her_up
                   for r in p.round.collector.rejections)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_a_victim_whose_round_of_her_own_is_finished_first_holds_no_proof_the_measured_limit(
        withhold: bool, seed: int) -> None:
    """``split-roster-early`` with ``release_first`` (found by a reviewer of the proof of equivocation): the
    collector also sends her a release of her group alone (her roster's root), acknowledges her verdict, and holds
    the real roster back until then: she is done and no longer listens when another root is published, so she
    holds no proof; her record is attributed. But it is public: her receipt (her announce and the first roster she
    received) and any other subject's state two roots, which an auditor combines into a proof, released or
    withheld, with no transcript (``roster_receipts_disagree``); her verdict and its signed acknowledgement,
    missing from the collector's record, are a second trace where there is a transcript."""
    p = play({"collector": {"strategy": "split-roster-early", "others_after": 2.0, "release_first": True,
                            "withhold": withhold}}, seed=seed, n=31)
    entry = p.collector_entry
    collector = p.round.collector
    victim = collector.victim_key  # type: ignore[attr-defined]
    (node,) = [s for s in p.round.subjects if s.public_key == victim]
    assert entry["leak"] == [sid_of(victim)] and entry["equivocation_proofs"] == 0
    assert not any(s.equivocation_evidence() is not None for s in p.round.subjects)
    assert node.state == SubjectState.DONE and node.verdict is not None and node.verdict.accept
    assert collector.victim_verdict == node.verdict  # type: ignore[attr-defined]
    assert entry["auditor"] == {"acknowledged_verdict_missing": 1, "roster_receipts_disagree": 1}
    assert entry["detected_by"] == ["auditor"] and entry["public"]
    assert p.outcome.phase == ("aborted" if withhold else "done")
    other = next(s for s in p.round.subjects if s.public_key != victim)
    receipts = [RosterReceipt(*r) for r in (node.roster_receipt(), other.roster_receipt()) if r is not None]
    (proof,), problems = combine_receipts(receipts)
    assert not problems and not check_equivocation(proof, collector.round_id, collector.public_key).problem


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("withhold", [False, True], ids=["released", "withheld"])
def test_a_roster_of_her_own_broadcast_to_everyone_subscribed_is_attributed_and_complained_of_on_every_device(
        withhold: bool, seed: int) -> None:
    """The same with everyone subscribed at once: every subject takes the victim's roster from the bulletin,
    then sees the real one (two signed rosters: `split_view`); the others' assigns do not fit the first, they
    are excluded `silent`. Her record is attributed (the Sybil limit: puppets on the roster everyone saw).
    Every other subject holds a `split_view` complaint; released, each sends it in a verdict although she never
    had a group (a release before any assign), which the collector records only if it has not finished. Each
    also holds both signed rosters, a proof of equivocation: public even when withheld (before: not)."""
    p = play({"collector": {"strategy": "split-roster-early", "others_after": 0.0, "withhold": withhold}},
             seed=seed, n=31)
    entry = p.collector_entry
    victim = p.round.collector.victim_key  # type: ignore[attr-defined]
    assert entry["leak"] == [sid_of(victim)] and len(p.outcome.rows) == 0
    others = [s for s in p.round.subjects if s.public_key != victim]
    assert all("split_view" in s.complaints for s in others)
    assert SubjectState.VERDICT_SENT in STATE_EDGES[SubjectState.REGISTERED]
    assert entry["public"] and entry["equivocation_proofs"] >= len(others)
    for subject in others:
        proof = subject.equivocation_evidence()
        assert proof is not None and not check_equivocation(EquivocationEvidence(*proof)).problem
    if withhold:
        assert all(s.verdict is None for s in others)
    else:
        assert all(s.verdict is not None and s.verdict.reason == "split_view" for s in others)
        assert all(s.state in (SubjectState.VERDICT_SENT, SubjectState.DONE) for s in others)
