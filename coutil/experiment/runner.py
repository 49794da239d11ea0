"""Running a study: cells in process or on Dask, one result file per cell, resumable; tidy CSVs.

``DIR/cells/<id>.json`` holds one finished cell (written to a temporary file, then `os.replace`d, so
an interrupted run never leaves half a file). A second run of the same study skips every cell whose
file exists; results are a function of the cell alone, so a resumed study equals an uninterrupted one.
A cell file that is not one (damaged on disk, edited, a directory) stops the run before any cell is
computed, with a one-line `InputError` naming it: it is neither used nor overwritten, and moving it
away makes the next run compute that cell again.
`collect` then writes ``subjects.csv`` (one row per cell, seed, method and subject), ``summary.csv``
(one row per cell and method) and, for round studies, the payoff table (`coutil.experiment.payoffs`).

Cells run in this process (``workers=0``), on a Dask LocalCluster of ``workers`` processes, or on the
cluster at ``scheduler`` (``tcp://HOST:8786``). Dask is the ``experiment`` extra.
"""

from __future__ import annotations

import importlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coutil.errors import InputError
from coutil.experiment.cells import run_cell
from coutil.experiment.config import Study
from coutil.experiment.files import jsonable, write_atomic, write_csv_rows
from coutil.experiment.payoffs import payoff_table, write_payoffs
from coutil.experiment.permutation import collect_permutation, run_permutation_cell

#: Called after each finished cell with (done, total, the cell's id).
Progress = Callable[[int, int, str], None]


def cell_file(out: Path, cell: dict[str, Any]) -> Path:
    return out / "cells" / f"{cell['id']}.json"


def compute_cell(study: Study, cell: dict[str, Any]) -> dict[str, Any]:
    """One cell's result as a JSON-able dict (what a worker returns)."""
    if study.kind == "permutation":
        permutation: dict[str, Any] = jsonable(run_permutation_cell(study, cell))
        return permutation
    result = run_cell(study, cell)
    rounds: dict[str, Any] = jsonable({"cell": result.cell, "rows": result.rows, "summary": result.summary,
                      "wall_seconds": result.wall_seconds})
    return rounds


#: The keys `collect` reads of a cell's result, per study kind, and the JSON type of each.
_RESULT_KEYS: dict[str, dict[str, type]] = {
    "rounds": {"cell": dict, "rows": list, "summary": list},
    "permutation": {"cell": dict, "rows": list, "summary": list, "original_counts": list, "random_counts": list},
}


def read_cell(study: Study, out: Path, cell: dict[str, Any]) -> dict[str, Any]:
    """A finished cell's result; `InputError` naming the file when it is not one.

    Refused rather than recomputed: the file is left as it is (nothing of it is lost, whatever it holds)
    and the message says how to have the cell computed again."""
    path = cell_file(out, cell)
    again = "move it away to compute that cell again"
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a cell's result file ({again})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the cell's result file ({exc}); {again}") from None
    except (ValueError, RecursionError):  # JSONDecodeError, a number too long to convert, too deep
        raise InputError(f"{path}: damaged cell result (not JSON); {again}") from None
    if not isinstance(result, dict):
        raise InputError(f"{path}: damaged cell result (a JSON {type(result).__name__}, not an object); {again}")
    for key, kind in _RESULT_KEYS[study.kind].items():
        if not isinstance(result.get(key), kind):
            json_kind = "object" if kind is dict else "list"
            raise InputError(f"{path}: damaged cell result (no {key!r} {json_kind}); {again}")
    if result["cell"].get("id") != cell["id"]:
        raise InputError(f"{path}: the result of another cell ({result['cell'].get('id')!r}); {again}")
    rows = [*result["rows"], *result["summary"]]
    if not all(isinstance(row, dict) for row in rows):
        raise InputError(f"{path}: damaged cell result (a row that is not an object); {again}")
    return result


def pending_cells(study: Study, out: Path) -> tuple[list[dict[str, Any]], int]:
    """The cells without a result file, and how many have one (each read: `InputError` if damaged)."""
    cells = study.cells()
    todo = []
    for cell in cells:
        if cell_file(out, cell).exists():
            # Checked before any cell runs: a damaged file found by `collect` only after hours of cells
            # would stop the study at its end.
            read_cell(study, out, cell)
        else:
            todo.append(cell)
    return todo, len(cells) - len(todo)


@dataclass
class RunStats:
    cells: int
    skipped: int
    computed: int


def run_study(study: Study, out: Path, *, workers: int = 0, scheduler: str | None = None,
              progress: Progress | None = None, limit: int | None = None) -> RunStats:
    """Compute every missing cell of ``study`` into ``out/cells`` (``limit``: at most that many, for tests)."""
    out.mkdir(parents=True, exist_ok=True)
    todo, skipped = pending_cells(study, out)
    if limit is not None:
        todo = todo[:limit]
    total = skipped + len(todo)
    done = skipped
    if progress is not None:
        progress(done, total, "")
    for cell, result in _execute(study, todo, workers, scheduler):
        write_atomic(cell_file(out, cell), json.dumps(result, allow_nan=False))
        done += 1
        if progress is not None:
            progress(done, total, str(cell["id"]))
    return RunStats(total, skipped, len(todo))


def _execute(study: Study, cells: list[dict[str, Any]], workers: int,
             scheduler: str | None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    if not cells:
        return
    if workers <= 0 and scheduler is None:
        for cell in cells:
            yield cell, compute_cell(study, cell)
        return
    try:
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise InputError("parallel cells need Dask: pip install 'coutil[experiment]' "
                         "(or run with --workers 0)") from None
    cluster = None
    if scheduler is not None:
        client = distributed.Client(scheduler)
    else:
        cluster = distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.CRITICAL)
        client = distributed.Client(cluster)
    try:
        futures = {client.submit(compute_cell, study, cell, pure=False): cell for cell in cells}
        for future in distributed.as_completed(futures):
            yield futures[future], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def load_results(study: Study, out: Path) -> list[dict[str, Any]]:
    """Every finished cell's result of ``study`` under ``out``, in grid order."""
    return [read_cell(study, out, cell) for cell in study.cells() if cell_file(out, cell).exists()]


def collect(study: Study, out: Path) -> dict[str, Any]:
    """Write the tidy CSVs (and the payoff table) from the finished cells; returns the headline figures."""
    results = load_results(study, out)
    if study.kind == "permutation":
        return collect_permutation(study, out, results)
    subjects = [row for result in results for row in result["rows"]]
    summary = [row for result in results for row in result["summary"]]
    write_csv_rows(out / "subjects.csv", subjects)
    write_csv_rows(out / "summary.csv", summary)
    table = payoff_table(study, results)
    write_payoffs(out, table)
    return {"cells": len(results), "subjects_rows": len(subjects), "summary_rows": len(summary),
            "payoffs": table}
