"""`coutil experiment` and `coutil plot`: co-utility studies (coutil.experiment) from the command line.

- ``experiment --config simulations/experiments/NAME.toml --out DIR``: run every missing cell (one
  result file per cell under DIR/cells, so an interrupted study resumes where it stopped), then write
  subjects.csv, summary.csv, the payoff table (payoffs.csv, payoffs.json) and the figures, and print
  the payoff table with the self-enforcement verdicts. Cells run on a Dask LocalCluster of
  ``--workers`` processes (default 2, 0: in this process) or on ``--scheduler tcp://HOST:8786``.
- ``plot DIR``: the figures again from a finished (or partly finished) study directory.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Annotated, Any

import typer

from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console
from coutil.errors import InputError

STUDY_COPY = "study.toml"


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:+.4f}" if isinstance(value, float) else str(value)


def _print_payoffs(table: dict[str, Any]) -> None:
    from rich.table import Table

    if any(row["strategy"] != "honest" for row in table["rows"]):
        _print_subject_payoffs(table)
    deviating = [row for row in table["collector"] if row["strategy"] != "honest"]
    if deviating:
        view = Table(title="Collector payoff per type and strategy (u_C = U + w_leak share attributed - "
                           "w_detection x public complaint; gain vs honest play)")
        for column in ("type", "strategy", "payoff", "gain", "gain 95% CI", "verdict", "honest records attributed",
                       "detected", "public complaint"):
            view.add_column(column)
        for row in table["collector"]:
            view.add_row(row["type"], row["strategy"], _fmt(row["payoff"]), _fmt(row["gain"]),
                         f"[{_fmt(row['gain_lo'])}, {_fmt(row['gain_hi'])}]", row["verdict"], f"{row['leak']:.2f}",
                         f"{row['detected']:.0%}", f"{row['public']:.0%}")
        err_console.print(view)
    else:
        for row in table["collector"]:
            err_console.print(f"collector (honest): payoff {_fmt(row['payoff'])} "
                              f"[{_fmt(row['payoff_lo'])}, {_fmt(row['payoff_hi'])}]")


def _print_subject_payoffs(table: dict[str, Any]) -> None:
    from rich.table import Table

    view = Table(title="Payoff per type and strategy (mean over seeds, 95% CI; gain vs honest play)")
    for column in ("type", "strategy", "payoff", "95% CI", "gain", "gain 95% CI", "verdict"):
        view.add_column(column)
    for row in table["rows"]:
        if not any(r["base"] == row["base"] and r["strategy"] != "honest" for r in table["rows"]):
            continue  # a base where every subject is honest (e.g. a collector's study): nothing to compare
        view.add_row(row["type"], row["strategy"], _fmt(row["payoff"]),
                     f"[{_fmt(row['payoff_lo'])}, {_fmt(row['payoff_hi'])}]", _fmt(row["gain"]),
                     f"[{_fmt(row['gain_lo'])}, {_fmt(row['gain_hi'])}]", row["verdict"])
    err_console.print(view)
    for verdict in table["verdicts"]:
        if verdict["best_deviation"] is None:
            continue
        if verdict["self_enforcing"]:
            err_console.print(f"{verdict['type']}: self-enforcing (no unilateral deviation is profitable; best "
                              f"{verdict['best_deviation']}: {_fmt(verdict['best_gain'])} "
                              f"[{_fmt(verdict['best_gain_lo'])}, {_fmt(verdict['best_gain_hi'])}])")
        else:
            err_console.print(f"{verdict['type']}: NOT self-enforcing: profitable "
                              f"{', '.join(verdict['profitable_deviations'])} (best {verdict['best_deviation']}: "
                              f"{_fmt(verdict['best_gain'])} [{_fmt(verdict['best_gain_lo'])}, "
                              f"{_fmt(verdict['best_gain_hi'])}])")


def run_experiment(config: Path, out: Path, *, workers: int, scheduler: str | None, as_json: bool,
                   plots: bool, limit: int | None = None) -> dict[str, Any]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from coutil.experiment.config import load_study
    from coutil.experiment.runner import collect, run_study

    study = load_study(config)
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config, out / STUDY_COPY) if not (out / STUDY_COPY).exists() else None
    (out / "study_source.txt").write_text(str(config.resolve()) + "\n")
    bars = Progress(TextColumn(f"{study.name}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=err_console, disable=as_json)
    with bars:
        task = bars.add_task("cells", total=None)

        def on_progress(done: int, total: int, _cell: str) -> None:
            bars.update(task, completed=done, total=total)

        stats = run_study(study, out, workers=workers, scheduler=scheduler, progress=on_progress, limit=limit)
    result = collect(study, out)
    figures: list[str] = []
    if plots:
        try:
            from coutil.experiment.plots import make_plots

            figures = [str(p) for p in make_plots(study, out)]
        except ImportError:
            err_console.print("note: matplotlib is missing (pip install 'coutil[plot]'): no figures")
    report = {"study": study.name, "out": str(out), "cells": stats.cells, "skipped": stats.skipped,
              "computed": stats.computed, "figures": figures, **{k: v for k, v in result.items() if k != "cells"}}
    if as_json:
        emit_json(_clean(report))
    else:
        err_console.print(f"{study.name}: {stats.cells} cells ({stats.skipped} already done, {stats.computed} run) "
                          f"-> {out}")
        if "payoffs" in result:
            _print_payoffs(result["payoffs"])
        if "headline" in result:
            for level, figures_of in result["headline"].items():
                err_console.print(f"noise {level}: Hellinger {figures_of['hellinger']['mean']:.3f}, original matches "
                                  f"at d <= 4: {figures_of['original_at_most_4']['mean']:.3f}, random beyond 14: "
                                  f"{figures_of['random_beyond_14']['mean']:.4f}")
        for figure in figures:
            err_console.print(f"figure: {figure}")
    return report


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def register(app: typer.Typer) -> None:
    """Add `experiment` and `plot` to the `coutil` app."""

    @app.command("experiment", cls=OneLineErrorsCommand)
    def experiment_command(
        config: Annotated[Path, typer.Option("--config", help="Study file (simulations/experiments/NAME.toml).")],
        out: Annotated[Path, typer.Option("--out", help="Result directory (re-run to resume).")],
        workers: Annotated[int, typer.Option("--workers", help="Dask worker processes (0: run in this process).")
                           ] = 2,
        scheduler: Annotated[str | None, typer.Option("--scheduler", help="A Dask scheduler, tcp://HOST:8786.",
                                                      show_default=False)] = None,
        no_plots: Annotated[bool, typer.Option("--no-plots", help="Skip the figures.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="No progress bar; one JSON object on stdout.")] = False,
    ) -> None:
        """Run a co-utility study: collaborative vs centralized vs local, and the payoff of every deviation."""
        if workers < 0:
            raise InputError(f"--workers must be 0 or more, got {workers}")
        run_experiment(config, out, workers=workers, scheduler=scheduler, as_json=as_json, plots=not no_plots)

    @app.command("plot", cls=OneLineErrorsCommand)
    def plot_command(
        directory: Annotated[Path, typer.Argument(help="A study's result directory (coutil experiment --out).")],
        as_json: Annotated[bool, typer.Option("--json", help="Print {\"figures\": [...]} on stdout.")] = False,
    ) -> None:
        """Draw a study's figures from its result files."""
        from coutil.experiment.config import load_study
        from coutil.experiment.plots import make_plots

        copy = directory / STUDY_COPY
        if not copy.exists():
            raise InputError(f"{directory}: no {STUDY_COPY} (not a coutil experiment result directory)")
        source = directory / "study_source.txt"
        original = Path(source.read_text().strip()) if source.exists() else copy
        study = load_study(original if original.exists() else copy, check_files=False)
        figures = [str(p) for p in make_plots(study, directory)]
        if as_json:
            emit_json({"figures": figures})
        else:
            for figure in figures:
                err_console.print(f"figure: {figure}")
