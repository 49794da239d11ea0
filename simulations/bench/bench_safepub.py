"""What a classifier learns from a SafePub release, beside the original data and MDAV at the same k.

Reproduce with (from the repository root, venv active; needs the ``eval`` extra, ``pip install -e '.[eval]'``)::

    python simulations/bench/bench_safepub.py                 # about a minute
    python simulations/bench/bench_safepub.py --repeats 10 --epsilons 0.5 1 2 3

Data: sdcMicro's Census test file (CASCrefmicrodata, 1,080 records, tests/data/sdcmicro). Target: total
person income PTOTVAL above 50,000 (a fixed round threshold, not a data-derived one; 41 % of the records),
the usual "income above a threshold" task of the SafePub paper's US Census experiments. Features, which are
also SafePub's quasi-identifiers: AFNLWGT (survey weight), EMCONTRB, STATETAX, POTHVAL and INTVAL, with
interval hierarchies whose domains are round numbers above the file's maxima (fixed before the runs; in a real
release they must come from public knowledge, not the data). The other attributes (earnings, AGI, taxable
income, FICA, ...) are left out: they are near-functions of PTOTVAL and would make every method look perfect.

Each repeat splits the records 70/30 at random; SafePub (seeded; --score, default discernibility, 300 steps,
search budget 0.1, delta 1e-6) and MDAV (coutil.sdc.mdav, k = SafePub's k) are applied to the training part;
scikit-learn's LogisticRegression (standardized features) is trained on the original training part, on the
SafePub release (each generalized interval replaced by its midpoint, "*" by its domain's midpoint) and on the
MDAV centroids, and tested on the original test part. Table on stdout, JSON in
simulations/bench/results/bench_safepub.json.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.sdc.dataset import read_csv_table
from coutil.sdc.hierarchy import IntervalHierarchy
from coutil.sdc.mdav import mdav
from coutil.sdc.safepub import SafePubSettings, safepub

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "sdcmicro" / "CASCrefmicrodata.csv"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_safepub.json"
TARGET, THRESHOLD = "PTOTVAL", 50_000.0
#: column -> (min, max, widths): public, round domains and nested widths.
QI_DOMAINS: dict[str, tuple[float, float, list[float]]] = {
    "AFNLWGT": (0, 800_000, [50_000, 100_000, 200_000, 400_000]),
    "EMCONTRB": (0, 8_000, [500, 1_000, 2_000, 4_000]),
    "STATETAX": (0, 12_000, [500, 1_000, 2_000, 4_000]),
    "POTHVAL": (0, 120_000, [2_500, 5_000, 10_000, 20_000, 40_000]),
    "INTVAL": (0, 50_000, [500, 1_000, 2_000, 4_000, 8_000]),
}


def _load_sklearn() -> tuple[Any, Any, Any]:
    try:
        linear = importlib.import_module("sklearn.linear_model")
        pipeline = importlib.import_module("sklearn.pipeline")
        preprocessing = importlib.import_module("sklearn.preprocessing")
    except ImportError:
        sys.exit("bench_safepub.py needs scikit-learn: pip install -e '.[eval]' (or pip install 'scikit-learn>=1.3')")
    return linear.LogisticRegression, pipeline.make_pipeline, preprocessing.StandardScaler


def _midpoint(label: str, low: float, high: float) -> float:
    if label == "*":
        return (low + high) / 2
    if label.startswith("["):
        a, b = label[1:-1].split(",")
        return (float(a) + float(b)) / 2
    return float(label)


def _accuracy(train_x: NDArray[np.float64], train_y: NDArray[np.bool_], test_x: NDArray[np.float64],
              test_y: NDArray[np.bool_]) -> float:
    if len(train_y) == 0 or train_y.all() or not train_y.any():
        # Nothing (or one class) released: the best a model can do is predict the released majority.
        constant = bool(train_y.mean() >= 0.5) if len(train_y) else False
        return float(np.mean(test_y == constant))
    logistic, make_pipeline, scaler = _load_sklearn()
    model = make_pipeline(scaler(), logistic(max_iter=2000))
    model.fit(train_x, train_y)
    return float(np.mean(model.predict(test_x) == test_y))


def run(epsilons: list[float], repeats: int, delta: float, score: str, steps: int) -> dict[str, Any]:
    table = read_csv_table(DATA)
    header = table.header
    qi = list(QI_DOMAINS)
    qi_idx = [header.index(c) for c in qi]
    values = np.array([[float(r[j]) for j in qi_idx] for r in table.rows])
    y = np.array([float(r[header.index(TARGET)]) > THRESHOLD for r in table.rows])
    hierarchies = {c: IntervalHierarchy.from_widths(c, "bench", lo, hi, w) for c, (lo, hi, w) in QI_DOMAINS.items()}
    results: list[dict[str, Any]] = []
    baseline: list[float] = []
    majority: list[float] = []
    for rep in range(repeats):
        rng = np.random.default_rng(1000 + rep)
        order = rng.permutation(len(y))
        cut = int(0.7 * len(y))
        train, test = order[:cut], order[cut:]
        baseline.append(_accuracy(values[train], y[train], values[test], y[test]))
        majority.append(float(np.mean(y[test] == (y[train].mean() >= 0.5))))
        rows = [table.rows[i] for i in train]
        for eps in epsilons:
            settings = SafePubSettings(epsilon=eps, delta=delta, score=score, steps=steps)
            start = time.perf_counter()
            release = safepub(header, rows, qi, hierarchies, settings, seed=rep)
            seconds = time.perf_counter() - start
            kept = np.nonzero(release.released)[0]
            rx = np.array(
                [[_midpoint(release.rows[r][j], *QI_DOMAINS[c][:2]) for j, c in zip(qi_idx, qi, strict=True)]
                 for r in range(len(kept))]
            ).reshape(len(kept), len(qi))
            safepub_acc = _accuracy(rx, y[train][kept], values[test], y[test])
            k = release.parameters.k
            centroids = mdav(values[train], k).masked()
            mdav_acc = _accuracy(centroids, y[train], values[test], y[test])
            results.append({
                "repeat": rep, "epsilon": eps, "k": k, "beta": release.parameters.beta,
                "released": len(kept), "train": len(train), "levels": release.manifest["levels"],
                "safepub_accuracy": safepub_acc, "mdav_accuracy": mdav_acc, "safepub_seconds": seconds,
            })
    summary = []
    for eps in epsilons:
        rs = [r for r in results if r["epsilon"] == eps]
        summary.append({
            "epsilon": eps,
            "delta": delta,
            "k": rs[0]["k"],
            "beta": rs[0]["beta"],
            "released_fraction": statistics.mean(r["released"] / r["train"] for r in rs),
            "safepub_accuracy": statistics.mean(r["safepub_accuracy"] for r in rs),
            "safepub_accuracy_sd": statistics.pstdev(r["safepub_accuracy"] for r in rs),
            "mdav_accuracy": statistics.mean(r["mdav_accuracy"] for r in rs),
            "original_accuracy": statistics.mean(baseline),
            "majority_accuracy": statistics.mean(majority),
            "safepub_seconds": statistics.mean(r["safepub_seconds"] for r in rs),
        })
    return {
        "data": str(DATA.relative_to(ROOT)),
        "target": f"{TARGET} > {THRESHOLD:g}",
        "features": qi,
        "score": score,
        "steps": steps,
        "repeats": repeats,
        "summary": summary,
        "runs": results,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--score", default="discernibility")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    _load_sklearn()
    report = run(args.epsilons, args.repeats, args.delta, args.score, args.steps)
    print(f"target {report['target']}; features {', '.join(report['features'])}; score {report['score']}; "
          f"{report['repeats']} random 70/30 splits; accuracy on the original test part")
    print("| epsilon | delta | k | beta | released (of training) | SafePub | MDAV, same k | original | majority |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in report["summary"]:
        print(f"| {s['epsilon']:g} | {s['delta']:g} | {s['k']} | {s['beta']:.3f} "
              f"| {100 * s['released_fraction']:.1f} % "
              f"| {100 * s['safepub_accuracy']:.1f} % (sd {100 * s['safepub_accuracy_sd']:.1f}) "
              f"| {100 * s['mdav_accuracy']:.1f} % | {100 * s['original_accuracy']:.1f} % "
              f"| {100 * s['majority_accuracy']:.1f} % |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
