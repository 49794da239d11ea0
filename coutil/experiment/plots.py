"""Figures of a finished study (matplotlib, the ``plot`` extra), from its CSV/JSON result files only.

- ``utility_vs_risk.png``: the release's utility against the mean risk per method, one point per
  cell (seeds averaged, 95 % error bars), against the collector and against the intruder;
- ``payoffs.png``: the payoff table as bars with intervals, one panel per subject type;
- ``cost_vs_k.png``: kilobytes and messages per subject of the collaborative round against k;
- ``churn.png``: utility and cost against the fraction of silent subjects, per phase;
- ``permutation.png``: paper 002's Figures 2-3 (distance of the match, original vs random records).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from coutil.experiment.config import Study
from coutil.experiment.files import read_csv_rows
from coutil.experiment.measures import mean_ci


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _f(row: dict[str, str], key: str) -> float:
    text = row.get(key, "")
    return float(text) if text not in ("", None) else math.nan


def _data_label(study: Study, rows: list[dict[str, str]]) -> str:
    datasets = sorted({Path(r.get("dataset", "synthetic")).stem for r in rows})
    ns = sorted({r.get("n", "") for r in rows}, key=lambda v: int(v) if v.isdigit() else 0)
    ks = sorted({r.get("k", "") for r in rows}, key=lambda v: int(v) if v.isdigit() else 0)
    return (f"{', '.join(datasets)}, n = {', '.join(ns)}, k = {', '.join(ks)}, "
            f"{len(study.seeds)} seed{'s' if len(study.seeds) != 1 else ''}")


def make_plots(study: Study, out: Path) -> list[Path]:
    """Every figure the study's results allow; returns the files written."""
    plt = _pyplot()
    written: list[Path] = []
    if study.kind == "permutation":
        written.append(_permutation(plt, study, out))
        return written
    summary = read_csv_rows(out / "summary.csv") if (out / "summary.csv").exists() else []
    if not summary:
        return written
    label = _data_label(study, summary)
    written.append(_utility_vs_risk(plt, summary, out, label))
    if (out / "payoffs.json").exists():
        table = json.loads((out / "payoffs.json").read_text())
        if table["rows"] and len({r["strategy"] for r in table["rows"]}) > 1:
            written.append(_payoffs(plt, table, out, label))
        if len({r["strategy"] for r in table.get("collector", [])}) > 1:
            written.append(_collector_payoffs(plt, table, out, label))
    collaborative = [r for r in summary if r["method"] == "collaborative"]
    if len({r.get("k") for r in collaborative}) > 1:
        written.append(_cost_vs_k(plt, collaborative, out, label))
    if len({r.get("faults") for r in collaborative}) > 1:
        written.append(_churn(plt, study, collaborative, out, label))
    return written


def _grouped(rows: list[dict[str, str]], keys: tuple[str, ...]) -> dict[tuple[str, ...], list[dict[str, str]]]:
    groups: dict[tuple[str, ...], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[tuple(row.get(k, "") for k in keys)].append(row)
    return groups


def _ci(rows: list[dict[str, str]], key: str) -> tuple[float, float]:
    mean, lo, _ = mean_ci([_f(r, key) for r in rows])
    return mean, 0.0 if math.isnan(lo) else mean - lo


def _utility_vs_risk(plt: Any, summary: list[dict[str, str]], out: Path, label: str) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(12, 5), sharey=True)
    groups = _grouped(summary, ("method", "k", "n", "dataset", "attributes", "faults", "mix", "deviation",
                                "collector"))

    def series(key: tuple[str, ...]) -> str:
        # A deviating collector is a series of its own: its leak shows on the collector's risk axis.
        return key[0] if key[8] in ("", "honest") else f"{key[0]}, collector {key[8]}"

    names = sorted({series(key) for key in groups})
    colours = dict(zip(names, plt.cm.tab10.colors + plt.cm.Set2.colors, strict=False))
    markers = {"3": "o", "5": "s", "10": "^"}
    for ax, risk, title in ((axes[0], "r_collector", "against the collector"),
                            (axes[1], "r_intruder", "against the maximum-knowledge intruder")):
        seen: set[str] = set()
        for key, rows in sorted(groups.items()):
            if key[0] == "decline":
                continue
            u, du = _ci(rows, "utility")
            r, dr = _ci(rows, risk)
            name = series(key)
            ax.errorbar(r, u, xerr=dr, yerr=du, fmt=markers.get(key[1], "o"), color=colours[name],
                        label=name if name not in seen else None, capsize=3, markersize=7, alpha=0.85)
            seen.add(name)
        ax.set_xlabel(f"mean disclosure risk {title} (probability)")
        ax.set_title(f"Risk {title}")
        ax.set_xlim(-0.05, 1.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("utility U = 1 - SSE/SST (fraction)")
    axes[0].legend(title="method (marker: k = 3 o, 5 s, 10 ^)", fontsize=8)
    fig.suptitle(f"Utility vs risk per method ({label})")
    fig.tight_layout()
    path = out / "utility_vs_risk.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _payoffs(plt: Any, table: dict[str, Any], out: Path, label: str) -> Path:
    types = [t["name"] for t in table["types"]]
    fig, axes = plt.subplots(1, len(types), figsize=(5 * len(types), 5.5), squeeze=False)
    # Only bases where some subject deviates (a collector's study pairs honest subjects under each collector).
    compared = {r["base"] for r in table["rows"] if r["strategy"] != "honest"}
    for ax, name in zip(axes[0], types, strict=True):
        rows = [r for r in table["rows"] if r["type"] == name and r["base"] in compared]
        strategies = [r["strategy"] for r in rows]
        values = [r["payoff"] if r["payoff"] is not None else 0.0 for r in rows]
        errors = [[(r["payoff"] - r["payoff_lo"]) if r["payoff_lo"] is not None else 0.0 for r in rows],
                  [(r["payoff_hi"] - r["payoff"]) if r["payoff_hi"] is not None else 0.0 for r in rows]]
        colours = ["tab:green" if r["verdict"] == "baseline" else "tab:red" if r["verdict"] == "profitable"
                   else "tab:blue" if r["verdict"] == "costly" else "tab:gray" for r in rows]
        ax.bar(range(len(rows)), values, yerr=errors, color=colours, capsize=3)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(strategies, rotation=45, ha="right", fontsize=8)
        t = next(t for t in table["types"] if t["name"] == name)
        ax.set_title(f"{name}\n(a = {t['a']:g}, b = {t['b']:g}, c = {t['c']:g} per kB)", fontsize=9)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("mean payoff u = aU - b risk - c kB (95% CI over seeds)")
    fig.suptitle(f"Payoff per strategy (green honest, red profitable, blue costly, grey n.s.; {label})",
                 fontsize=10)
    fig.tight_layout()
    path = out / "payoffs.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _collector_payoffs(plt: Any, table: dict[str, Any], out: Path, label: str) -> Path:
    types = list(table.get("collector_types") or {r["type"]: {} for r in table["collector"]})
    fig, axes = plt.subplots(1, len(types), figsize=(5.5 * len(types), 5.5), squeeze=False)
    for ax, name in zip(axes[0], types, strict=True):
        rows = [r for r in table["collector"] if r["type"] == name and r["strategy"] != "honest"]
        values = [r["gain"] if r["gain"] is not None else 0.0 for r in rows]
        errors = [[(r["gain"] - r["gain_lo"]) if r["gain_lo"] is not None else 0.0 for r in rows],
                  [(r["gain_hi"] - r["gain"]) if r["gain_hi"] is not None else 0.0 for r in rows]]
        colours = ["tab:red" if r["verdict"] == "profitable" else "tab:blue" if r["verdict"] == "costly"
                   else "tab:gray" for r in rows]
        ax.bar(range(len(rows)), values, yerr=errors, color=colours, capsize=3)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([f"{r['strategy']}\nleak {r['leak']:.2g}, public {r['public']:.0%}" for r in rows],
                           rotation=45, ha="right", fontsize=7)
        weights = (table.get("collector_types") or {}).get(name, {})
        ax.set_title(f"collector type {name}\n(w_leak = {weights.get('leak', float('nan')):g}, "
                     f"w_detection = {weights.get('detection', float('nan')):g})", fontsize=9)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("gain of the collector's payoff over honest play (95% CI over seeds)")
    fig.suptitle(f"Collector deviations: u_C = U + w_leak x share of subjects attributed - w_detection x public "
                 f"complaint\n(red profitable, blue costly, grey n.s.; {label})", fontsize=10)
    fig.tight_layout()
    path = out / "collector_payoffs.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _cost_vs_k(plt: Any, rows: list[dict[str, str]], out: Path, label: str) -> Path:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    by_k = _grouped(rows, ("k",))
    ks = sorted(by_k, key=lambda key: int(key[0]))
    for ax, key, unit, scale in ((axes[0], "bytes", "kB sent + received per subject (excl. bulletins)", 1000.0),
                                 (axes[1], "messages", "messages sent + received per subject", 1.0)):
        means = [_ci(by_k[k], key)[0] / scale for k in ks]
        errs = [_ci(by_k[k], key)[1] / scale for k in ks]
        ax.errorbar([int(k[0]) for k in ks], means, yerr=errs, fmt="o-", capsize=3)
        ax.set_xlabel("k (group size)")
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Cost of the collaborative round vs k ({label})")
    fig.tight_layout()
    path = out / "cost_vs_k.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _churn(plt: Any, study: Study, rows: list[dict[str, str]], out: Path, label: str) -> Path:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    by_state: dict[str, dict[float, list[dict[str, str]]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        plan = study.faults[row["faults"]]
        fraction = float(plan.get("vanish_fraction", 0.0))
        states = [str(plan["vanish_state"])] if "vanish_state" in plan else sorted(
            {str(p.get("vanish_state", "sharing")) for p in study.faults.values() if p})
        for state in states:
            by_state[state][fraction].append(row)
    for ax, key, unit, scale in ((axes[0], "utility", "utility U = 1 - SSE/SST of the release", 1.0),
                                 (axes[1], "released", "subjects released (fraction of n)", -1.0),
                                 (axes[2], "bytes", "kB per subject (excl. bulletins)", 1000.0)):
        for state, by_fraction in sorted(by_state.items()):
            fractions = sorted(by_fraction)
            values, errs = [], []
            for f in fractions:
                group = by_fraction[f]
                if scale < 0:
                    ratios = [_f(r, "released") / _f(r, "subjects") for r in group]
                    mean, lo, _ = mean_ci(ratios)
                    values.append(mean)
                    errs.append(0.0 if math.isnan(lo) else mean - lo)
                else:
                    mean, err = _ci(group, key)
                    values.append(mean / scale)
                    errs.append(err / scale)
            ax.errorbar([100 * f for f in fractions], values, yerr=errs, fmt="o-", capsize=3,
                        label=f"silent on entering '{state}'")
        ax.set_xlabel("subjects going silent (% of n)")
        ax.set_ylabel(unit)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Churn: utility and cost as subjects go silent ({label})")
    fig.tight_layout()
    path = out / "churn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _permutation(plt: Any, study: Study, out: Path) -> Path:
    rows = read_csv_rows(out / "distances.csv")
    headline = json.loads((out / "headline.json").read_text())
    levels = list(study.permutation.get("noise", {}))
    n = study.permutation.get("n", 1000)
    fig, axes = plt.subplots(1, len(levels), figsize=(6 * len(levels), 4.5), squeeze=False)
    for ax, level in zip(axes[0], levels, strict=True):
        chosen = [r for r in rows if r["noise"] == level]
        labels = [r["distance"] for r in chosen]
        xs = range(len(chosen))
        ax.bar([x - 0.2 for x in xs], [float(r["original"]) for r in chosen], width=0.4, label="original records")
        ax.bar([x + 0.2 for x in xs], [float(r["random"]) for r in chosen], width=0.4, label="random records")
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_xlabel("permutation distance d of the match (ranks)")
        ax.set_ylabel("frequency (share of records)")
        h = headline[level]["hellinger"]["mean"]
        sd = ", ".join(f"{v:g}" for v in study.permutation["noise"][level]["sd"])
        ax.set_title(f"noise '{level}' (sd {sd}): Hellinger {h:.3f}", fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"Paper 002 Figures 2-3: distance of the match (n = {n}, {len(study.seeds)} seeds)")
    fig.tight_layout()
    path = out / "permutation.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
