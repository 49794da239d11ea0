"""Paper 002's Figures 2-3 and Table 7: the permutation distance of the match, original vs random records.

A cell draws ``n`` records of m independent normal attributes N(mean_j, sd_j^2) (the running example's
recipe), masks them with additive noise N(0, noise_sd_j^2) of one level, and runs the
maximum-knowledge intruder (`coutil.audit.intruder.maximum_knowledge_attack`): the distribution of
the permutation distance of the match for the original records and for ``random_records`` random
records, and their Hellinger distance. Study file::

    [study]
    kind = "permutation"
    seeds = [1, 2, 3]
    [permutation]
    n = 1000
    mean = [100.0, 1000.0, 5000.0]
    sd = [10.0, 50.0, 200.0]
    random_records = 100000
    [permutation.noise.larger]
    sd = [7.07, 31.6, 100.0]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from coutil.audit.intruder import maximum_knowledge_attack
from coutil.experiment.config import Study
from coutil.experiment.files import write_atomic, write_csv_rows
from coutil.experiment.measures import mean_ci

#: The headline thresholds of Table 7: original matches at d <= 4, random matches beyond d = 14.
NEAR = 4
FAR = 14


def run_permutation_cell(study: Study, cell: dict[str, Any]) -> dict[str, Any]:
    spec = study.permutation
    n = int(spec.get("n", 1000))
    mean = np.asarray(spec.get("mean", [100.0, 1000.0, 5000.0]), dtype=np.float64)
    sd = np.asarray(spec.get("sd", [10.0, 50.0, 200.0]), dtype=np.float64)
    noise = np.asarray(spec["noise"][cell["noise"]]["sd"], dtype=np.float64)
    seed = int(cell["seed"])
    rng = np.random.default_rng([seed, 0x9E12])
    x = rng.normal(mean, sd, size=(n, mean.size))
    y = x + rng.standard_normal(x.shape) * noise
    attack = maximum_knowledge_attack(x, y, random=int(spec.get("random_records", 100_000)), seed=seed,
                                      true_mapping="identity")
    original = attack.original_counts.astype(float) / attack.original_counts.sum()
    random = attack.random.counts.astype(float) / attack.random.total
    summary = {"cell": cell["id"], "seed": seed, "noise": cell["noise"], "n": n,
               "hellinger": attack.hellinger,
               "original_at_most_4": float(original[: NEAR + 1].sum()),
               "random_beyond_14": float(random[FAR + 1:].sum()),
               "original_mean_distance": float(attack.distances.mean()),
               "correct_linkages": attack.score.unique_correct if attack.score is not None else None}
    return {"cell": dict(cell), "summary": [summary], "rows": [],
            "original_counts": attack.original_counts.tolist(), "random_counts": attack.random.counts.tolist()}


def distance_table(results: list[dict[str, Any]], level: str, upto: int = FAR) -> list[dict[str, Any]]:
    """Table 7's layout for one noise level: frequency per distance 0..upto and beyond, averaged over seeds."""
    chosen = [r for r in results if r["cell"]["noise"] == level]
    rows = []
    for d in [*range(upto + 1), -1]:
        freqs: dict[str, list[float]] = {"original": [], "random": []}
        for result in chosen:
            for name in ("original", "random"):
                counts = np.asarray(result[f"{name}_counts"], dtype=float)
                share = counts / counts.sum()
                freqs[name].append(float(share[upto + 1:].sum()) if d < 0 else float(share[d]) if d < share.size
                                   else 0.0)
        rows.append({"noise": level, "distance": f">{upto}" if d < 0 else str(d),
                     "original": float(np.mean(freqs["original"])) if chosen else 0.0,
                     "random": float(np.mean(freqs["random"])) if chosen else 0.0})
    return rows


def collect_permutation(study: Study, out: Any, results: list[dict[str, Any]]) -> dict[str, Any]:
    summary = [row for result in results for row in result["summary"]]
    write_csv_rows(out / "summary.csv", summary)
    levels = list(study.permutation.get("noise", {}))
    table = [row for level in levels for row in distance_table(results, level)]
    write_csv_rows(out / "distances.csv", table)
    headline: dict[str, Any] = {}
    for level in levels:
        rows = [s for s in summary if s["noise"] == level]
        headline[level] = {key: dict(zip(("mean", "lo", "hi"), mean_ci([float(r[key]) for r in rows]), strict=True))
                           for key in ("hellinger", "original_at_most_4", "random_beyond_14")}
        headline[level]["noise_sd"] = study.permutation["noise"][level]["sd"]
    write_atomic(out / "headline.json", json.dumps(headline, indent=1))
    return {"cells": len(results), "headline": headline}
