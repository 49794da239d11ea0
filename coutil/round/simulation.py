"""What only a simulation has: fault plans (subjects who vanish) and synthetic records.

Everything is a function of one integer seed, so a simulated round is reproducible bit for bit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coutil.errors import InputError
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SeededRandom
from coutil.protocol.states import SubjectState
from coutil.sdc.dataset import Dataset


@dataclass(frozen=True)
class FaultPlan:
    """Round-level fault injection: a fraction of subjects vanish shortly after entering a state."""

    #: Fraction of subjects (chosen with the seed) that vanish for good.
    vanish_fraction: float = 0.0
    #: The subject state whose entry starts a vanishing subject's clock ("sharing": mid-shuffle).
    vanish_state: str = "sharing"
    #: She vanishes at a uniform time in ``[entry, entry + vanish_window)``.
    vanish_window: float = 1.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.vanish_fraction < 1.0:
            raise InputError(f"faults: vanish_fraction must be in [0, 1), got {self.vanish_fraction!r}")
        if not math.isfinite(self.vanish_window) or self.vanish_window < 0:
            raise InputError("faults: vanish_window must be a non-negative number of seconds")
        known = [str(s) for s in SubjectState]
        if self.vanish_state not in known:
            raise InputError(f"faults: vanish_state must be one of {', '.join(known)}, got {self.vanish_state!r}")

    @property
    def active(self) -> bool:
        return self.vanish_fraction > 0


#: Who an `Outage` cuts off.
OUTAGE_TARGETS = ("everyone", "subjects", "collector")


@dataclass(frozen=True)
class Outage:
    """A transport outage in a simulated round: ``who`` can neither send nor receive in ``[start, end)``.

    ``"everyone"`` is a broker outage; ``"subjects"`` cuts every subject off while the collector's own
    link stays up (it is not told: it must infer the outage from silence); ``"collector"`` cuts the
    collector alone (it is told, as the MQTT driver tells it when its connection drops).
    """

    start: float
    end: float
    who: str = "everyone"

    def __post_init__(self) -> None:
        if self.who not in OUTAGE_TARGETS:
            raise InputError(f"outage: who must be one of {', '.join(OUTAGE_TARGETS)}, got {self.who!r}")
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.end < self.start:
            raise InputError("outage: expected finite start <= end (seconds of virtual time)")


def vanishing_subjects(n: int, fraction: float, seed: int) -> list[int]:
    """The rows of the subjects who vanish (a function of the seed)."""
    rng = SeededRandom(seed).fork("faults")
    count = round(fraction * n)
    chosen: set[int] = set()
    while len(chosen) < count:
        chosen.add(rng.below(n))
    return sorted(chosen)


def vanish_time(seed: int, node_id: str, entered: float, faults: FaultPlan) -> float:
    """When a vanishing subject who entered ``faults.vanish_state`` at ``entered`` stops: uniform in
    the vanish window, drawn from her own stream."""
    draw = SeededRandom(seed).fork("vanish-times").fork(node_id).below(10**6)
    return entered + faults.vanish_window * draw / 10**6


def synthetic_dataset(n: int, config: RoundConfig, seed: int) -> Dataset:
    """``n`` synthetic records: correlated QIs (age-like scales) and confidential values that depend on them.

    Values are rounded to cents, as survey answers would be; the correlation makes the released
    groups' confidential values informative, like real microdata.
    """
    rng = np.random.default_rng([seed, 0x5EED])
    latent = rng.normal(size=(n, 1))
    qi = 40.0 + 12.0 * (0.7 * latent + 0.7 * rng.normal(size=(n, len(config.qi))))
    conf = 30000.0 * np.exp(0.4 * latent + 0.5 * rng.normal(size=(n, len(config.confidential))))
    values = np.round(np.hstack([qi, conf]), 2).astype(np.float64)
    return Dataset(config.columns, values, f"<synthetic n={n} seed={seed}>")
