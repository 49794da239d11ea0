"""Subject and collector strategies, plugged into the experiments by name.

A *strategy* says how one subject takes part in a collaborative cell. The harness asks it a few
questions and nothing else, so a strategy never touches protocol internals:

- ``channel``: ``"protocol"`` (she runs the protocol node), ``"decline"`` (she gives nothing),
  ``"plain"`` (she hands her raw record to the collector outside the protocol) or ``"local"`` (she
  masks her own record alone with the public scales and hands that in);
- ``submitted(qi, confidential, qi_scales, confidential_scales)``: the values her node registers and
  shares (honest: her own; a misreport shifts them, in units of the public scales);
- ``vanish_state``: the subject state whose entry makes her go silent for good (None: never);
- ``node``: the deviation library's subject strategy her node runs (`coutil.adversary`: ``copycat``,
  ``tamper``, ``free-rider``, ...), with its parameters (``node_params``); None: the honest node.

Every subject strategy of the deviation library is registered here under its own name, except
``misreport-qi`` and ``misreport-confidential``, which the harness applies to the values it gives
the node (shifts in public standard deviations, so that the ground truth keeps her true record).
Study files pass parameters in ``[strategies.NAME]``; a table with a ``strategy`` key names an
alias (``[strategies.silent-vote]`` with ``strategy = "silent"`` and ``phase = "vote"``), so that one
study can compare one strategy under several parameters.

Collector strategies (`collector_strategy`) are ``honest`` and every collector strategy of the
library (``rerun-subtract``, ``fabricate-members``, ...). The collector's payoff is
`CollectorStrategy.payoff`: the utility of what it collects, plus what it learns (honest subjects'
records it attributes, as a share of the subjects), minus what detection costs it (a published,
signed complaint). A library registers more with `register_subject_strategy` and
`register_collector_strategy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from coutil.adversary import COLLECTOR_STRATEGIES, SUBJECT_STRATEGIES
from coutil.adversary.plan import Params, check_strategy_params
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
    #: The deviation library's strategy her node runs (None: the honest node), and its parameters.
    node: str | None = None
    node_params: Params = ()

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


def _alias(spec: str, params: dict[str, object], table: str) -> tuple[str, str | None]:
    """(the registered name to build, the alias it is built under): a ``strategy`` key in ``params``
    makes ``spec`` an alias of that strategy (``table``: where the study file gives it)."""
    if "strategy" not in params:
        return spec, None
    base = params.pop("strategy")
    if not isinstance(base, str) or base == spec:
        raise InputError(f"[{table}.{spec}]: strategy must name another strategy, got {base!r}")
    return base, spec


def subject_strategy(spec: str, params: Mapping[str, object] | None = None) -> SubjectStrategy:
    """The strategy called ``spec`` (``silent@registered`` style names carry a state) with ``params``
    (a ``strategy`` key: ``spec`` is an alias of that strategy, see the module docstring)."""
    params = dict(params or {})
    spec, alias = _alias(spec, params, "strategies")
    if alias is not None:
        return dataclasses.replace(subject_strategy(spec, params), name=alias)
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


#: Library strategies the harness applies to the values it gives the node instead (see the docstring).
DATA_LEVEL = frozenset({"misreport-qi", "misreport-confidential"})


def _library(name: str) -> StrategyFactory:
    def make(params: Mapping[str, object]) -> SubjectStrategy:
        checked = check_strategy_params("subject", name, params, f"strategy {name!r}")
        return SubjectStrategy(name, node=name, node_params=checked)
    return make


register_subject_strategy("honest", _simple("honest", "protocol"))
register_subject_strategy("decline", _simple("decline", "decline"))
register_subject_strategy("plain", _simple("plain", "plain"))
register_subject_strategy("local", _local)
register_subject_strategy("misreport-qi", _misreport_qi)
register_subject_strategy("misreport-confidential", _misreport_confidential)
register_subject_strategy("silent@", _silent)
for _name in SUBJECT_STRATEGIES:
    if _name not in DATA_LEVEL:
        register_subject_strategy(_name, _library(_name))


#: Default weights of the collector's payoff (a study's ``[collector]`` table overrides them).
COLLECTOR_WEIGHTS: dict[str, float] = {"leak": 1.0, "detection": 1.0}


@dataclass(frozen=True)
class CollectorStrategy:
    """How the collector plays: ``honest`` or a strategy of the deviation library (``node``)."""

    name: str
    node: str | None = None
    node_params: Params = ()

    @property
    def deviates(self) -> bool:
        return self.node is not None

    @staticmethod
    def payoff(utility: float, leaked_share: float = 0.0, published: bool = False,
               weights: Mapping[str, float] | None = None) -> float:
        """u_C = U + w_leak * leaked_share - w_detection * [a complaint about it is public]: the utility of
        what it collects, plus the share of subjects whose confidential record it attributes (from the
        ground truth), minus the cost of being caught by a signed complaint any auditor can check."""
        w = {**COLLECTOR_WEIGHTS, **(weights or {})}
        return utility + w["leak"] * leaked_share - w["detection"] * float(published)


CollectorFactory = Callable[[Mapping[str, object]], CollectorStrategy]


def _honest_collector(params: Mapping[str, object]) -> CollectorStrategy:
    _check_keys("honest", params, set())
    return CollectorStrategy("honest")


def _library_collector(name: str) -> CollectorFactory:
    def make(params: Mapping[str, object]) -> CollectorStrategy:
        return CollectorStrategy(name, name, check_strategy_params("collector", name, params, f"collector {name!r}"))
    return make


_COLLECTOR: dict[str, CollectorFactory] = {"honest": _honest_collector}
for _name in COLLECTOR_STRATEGIES:
    _COLLECTOR[_name] = _library_collector(_name)


def register_collector_strategy(name: str, factory: CollectorFactory) -> None:
    """Make ``name`` usable as a collector strategy in a study file; a second registration replaces the first."""
    _COLLECTOR[name] = factory


def collector_strategy_names() -> list[str]:
    return sorted(_COLLECTOR)


def collector_strategy(name: str, params: Mapping[str, object] | None = None) -> CollectorStrategy:
    """The collector strategy ``name`` with ``params`` (a ``strategy`` key: an alias, as for subjects)."""
    params = dict(params or {})
    name, alias = _alias(name, params, "collectors")
    if alias is not None:
        return dataclasses.replace(collector_strategy(name, params), name=alias)
    factory = _COLLECTOR.get(name)
    if factory is None:
        raise InputError(f"unknown collector strategy {name!r} (known: {', '.join(collector_strategy_names())})")
    return factory(params)
