"""Re-execution of a failed run (`coutil.protocol.shuffle.assign_blame`, SPEC §8.4) on a run of three built by hand:
who is named when a step has no batch."""

from __future__ import annotations

from dataclasses import dataclass

from coutil.protocol import crypto
from coutil.protocol.node import SeededRandom
from coutil.protocol.shuffle import BlameResult, assign_blame, outer_aad

ROUND_ID = bytes(16)
GROUP, RUN, G = 0, 0, 3


@dataclass
class Run:
    members: tuple[bytes, ...]
    keys: dict[bytes, crypto.KxKey]
    submissions: dict[bytes, bytes]
    batches: dict[int, tuple[bytes, ...]]
    permutations: dict[bytes, tuple[int, ...]]

    def blame(self, voters: list[bytes]) -> BlameResult:
        return assign_blame(
            self.members, {m: k.public for m, k in self.keys.items()}, self.submissions, self.batches,
            {m: k.secret for m, k in self.keys.items()}, self.permutations, voters,
            round_id=ROUND_ID, group=GROUP, run=RUN)


def _honest_run() -> Run:
    """Every member submits an onion, every mixer peels and permutes (identity order: nothing here needs a shuffle)."""
    rng = SeededRandom(7)
    members = tuple(sorted(crypto.SigningKey.generate(rng.fork(f"id{i}")).public for i in range(G)))
    keys = {m: crypto.KxKey.generate(rng.fork(f"kx{i}")) for i, m in enumerate(members)}
    publics = [keys[m].public for m in members]
    submissions = {m: crypto.build_onion(bytes([i]) * 40, publics, lambda j: outer_aad(ROUND_ID, GROUP, RUN, j),
                                         rng.fork(f"onion{i}")) for i, m in enumerate(members)}
    items = tuple(submissions[m] for m in members)
    batches: dict[int, tuple[bytes, ...]] = {}
    for step, mixer in enumerate(members, start=1):
        items = tuple(crypto.peel(keys[mixer], item, outer_aad(ROUND_ID, GROUP, RUN, step)) for item in items)
        batches[step] = items
    return Run(members, keys, submissions, batches, dict.fromkeys(members, tuple(range(G))))


def test_an_honest_run_names_its_false_no_go_voter() -> None:
    run = _honest_run()
    assert run.blame([run.members[2]]).culprits == ((run.members[2], "blamed_false_complaint"),)


def test_a_no_go_before_the_run_reached_a_mixer_names_the_voter_not_the_mixer() -> None:
    """`early-no-go`: mixer 2 blamed before her input came and never mixed (no batch, no permutation). Before, the
    empty permutation named her `blamed_tamper` (an attacker's finding, 4 honest members excluded in one seed)."""
    run = _honest_run()
    voter = run.members[2]
    del run.batches[2], run.batches[3]
    run.permutations[run.members[1]] = ()
    run.permutations[voter] = ()
    assert run.blame([voter]).culprits == ((voter, "blamed_false_complaint"),)


def test_a_mixer_who_voted_no_go_at_her_step_withheld_her_batch() -> None:
    run = _honest_run()
    mixer = run.members[1]
    del run.batches[2], run.batches[3]
    run.permutations[mixer] = ()
    assert run.blame([mixer]).culprits == ((mixer, "blamed_false_complaint"),)


def test_a_batch_mixed_from_nothing_after_a_missing_step_names_its_mixer() -> None:
    """Two colluders: an early no-go voter, and the third mixer publishing a batch although the second (honest)
    never mixed. The missing step does not name the honest second mixer: the later batch had no input, and every
    blame carries the batch its author took (SPEC §8.4), so a collector could not have left it out."""
    run = _honest_run()
    honest, fabricator = run.members[1], run.members[2]
    del run.batches[2]
    run.batches[3] = tuple(bytes([9]) * len(item) for item in run.batches[3])
    run.permutations[honest] = ()
    assert run.blame([run.members[0]]).culprits == ((fabricator, "blamed_tamper"),)
