"""Subject and collector strategies, plugged into the experiments by name.

A *strategy* says how one subject takes part in a collaborative cell. The harness asks it three
questions and nothing else, so a strategy never touches protocol internals:

- ``channel``: ``"protocol"`` (she runs the protocol node), ``"decline"`` (she gives nothing),
  ``"plain"`` (she hands her raw record to the collector outside the protocol) or ``"local"`` (she
  masks her own record alone with the public scales and hands that in);
- ``submitted(qi, confidential, scales, rng)``: the values her node registers and shares (honest:
  her own; a misreport shifts them);
- ``vanish_state``: the subject state whose entry makes her go silent for good (None: never).

Strategies are registered by name (`register_subject_strategy`) with a factory taking the
strategy's parameters from the study file, e.g. ``misreport-qi`` with ``shift = 2.0``. The deviation
library (``coutil.adversary``) can register its own named strategies here; a strategy whose
behaviour needs the node itself will need a further hook (``node_factory``), left for that library.
Collector strategies (`register_collector_strategy`) are named the same way; only ``honest``
exists until that library plugs in, and its payoff is computed through `CollectorStrategy.payoff`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.protocol.states import SubjectState

FloatArray = NDArray[np.float64]
CHANNELS = ("protocol", "decline", "plain", "local")


@dataclass(frozen=True)
class SubjectStrategy:
    """How one subject plays a cell (see the module docstring)."""

    name: str
    channel: str = "protocol"
    #: QI shift in units of each QI's public scale (misreport-qi).
    qi_shift: float = 0.0
    #: Confidential shift in units of each confidential attribute's public scale (misreport-confidential).
    confidential_shift: float = 0.0
    #: Go silent on entering this subject state (None: never).
    vanish_state: str | None = None
    #: Noise-to-scale variance ratio a of the local channel.
    local_a: float = 1.0

    def __post_init__(self) -> None:
        if self.channel not in CHANNELS:
            raise InputError(f"strategy {self.name!r}: unknown channel {self.channel!r} (known: {', '.join(CHANNELS)})")

    @property
    def deviates(self) -> bool:
        return self.name != "honest"

    def submitted(self, qi: FloatArray, confidential: FloatArray, qi_scales: FloatArray,
                  confidential_scales: FloatArray) -> tuple[FloatArray, FloatArray]:
        """What her node registers (QIs) and shares (confidential values)."""
        return (np.asarray(qi + self.qi_shift * qi_scales, dtype=np.float64),
                np.asarray(confidential + self.confidential_shift * confidential_scales, dtype=np.float64))


StrategyFactory = Callable[[Mapping[str, object]], SubjectStrategy]

_SUBJECT: dict[str, StrategyFactory] = {}


def register_subject_strategy(name: str, factory: StrategyFactory) -> None:
    """Make ``name`` usable in a study file (``strategy = "name"``); a second registration replaces the first."""
    _SUBJECT[name] = factory


def subject_strategy_names() -> list[str]:
    return sorted(_SUBJECT)


def _float(params: Mapping[str, object], key: str, default: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"strategy parameter {key} must be a number, got {value!r}")
    return float(value)


def _check_keys(name: str, params: Mapping[str, object], known: set[str]) -> None:
    unknown = sorted(set(params) - known)
    if unknown:
        raise InputError(f"strategy {name!r}: unknown parameter(s) {', '.join(unknown)}"
                         f"{'; known: ' + ', '.join(sorted(known)) if known else ' (it takes none)'}")


def subject_strategy(spec: str, params: Mapping[str, object] | None = None) -> SubjectStrategy:
    """The strategy called ``spec`` (``silent@registered`` style names carry a state) with ``params``."""
    params = dict(params or {})
    base, _, state = spec.partition("@")
    factory = _SUBJECT.get(spec) or (_SUBJECT.get(base + "@") if state else None)
    if factory is None:
        raise InputError(f"unknown subject strategy {spec!r} (known: {', '.join(subject_strategy_names())})")
    if state:
        params["state"] = state
    return factory(params)


def _simple(name: str, channel: str) -> StrategyFactory:
    def make(params: Mapping[str, object]) -> SubjectStrategy:
        _check_keys(name, params, set())
        return SubjectStrategy(name, channel)
    return make


def _local(params: Mapping[str, object]) -> SubjectStrategy:
    _check_keys("local", params, {"a"})
    return SubjectStrategy("local", "local", local_a=_float(params, "a", 1.0))


def _misreport_qi(params: Mapping[str, object]) -> SubjectStrategy:
    _check_keys("misreport-qi", params, {"shift"})
    return SubjectStrategy("misreport-qi", qi_shift=_float(params, "shift", 2.0))


def _misreport_confidential(params: Mapping[str, object]) -> SubjectStrategy:
    _check_keys("misreport-confidential", params, {"shift"})
    return SubjectStrategy("misreport-confidential", confidential_shift=_float(params, "shift", 2.0))


def _silent(params: Mapping[str, object]) -> SubjectStrategy:
    _check_keys("silent@", params, {"state"})
    state = str(params.get("state", "sharing"))
    known = [str(s) for s in SubjectState]
    if state not in known:
        raise InputError(f"silent@{state}: unknown subject state (known: {', '.join(known)})")
    return SubjectStrategy(f"silent@{state}", vanish_state=state)


def _free_rider(params: Mapping[str, object]) -> SubjectStrategy:
    _check_keys("free-rider", params, set())
    return SubjectStrategy("free-rider", vanish_state="sharing")


register_subject_strategy("honest", _simple("honest", "protocol"))
register_subject_strategy("decline", _simple("decline", "decline"))
register_subject_strategy("plain", _simple("plain", "plain"))
register_subject_strategy("local", _local)
register_subject_strategy("misreport-qi", _misreport_qi)
register_subject_strategy("misreport-confidential", _misreport_confidential)
register_subject_strategy("silent@", _silent)
register_subject_strategy("free-rider", _free_rider)


@dataclass(frozen=True)
class CollectorStrategy:
    """How the collector plays. ``honest`` only, until the deviation library registers others.

    ``payoff(utility, gain)``: the collector's payoff is the utility of what it collects plus what a
    deviation gains it (``gain``, 0 for honest play; a deviation reports its own gain measure).
    """

    name: str

    def payoff(self, utility: float, gain: float = 0.0) -> float:
        return utility + gain


_COLLECTOR: dict[str, Callable[[Mapping[str, object]], CollectorStrategy]] = {
    "honest": lambda params: CollectorStrategy("honest"),
}


def register_collector_strategy(name: str, factory: Callable[[Mapping[str, object]], CollectorStrategy]) -> None:
    """The hook for the deviation library's collector strategies."""
    _COLLECTOR[name] = factory


def collector_strategy(name: str, params: Mapping[str, object] | None = None) -> CollectorStrategy:
    factory = _COLLECTOR.get(name)
    if factory is None:
        raise InputError(f"unknown collector strategy {name!r} (known: {', '.join(sorted(_COLLECTOR))})")
    return factory(dict(params or {}))
