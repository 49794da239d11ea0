"""The ``[adversary]`` table of a round file: which strategy the collector and which subjects follow.

::

    [adversary]
    collector = "rerun-subtract"             # or a table: { strategy = "isolate-victim", victim = 3 }
    broker = "replay-round"                  # or a table: { strategy = "drop-victim", victim = 3 }
    [[adversary.subjects]]
    strategy = "copycat"
    fraction = 0.05                          # a seeded choice of rows ...
    [[adversary.subjects]]
    strategy = "silent"
    rows = [3, 17]                           # ... or these rows of the data set
    phase = "vote"                           # the strategy's parameters

``--set 'adversary.collector="drop-subject"'`` and ``--set 'adversary.subjects=[{strategy="tamper",
rows=[0]}]'`` work as for any table. Every name and key is checked here (one-line `InputError`s);
rows are checked against the data set when the nodes are built (`AdversaryPlan.subject_rows`).
A broker strategy exists only on the in-memory bus (``coutil simulate``): ``coutil run`` refuses it.
Strategy classes (the protocol stack) are imported only when a table is actually given.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coutil.adversary import (
    BROKER_STRATEGIES,
    COLLECTOR_STRATEGIES,
    SUBJECT_STRATEGIES,
    broker_strategy,
    collector_strategy,
    subject_strategy,
)
from coutil.errors import InputError
from coutil.protocol.node import SeededRandom

Params = tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class SubjectAssignment:
    """One ``[[adversary.subjects]]`` entry: a strategy, its parameters and whom it is given to."""

    strategy: str
    rows: tuple[int, ...] = ()
    fraction: float = 0.0
    params: Params = ()


@dataclass(frozen=True)
class AdversaryPlan:
    """Who deviates in a round, and how (validated)."""

    collector: str | None = None
    collector_params: Params = ()
    subjects: tuple[SubjectAssignment, ...] = ()
    broker: str | None = None
    broker_params: Params = ()

    @property
    def empty(self) -> bool:
        return self.collector is None and not self.subjects and self.broker is None

    def subject_rows(self, n: int, seed: int) -> dict[int, SubjectAssignment]:
        """Row -> assignment for a data set of ``n`` rows: given rows first, then each fraction a
        seeded draw (at least one row) among the rows nobody was given yet. Same seed, same rows."""
        chosen: dict[int, SubjectAssignment] = {}
        for entry in self.subjects:
            for row in entry.rows:
                if row >= n:
                    raise InputError(f"[adversary] {entry.strategy}: row {row} is not in the data set "
                                     f"({n} subjects, rows 0..{n - 1})")
                if row in chosen:
                    raise InputError(f"[adversary] row {row} is given two strategies "
                                     f"({chosen[row].strategy}, {entry.strategy})")
                chosen[row] = entry
        rng = SeededRandom(seed).fork("adversary")
        for index, entry in enumerate(self.subjects):
            if not entry.fraction:
                continue
            free = [r for r in range(n) if r not in chosen]
            count = min(len(free), max(1, round(entry.fraction * n)))
            draw = rng.fork(str(index))
            for _ in range(count):
                chosen[free.pop(draw.below(len(free)))] = entry
        return chosen

    def victim_row(self) -> int | None:
        """The data-set row a collector strategy targets (None: it targets nobody in particular)."""
        value = dict(self.collector_params).get("victim")
        if self.collector is None:
            return None
        if not collector_strategy(self.collector).NEEDS_VICTIM:
            return None
        default = collector_strategy(self.collector).PARAMS.get("victim", 0)
        return int(value if isinstance(value, int) else default)

    def broker_victim_row(self) -> int | None:
        """The data-set row a broker strategy targets (None: it targets nobody in particular)."""
        if self.broker is None or not broker_strategy(self.broker).NEEDS_VICTIM:
            return None
        value = dict(self.broker_params).get("victim", broker_strategy(self.broker).PARAMS.get("victim", 0))
        return int(value) if isinstance(value, int) else 0

    def as_dict(self) -> dict[str, object]:
        return {
            "collector": None if self.collector is None else {"strategy": self.collector,
                                                               **dict(self.collector_params)},
            "subjects": [{"strategy": e.strategy, **({"rows": list(e.rows)} if e.rows else {}),
                          **({"fraction": e.fraction} if e.fraction else {}), **dict(e.params)}
                         for e in self.subjects],
            "broker": None if self.broker is None else {"strategy": self.broker, **dict(self.broker_params)},
        }


def check_strategy_params(kind: str, name: str, given: Mapping[str, Any], where: str) -> Params:
    """``given`` parameters of the ``kind`` ("subject", "collector" or "broker") strategy ``name``, checked
    against its defaults' types and choices (`InputError` naming ``where``); sorted (key, value) pairs."""
    names = {"subject": SUBJECT_STRATEGIES, "collector": COLLECTOR_STRATEGIES, "broker": BROKER_STRATEGIES}[kind]
    if not isinstance(name, str) or name not in names:
        raise InputError(f"{where}: unknown {kind} strategy {name!r} (known: {', '.join(names)})")
    load = {"subject": subject_strategy, "collector": collector_strategy, "broker": broker_strategy}[kind]
    cls = load(name)
    defaults: dict[str, object] = cls.PARAMS
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        known = ", ".join(defaults) or "none"
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)} for {name} (its parameters: {known})")
    out: list[tuple[str, object]] = []
    for key, raw in given.items():
        default, value = defaults[key], raw
        ok = isinstance(value, type(default)) and not (isinstance(value, bool) and not isinstance(default, bool))
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value, ok = float(value), True
        if isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            raise InputError(f"{where}: {name} {key} must be a {type(default).__name__}, got {value!r}")
        if key == "victim" and (not isinstance(value, int) or value < 0):
            raise InputError(f"{where}: {name} victim must be a row number (0 or more), got {value!r}")
        if key == "earlier_offset" and (not isinstance(value, int) or value < 1):
            raise InputError(f"{where}: {name} earlier_offset must be 1 or more (the earlier round's seed is "
                             f"this round's plus it), got {value!r}")
        if key in ("probability",) and isinstance(value, float) and not 0.0 <= value <= 1.0:
            raise InputError(f"{where}: {name} {key} must be in [0, 1], got {value!r}")
        if key in ("delay", "duration") and isinstance(value, float) and value < 0:
            raise InputError(f"{where}: {name} {key} must be 0 or more seconds, got {value!r}")
        allowed = getattr(cls, "CHOICES", {}).get(key)
        if allowed is not None and value not in allowed:
            raise InputError(f"{where}: {name} {key} must be one of {', '.join(allowed)}, got {value!r}")
        out.append((key, value))
    return tuple(sorted(out))


def parse_adversary(table: Mapping[str, Any], where: str) -> AdversaryPlan:
    """The ``[adversary]`` table, validated (`InputError`, one line, on any problem)."""
    where = f"{where} [adversary]"
    unknown = sorted(set(table) - {"collector", "subjects", "broker"})
    if unknown:
        raise InputError(f"{where}: unknown key(s) {', '.join(unknown)}; known: collector, subjects, broker")
    collector, collector_params = _party("collector", table.get("collector"), where)
    broker, broker_params = _party("broker", table.get("broker"), where)
    entries = table.get("subjects", [])
    if isinstance(entries, Mapping):
        entries = [entries]
    if not isinstance(entries, list):
        raise InputError(f"{where}: subjects must be an array of tables ([[adversary.subjects]])")
    subjects: list[SubjectAssignment] = []
    for i, entry in enumerate(entries):
        at = f"{where} subjects[{i}]"
        if not isinstance(entry, Mapping) or "strategy" not in entry:
            raise InputError(f"{at}: expected a table with a strategy key")
        if ("rows" in entry) == ("fraction" in entry):
            raise InputError(f"{at}: give rows = [...] or fraction = F (one of them)")
        rows = entry.get("rows", [])
        if not isinstance(rows, list) or any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in rows) \
                or ("rows" in entry and not rows):
            raise InputError(f"{at}: rows must be a non-empty list of row numbers (0 or more), got {rows!r}")
        fraction = entry.get("fraction", 0.0)
        if "fraction" in entry and (isinstance(fraction, bool) or not isinstance(fraction, int | float)
                                    or not 0.0 < float(fraction) <= 1.0):
            raise InputError(f"{at}: fraction must be in (0, 1], got {fraction!r}")
        given = {k: v for k, v in entry.items() if k not in ("strategy", "rows", "fraction")}
        params = check_strategy_params("subject", entry["strategy"], given, at)
        subjects.append(SubjectAssignment(entry["strategy"], tuple(rows), float(fraction), params))
    return AdversaryPlan(collector, collector_params, tuple(subjects), broker, broker_params)


def _party(kind: str, raw: object, where: str) -> tuple[str | None, Params]:
    """``collector = "NAME"`` or ``collector = { strategy = "NAME", ... }`` (and the same for ``broker``)."""
    if raw is None:
        return None, ()
    if isinstance(raw, str):
        name, given = raw, {}
    elif isinstance(raw, Mapping) and "strategy" in raw:
        name, given = raw["strategy"], {k: v for k, v in raw.items() if k != "strategy"}
    else:
        raise InputError(f"{where}: {kind} must be a strategy name or a table with a strategy key")
    return name, check_strategy_params(kind, name, given, f"{where} {kind}")
