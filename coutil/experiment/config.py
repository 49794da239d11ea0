"""Study files (``simulations/experiments/NAME.toml``): a grid of cells, the baselines, the payoff model.

::

    [study]
    name = "methods"
    kind = "rounds"                  # "rounds" (default) or "permutation" (paper 002, Figures 2-3)
    seeds = [1, 2, 3]
    methods = ["collaborative", "centralized", "local", "plain", "decline"]
    local_noise = [0.1, 1.0]         # a of local anonymization: e ~ N(0, a s_j^2), s_j public scales
    focal = 5                        # subjects per seed who play the cell's deviation (paired with honest play)
    intruder_random_records = 2000

    [grid]                           # every combination is one cell (times every seed)
    dataset = ["../../tests/data/sdcmicro/CASCrefmicrodata.csv"]   # a CSV (relative to this file) or "synthetic"
    n = [1080]
    k = [3, 5, 10]
    attributes = ["census"]          # names of [attributes.NAME] tables
    faults = ["none"]                # names of [faults.NAME] tables (coutil.round.simulation.FaultPlan)
    deviation = ["honest"]           # the focal subjects' strategy (coutil.experiment.strategies)
    mix = ["honest"]                 # names of [mix.NAME] tables: the other subjects' strategies by fraction
    collector = ["honest"]           # the collector's strategy (honest or one of coutil.adversary's)

    [attributes.census]
    qi = ["AFNLWGT", "AGI", "EMCONTRB", "PTOTVAL"]
    confidential = ["FEDTAX", "FICA", "STATETAX"]
    [strategies.misreport-qi]        # parameters of a named strategy
    shift = 2.0
    [strategies.silent-vote]         # an alias: strategy silent with these parameters
    strategy = "silent"
    phase = "vote"
    [collectors.fabricate-members]   # parameters of a collector strategy (victim: a row of the cell's data)
    isolate = true
    [collector_types.reputation]     # the collector's payoff: U + leak * share attributed - detection * [public]
    leak = 1.0
    detection = 1.0
    [types.interested-concerned]     # u = a U - b risk - c cost
    a = 1.0
    b = 1.0
    c = 0.01
    fraction = 1.0                   # share of the population with this type (labels rows only)
    [risk]                           # risk = collector r_C + intruder r_I + group r_G (weights)
    collector = 1.0
    [round]                          # further RoundConfig keys of the collaborative round
    random_records = 200
    [permutation]                    # kind = "permutation" only (see coutil.experiment.permutation)
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coutil.errors import InputError
from coutil.experiment.strategies import COLLECTOR_WEIGHTS, collector_strategy, subject_strategy
from coutil.fileio import read_toml

METHODS = ("collaborative", "centralized", "local", "plain", "decline")
GRID_KEYS = ("dataset", "n", "k", "attributes", "faults", "deviation", "mix", "collector")
STUDY_KEYS = {"name", "kind", "seeds", "methods", "local_noise", "focal", "intruder_random_records"}
TABLES = {"study", "grid", "attributes", "faults", "strategies", "mix", "types", "risk", "round", "permutation",
          "collectors", "collector_types"}


@dataclass(frozen=True)
class SubjectType:
    name: str
    a: float
    b: float
    c: float
    fraction: float


@dataclass(frozen=True)
class Study:
    path: Path
    name: str
    kind: str
    seeds: tuple[int, ...]
    methods: tuple[str, ...]
    local_noise: tuple[float, ...]
    focal: int
    intruder_random_records: int
    grid: dict[str, list[Any]]
    attributes: dict[str, dict[str, list[str]]]
    faults: dict[str, dict[str, Any]]
    strategies: dict[str, dict[str, Any]]
    mix: dict[str, dict[str, float]]
    types: tuple[SubjectType, ...]
    risk: dict[str, float]
    round: dict[str, Any]
    permutation: dict[str, Any] = field(default_factory=dict)
    #: Collector strategy name -> its parameters ([collectors.NAME]).
    collectors: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Collector types: name -> weights of its payoff ([collector_types.NAME]: leak, detection).
    collector_types: dict[str, dict[str, float]] = field(default_factory=lambda: {"default": dict(COLLECTOR_WEIGHTS)})

    def cells(self) -> list[dict[str, Any]]:
        """Every (grid combination, seed) as a JSON-able dict with its ``id`` (stable: a hash of the values)."""
        if self.kind == "permutation":
            levels = list(self.permutation.get("noise", {}))
            combos: list[dict[str, Any]] = [{"noise": level} for level in levels]
        else:
            keys = [key for key in GRID_KEYS if key in self.grid]
            combos = [dict(zip(keys, values, strict=True))
                      for values in itertools.product(*(self.grid[key] for key in keys))]
        cells = []
        for combo in combos:
            for seed in self.seeds:
                cell = {**combo, "seed": seed}
                digest = hashlib.sha256(json.dumps(cell, sort_keys=True).encode()).hexdigest()[:12]
                cells.append({**cell, "id": digest})
        return cells

    def dataset_path(self, name: str) -> Path | None:
        if name == "synthetic":
            return None
        path = Path(name)
        return path if path.is_absolute() else self.path.parent / path

    def strategy_params(self, name: str) -> dict[str, Any]:
        return dict(self.strategies.get(name, {}))

    def collector_params(self, name: str) -> dict[str, Any]:
        return dict(self.collectors.get(name, {}))


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise InputError(f"{where} must be a non-empty list")
    return value


def _array(value: Any, where: str) -> list[Any]:
    """A list, possibly empty (unlike `_list`)."""
    if not isinstance(value, list):
        raise InputError(f"{where} must be a list, got {value!r}")
    return value


def _number(table: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where}: {key} must be a number, got {value!r}")
    return float(value)


# The checks below turn a value of the wrong TOML type into a one-line error naming the file and key,
# where int("a") or "a".get(...) deep in a cell would be a traceback (exit 1) after hours of other cells.
def _integer(value: Any, where: str, least: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{where} must be an integer, got {value!r}")
    if least is not None and value < least:
        raise InputError(f"{where} must be at least {least}, got {value}")
    return value


def _float(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{where} must be a number, got {value!r}")
    return float(value)


def _table(doc: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    value = doc.get(key, {})
    if not isinstance(value, dict):
        raise InputError(f"{where}: {key} must be a table ([{key}]), got {value!r}")
    return value


def _tables(doc: Mapping[str, Any], key: str, where: str) -> dict[str, dict[str, Any]]:
    """``[key.NAME]`` tables: each value of ``[key]`` a table."""
    tables = _table(doc, key, where)
    for name, value in tables.items():
        if not isinstance(value, dict):
            raise InputError(f"{where}: {key}.{name} must be a table ([{key}.{name}]), got {value!r}")
    return tables


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where} must be a list of names, got {value!r}")
    return list(value)


#: The grid keys whose values are numbers (the others name a file or a table).
_INTEGER_GRID_KEYS = ("n", "k")


def load_study(path: str | Path, *, check_files: bool = True) -> Study:
    """The study file at ``path``, validated (errors are `InputError`s naming the file and key);
    ``check_files=False`` does not require the data sets to exist (plotting finished results)."""
    p = Path(path)
    # read_toml: a directory, an unreadable or a binary file is a one-line error (exit 2), as on every command.
    doc = read_toml(p, "study file")
    unknown = sorted(set(doc) - TABLES)
    if unknown:
        raise InputError(f"{p}: unknown table(s) {', '.join(unknown)} (known: {', '.join(sorted(TABLES))})")
    for table in TABLES:
        _table(doc, table, str(p))
    study = dict(doc.get("study", {}))
    bad = sorted(set(study) - STUDY_KEYS)
    if bad:
        raise InputError(f"{p} [study]: unknown key(s) {', '.join(bad)}; known: {', '.join(sorted(STUDY_KEYS))}")
    kind = str(study.get("kind", "rounds"))
    if kind not in ("rounds", "permutation"):
        raise InputError(f"{p} [study]: kind must be 'rounds' or 'permutation', got {kind!r}")
    seeds = tuple(_integer(s, f"{p} [study] seeds[{i}]")
                  for i, s in enumerate(_list(study.get("seeds", [1]), f"{p} [study] seeds")))
    methods = tuple(_names(study.get("methods", list(METHODS)), f"{p} [study] methods"))
    for method in methods:
        if method not in METHODS:
            raise InputError(f"{p} [study]: unknown method {method!r} (known: {', '.join(METHODS)})")
    grid = {key: _list(value, f"{p} [grid] {key}") for key, value in doc.get("grid", {}).items()}
    bad = sorted(set(grid) - set(GRID_KEYS))
    if bad:
        raise InputError(f"{p} [grid]: unknown key(s) {', '.join(bad)}; known: {', '.join(GRID_KEYS)}")
    for key, values in grid.items():
        for value in values:
            if key in _INTEGER_GRID_KEYS:
                _integer(value, f"{p} [grid] {key}: each value", least=1)
            elif not isinstance(value, str):
                raise InputError(f"{p} [grid] {key}: each value must be a name (a string), got {value!r}")
    attributes = {name: {"qi": _names(t.get("qi", []), f"{p} [attributes.{name}] qi"),
                         "confidential": _names(t.get("confidential", []), f"{p} [attributes.{name}] confidential")}
                  for name, t in _tables(doc, "attributes", str(p)).items()}
    faults = {name: dict(t) for name, t in _tables(doc, "faults", str(p)).items()}
    faults.setdefault("none", {})
    mix = {name: {s: _float(f, f"{p} [mix.{name}] {s}") for s, f in t.items()}
           for name, t in _tables(doc, "mix", str(p)).items()}
    mix.setdefault("honest", {"honest": 1.0})
    strategies = {name: dict(t) for name, t in _tables(doc, "strategies", str(p)).items()}
    types = tuple(SubjectType(name, _number(t, "a", f"{p} [types.{name}]"), _number(t, "b", f"{p} [types.{name}]"),
                              _number(t, "c", f"{p} [types.{name}]"),
                              _number(t, "fraction", f"{p} [types.{name}]", 1.0))
                  for name, t in _tables(doc, "types", str(p)).items())
    if not types:
        types = (SubjectType("interested-concerned", 1.0, 1.0, 0.01, 1.0),)
    risk = {key: _number(doc.get("risk", {}), key, f"{p} [risk]", default)
            for key, default in (("collector", 1.0), ("intruder", 0.0), ("group", 0.0))}
    collector_types: dict[str, dict[str, float]] = {}
    for name, table in _table(doc, "collector_types", str(p)).items():
        where = f"{p} [collector_types.{name}]"
        if not isinstance(table, dict):
            raise InputError(f"{where} must be a table (keys: {', '.join(COLLECTOR_WEIGHTS)})")
        bad = sorted(set(table) - set(COLLECTOR_WEIGHTS))
        if bad:
            raise InputError(f"{where}: unknown key(s) {', '.join(bad)}; known: {', '.join(COLLECTOR_WEIGHTS)}")
        collector_types[name] = {key: _number(table, key, where, default) for key, default in COLLECTOR_WEIGHTS.items()}
    result = Study(
        path=p, name=str(study.get("name", p.stem)), kind=kind, seeds=seeds, methods=methods,
        local_noise=tuple(_float(a, f"{p} [study] local_noise[{i}]")
                          for i, a in enumerate(_array(study.get("local_noise", [1.0]), f"{p} [study] local_noise"))),
        focal=_integer(study.get("focal", 0), f"{p} [study] focal", least=0),
        intruder_random_records=_integer(study.get("intruder_random_records", 2000),
                                         f"{p} [study] intruder_random_records", least=0),
        grid=grid, attributes=attributes, faults=faults, strategies=strategies, mix=mix, types=types, risk=risk,
        round=dict(doc.get("round", {})), permutation=dict(doc.get("permutation", {})),
        collectors={name: dict(t) for name, t in _tables(doc, "collectors", str(p)).items()},
        collector_types=collector_types or {"default": dict(COLLECTOR_WEIGHTS)},
    )
    _validate(result, check_files)
    return result


def _validate(study: Study, check_files: bool) -> None:
    where = str(study.path)
    if study.kind == "permutation":
        if not study.permutation.get("noise"):
            raise InputError(f"{where} [permutation]: noise levels missing ([permutation.noise.NAME])")
        return
    for name in study.grid.get("attributes", []):
        if name not in study.attributes:
            raise InputError(f"{where} [grid] attributes: no [attributes.{name}] table")
    for name in study.grid.get("faults", []):
        if name not in study.faults:
            raise InputError(f"{where} [grid] faults: no [faults.{name}] table")
    for name in study.grid.get("mix", []):
        if name not in study.mix:
            raise InputError(f"{where} [grid] mix: no [mix.{name}] table")
    for table in study.mix.values():
        for strategy in table:
            subject_strategy(strategy, study.strategy_params(strategy))
    for name in study.grid.get("deviation", []):
        subject_strategy(str(name), study.strategy_params(str(name)))
    deviating = [str(name) for name in study.grid.get("deviation", []) if str(name) != "honest"]
    if deviating and study.focal == 0:
        # The focal subjects play the deviation: with none, every such cell is honest play under another name.
        raise InputError(f"{where} [grid] deviation {', '.join(deviating)}: [study] focal is 0, so no subject "
                         "would play it; set focal = N (the subjects who deviate in each cell)")
    smallest = min((int(n) for n in study.grid.get("n", [100])), default=100)
    for name in study.grid.get("collector", []):
        collector = collector_strategy(str(name), study.collector_params(str(name)))
        victim = dict(collector.node_params).get("victim")
        if isinstance(victim, int) and victim >= smallest:
            raise InputError(f"{where} [collectors.{name}]: victim row {victim} is not in every cell's data "
                             f"(smallest n = {smallest}: rows 0..{smallest - 1})")
    for dataset in study.grid.get("dataset", []):
        path = study.dataset_path(str(dataset))
        if check_files and path is not None and not path.exists():
            raise InputError(f"{where} [grid] dataset: {path} does not exist")
