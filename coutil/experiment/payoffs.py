"""Payoffs and the self-enforcement check.

A subject type is a weight vector (a, b, c): u_i = a U_i - b risk_i - c cost_i, with U_i the release's
utility when her values are in it (0 otherwise), risk_i the weighted risk of the study's ``[risk]``
table and cost_i her kilobytes sent and received. Types only weigh outcomes, so every focal
subject's outcome is valued with every type's weights.

For every group of cells that differ only in the focal subjects' strategy (a *base*: data set, n, k,
attributes, faults, mix) and every seed, the focal subjects' mean payoff under strategy S is paired
with their mean payoff under honest play on the same seed; the *gain* of S is the difference. Means
and 95 % Student-t intervals are over seeds. A deviation is *profitable* for a type when the lower
end of its gain's interval is above 0, *costly* when the upper end is below 0; the protocol is
self-enforcing for a type when no deviation is profitable for it.

The collector's table pairs the same way: for every base without the collector's strategy (cells where
the subjects play honest), the collector's payoff u_C (`coutil.experiment.strategies.CollectorStrategy.payoff`:
utility of what it collects, plus the share of subjects whose record it attributes, minus the cost of a
published complaint) under each collector strategy, its gain over honest play on the same seed, and per
strategy the mean number of honest records it attributed (leak) and how often it was detected and made public.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from coutil.experiment.config import Study
from coutil.experiment.files import jsonable, write_atomic, write_csv_rows
from coutil.experiment.measures import mean_ci
from coutil.experiment.strategies import CollectorStrategy

BASE_EXCLUDE = ("id", "seed", "deviation")


def _base(cell: dict[str, Any], exclude: tuple[str, ...] = BASE_EXCLUDE) -> str:
    return json.dumps({k: v for k, v in cell.items() if k not in exclude}, sort_keys=True)


def _verdict(lo: float, hi: float) -> str:
    return "profitable" if lo > 0 else "costly" if hi < 0 else "not significant"


def payoff_table(study: Study, results: list[dict[str, Any]]) -> dict[str, Any]:
    """The payoff table of the focal subjects (see the module docstring), plus the collector's payoff."""
    # (base, strategy, seed) -> type -> mean payoff of the focal subjects
    per_seed: dict[tuple[str, str, int], dict[str, float]] = {}
    for result in results:
        cell = result["cell"]
        base = _base(cell)
        focal = [r for r in result["rows"] if r["method"] == "collaborative" and r["focal"]]
        if not focal:
            continue
        strategy = str(cell.get("deviation", "honest"))
        values: dict[str, float] = {}
        for t in study.types:
            payoffs = [t.a * r["utility_received"] - t.b * r["risk"] - t.c * r["bytes"] / 1000.0 for r in focal]
            values[t.name] = sum(payoffs) / len(payoffs)
        per_seed[(base, strategy, int(cell["seed"]))] = values
    rows: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    bases = sorted({key[0] for key in per_seed})
    for base in bases:
        strategies = sorted({key[1] for key in per_seed if key[0] == base}, key=lambda s: (s != "honest", s))
        for t in study.types:
            best: dict[str, Any] | None = None
            for strategy in strategies:
                seeds = sorted(seed for (b, s, seed) in per_seed if b == base and s == strategy)
                payoffs = [per_seed[(base, strategy, seed)][t.name] for seed in seeds]
                gains = [per_seed[(base, strategy, seed)][t.name] - per_seed[(base, "honest", seed)][t.name]
                         for seed in seeds if (base, "honest", seed) in per_seed]
                mean, lo, hi = mean_ci(payoffs)
                gain, gain_lo, gain_hi = mean_ci(gains) if strategy != "honest" else (0.0, 0.0, 0.0)
                verdict = "baseline" if strategy == "honest" else _verdict(gain_lo, gain_hi)
                row = {"base": base, "type": t.name, "a": t.a, "b": t.b, "c": t.c, "strategy": strategy,
                       "seeds": len(payoffs), "payoff": mean, "payoff_lo": lo, "payoff_hi": hi,
                       "gain": gain, "gain_lo": gain_lo, "gain_hi": gain_hi, "verdict": verdict}
                rows.append(row)
                if strategy != "honest" and (best is None or gain > best["gain"]):
                    best = row
            profitable = [r["strategy"] for r in rows if r["base"] == base and r["type"] == t.name
                          and r["verdict"] == "profitable"]
            verdicts.append({"base": base, "type": t.name, "self_enforcing": not profitable,
                             "profitable_deviations": profitable,
                             "best_deviation": best["strategy"] if best else None,
                             "best_gain": best["gain"] if best else math.nan,
                             "best_gain_lo": best["gain_lo"] if best else math.nan,
                             "best_gain_hi": best["gain_hi"] if best else math.nan})
    collector_rows = collector_table(study, results)
    return {"rows": rows, "verdicts": verdicts, "collector": collector_rows,
            "collector_types": study.collector_types,
            "risk_weights": study.risk, "types": [t.__dict__ for t in study.types]}


def collector_table(study: Study, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The collector's payoff per base, collector type and collector strategy, with its gain over honest
    play (see the module docstring); cells where some subject deviates are left out."""
    # (base, strategy, seed) -> (utility, leak, subjects, detected, public)
    per_seed: dict[tuple[str, str, int], tuple[float, float, int, bool, bool]] = {}
    for result in results:
        cell = result["cell"]
        if cell.get("deviation", "honest") != "honest":
            continue
        for summary in result["summary"]:
            if summary["method"] == "collaborative":
                utility = float(summary["utility"]) if int(summary["released"]) else 0.0
                per_seed[(_base(cell, (*BASE_EXCLUDE, "collector")), str(cell.get("collector", "honest")),
                          int(cell["seed"]))] = (
                    utility, float(summary.get("collector_leak", 0)), int(summary["subjects"]),
                    bool(summary.get("collector_detected", False)), bool(summary.get("collector_public", False)))

    def payoff(key: tuple[str, str, int], weights: dict[str, float]) -> float:
        utility, leak, n, _, public = per_seed[key]
        return CollectorStrategy.payoff(utility, leak / max(1, n), public, weights)

    rows: list[dict[str, Any]] = []
    for base in sorted({key[0] for key in per_seed}):
        strategies = sorted({key[1] for key in per_seed if key[0] == base}, key=lambda s: (s != "honest", s))
        for type_name, weights in study.collector_types.items():
            for strategy in strategies:
                keys = [(base, strategy, seed) for (b, s, seed) in sorted(per_seed) if b == base and s == strategy]
                mean, lo, hi = mean_ci([payoff(key, weights) for key in keys])
                gains = [payoff(key, weights) - payoff((base, "honest", key[2]), weights)
                         for key in keys if (base, "honest", key[2]) in per_seed]
                gain, gain_lo, gain_hi = mean_ci(gains) if strategy != "honest" else (0.0, 0.0, 0.0)
                rows.append({"base": base, "type": type_name, **{f"w_{k}": v for k, v in weights.items()},
                             "strategy": strategy, "seeds": len(keys), "payoff": mean, "payoff_lo": lo,
                             "payoff_hi": hi, "gain": gain, "gain_lo": gain_lo, "gain_hi": gain_hi,
                             "verdict": "baseline" if strategy == "honest" else _verdict(gain_lo, gain_hi),
                             "leak": sum(per_seed[key][1] for key in keys) / len(keys),
                             "detected": sum(per_seed[key][3] for key in keys) / len(keys),
                             "public": sum(per_seed[key][4] for key in keys) / len(keys)})
    return rows


def write_payoffs(out: Path, table: dict[str, Any]) -> None:
    write_csv_rows(out / "payoffs.csv", table["rows"])
    write_atomic(out / "payoffs.json", json.dumps(jsonable(table), indent=1, allow_nan=False))
