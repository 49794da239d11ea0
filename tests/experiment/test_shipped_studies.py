"""The shipped studies (simulations/experiments/*.toml) load, and their shipped results are what the code
computes today: a change that moves a figure of a shipped study fails here until the study is recomputed
(README, "Shipped studies": each command reproduces its figures exactly)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from coutil.experiment.cells import run_cell
from coutil.experiment.config import load_study

STUDIES = Path(__file__).parents[2] / "simulations" / "experiments"
SHIPPED = sorted(STUDIES.glob("*.toml"))
#: Columns that depend on the machine, not on the code.
VOLATILE = {"cpu_seconds", "wall_seconds"}


def _same(shipped: str, computed: object) -> bool:
    text = "" if computed is None else str(computed)
    if shipped == text:
        return True
    try:
        a, b = float(shipped), float(text)
    except ValueError:
        return False
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))


def test_there_are_shipped_studies() -> None:
    assert {p.stem for p in SHIPPED} >= {"methods", "deviations", "collector", "churn", "linking", "permutation"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_study_loads_and_has_its_results(path: Path) -> None:
    study = load_study(path)
    results = STUDIES / "results" / path.stem / "summary.csv"
    assert results.is_file(), f"{path.name}: no shipped results at {results}"
    with results.open(newline="") as handle:
        cells = {row["cell"] for row in csv.DictReader(handle)}
    assert cells == {str(cell["id"]) for cell in study.cells()}, f"{path.name}: results of another grid"


# One cheap cell of each protocol study (n = 100): a seed whose figures moved when the collector's
# message order changed (fc85c95), and the seed in which the collector's submission order beat chance.
@pytest.mark.parametrize(("stem", "seed", "extra"), [
    ("linking", 7, {}),
    ("churn", 2, {"faults": "sharing-20"}),
    ("deviations", 3, {"deviation": "silent-reveal"}),
    # Merges into a group while its run lags behind the newest assign (a member checking that runs follow,
    # SPEC §4 share.1 (d), once refused such a run here: one honest member excluded more).
    ("deviations", 7, {"deviation": "leave-after-grouping"}),
])
def test_a_shipped_cell_is_reproduced_exactly(stem: str, seed: int, extra: dict[str, str]) -> None:
    study = load_study(STUDIES / f"{stem}.toml")
    cell = next(c for c in study.cells() if int(c["seed"]) == seed and all(c.get(k) == v for k, v in extra.items()))
    with (STUDIES / "results" / stem / "summary.csv").open(newline="") as handle:
        shipped = [row for row in csv.DictReader(handle) if row["cell"] == str(cell["id"])]
    computed = run_cell(study, cell).summary
    assert len(shipped) == len(computed) > 0
    for old, new in zip(shipped, computed, strict=True):
        moved = {key: (value, new.get(key)) for key, value in old.items()
                 if key not in VOLATILE and not _same(value, new.get(key))}
        assert moved == {}, f"{stem} cell {cell['id']}: recompute the shipped study ({moved})"
