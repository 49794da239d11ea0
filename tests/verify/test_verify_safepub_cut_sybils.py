"""SafePub's cut of a class above 2k - 1 (349a7ad, SPEC §9.1), attacked with Sybils whose per-round keys the
collector grinds (found by an attacker of that commit, in roster order; defeated since the cut follows
`safepub_cut_order`, a hash of the roster root and the key).

The cut follows the sorted per-round keys, which the collector cannot choose for the subjects, but can for identities
of its own: a key's first 12 bits equal to the victim's costs about 4,096 key generations, and no respondent's key is
then likely to sort between them. With 2k - 2 such Sybils just below her key and 2k - 2 just above, in her class (her
QIs, as `fabricate-members` registers them), every cut part holding her (at most 2k - 1 contiguous keys) is hers and
Sybils only: her record is alone in her group's release once its own are taken out, and `coutil verify` passes,
since the groups are the cut the auditor recomputes. Before the cut her class held every respondent of her bins (here
all 30: one bin for age, her height bin shared with most), and no number of Sybils could isolate her in it.

Sybils are out of the protocol's scope (SPEC §3, the remaining limit: admission control), and MDAV rounds are open
to them too. In roster order (sorted keys) the attack cost nothing the auditor or she could see. In the cut order the
keys ground beside hers land anywhere in her class: the test below shows her not isolated. What is left (SPEC §9.1):
any change of the registrations re-draws the whole order, so a collector can grind the roster root instead, each
attempt a part of Sybils around her with odds of about (Sybils / class)^(part - 1): here (12 / 41)^6, some 1,600
attempts; at the DP round's k = 34, with Sybils a third of her class, about 3^33. Closing it needs admission control,
or a cut order fixed by a public value drawn after registration closes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.adversary.collector import FabricateMembers
from coutil.protocol import crypto
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.round.transcript import read_transcript
from tests.verify.test_verify import failed, run_round, verify
from tests.verify.test_verify_findings import SAFEPUB

ONE_CLASS = dataclasses.replace(SAFEPUB, safepub_bins=(("age", (0.0, 150.0)), ("height", (0.0, 100.0, 300.0))))
SEED, VICTIM = 1, 0


class SybilsBesideHerKey(FabricateMembers):
    """fabricate-members with 4k - 4 Sybils at the victim's QIs, their keys ground to sort right beside hers."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.configure({"victim": VICTIM})
        self.victim_key = crypto.SigningKey.generate(SeededRandom(SEED).fork(f"subject-{VICTIM}")).public

    def _sybil_count(self) -> int:
        return 4 * self.config.k - 4

    def _spawn(self, qi: tuple[float, ...], now: float) -> list[Outgoing]:
        assert self.victim_key is not None and self._announce_out is not None
        victim, half = self.victim_key, self._sybil_count() // 2
        rng = SeededRandom(self._rng.bytes(32))
        below: list[str] = []
        above: list[str] = []
        tries = 0
        while len(below) < half or len(above) < half:
            label = f"grind-{tries}"
            tries += 1
            key = crypto.SigningKey.generate(rng.fork(label)).public  # what SubjectNode draws first from its rng
            if key[0] == victim[0] and key[1] >> 4 == victim[1] >> 4:
                side = below if key < victim else above
                if len(side) < half:
                    side.append(label)
        out: list[Outgoing] = []
        for i, label in enumerate(below + above):
            out.extend(self._host_sybil(qi, (float(i + 1),) * len(self.config.confidential), rng.fork(label), now))
        self.deviated = True
        return out


def test_sybils_with_keys_ground_beside_hers_cannot_isolate_a_victim_in_a_large_safepub_class(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = run_round(tmp_path, SybilsBesideHerKey, n=30, seed=SEED, config=ONE_CLASS)
    collector = run.collector
    assert isinstance(collector, SybilsBesideHerKey) and len(collector.sybils) == 4 * ONE_CLASS.k - 4
    victim = run.subjects[VICTIM]
    assert victim.public_key == collector.victim_key
    # Her class holds every respondent of her bins beside the Sybils: before the cut, one group of all of them.
    registrations = read_transcript(run.directory / "transcript.json").registrations
    assert len(registrations) >= 30 + len(collector.sybils) - 2
    code, result, _ = verify(run.directory, capsys)
    assert code == 0, failed(result)  # the auditor sees nothing: the groups are the cut it recomputes
    attributed = collector.attributions()
    if victim.public_key in attributed:
        assert np.allclose(attributed[victim.public_key], victim._confidential)
    assert victim.public_key not in attributed, "her record is alone among the Sybils' in her group"
