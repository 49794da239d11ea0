"""`coutil simulate`: run one whole protocol round in memory (virtual time, real cryptography).

``coutil simulate --config simulations/configs/small.toml --seed 1 --out out/sim1`` builds one
collector and one subject per record, runs the round on the in-memory bus (`coutil.simulate`) and
writes release.csv, manifest.json, audit.json, trace.jsonl and report.json under ``--out``. Human
output (progress per phase, a summary table) goes to stderr; ``--json`` prints the summary as one
JSON object on stdout. Exit code 0 when the round completed, 4 when it did not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import TaskID
from rich.table import Table

from coutil.cli.common import emit_json, err_console, progress
from coutil.errors import CoutilError, ExitCode, InputError

#: Progress bars (per collector phase), in the order a round goes through them.
PHASES = ("registration", "sharing", "auditing")


class RoundIncompleteError(CoutilError):
    """The simulated round did not complete (exit code 4)."""

    exit_code = ExitCode.ROUND_INCOMPLETE


def summary_table(summary: dict[str, Any]) -> Table:
    """A human-readable digest of `RoundReport.summary()`."""
    table = Table(title="simulated round", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    traffic = summary.get("traffic_per_subject", {})
    rows: list[tuple[str, str]] = [
        ("completed", str(summary["completed"])),
        ("subjects / registered", f"{summary['subjects']} / {summary['registered']}"),
        ("released rows / groups", f"{summary['released_rows']} / {summary['groups']}"),
        ("excluded", ", ".join(f"{k}: {v}" for k, v in summary["excluded"].items()) or "0"),
        ("verdicts accepted", f"{summary['accepted']} / {summary['verdicts']}"),
        ("virtual time (s)", f"{summary['virtual_time']:.1f}"),
        ("wall time (s)", ", ".join(f"{k} {v:.2f}" for k, v in summary["wall_times"].items())),
    ]
    for metric in ("sent_messages", "received_messages_excl_bulletin", "total_bytes_excl_bulletin", "total_bytes"):
        if metric in traffic:
            stats = traffic[metric]
            rows.append((f"per subject {metric} (mean / max)", f"{stats['mean']:.1f} / {stats['max']:.0f}"))
    rows.append(("rejections", ", ".join(f"{k}: {v}" for k, v in summary["rejections"].items()) or "0"))
    for what, value in rows:
        table.add_row(what, value)
    return table


def simulate(
    config: Path,
    seed: int,
    out: Path | None,
    data: Path | None = None,
    subjects: int | None = None,
    as_json: bool = False,
    show_progress: bool = True,
    shards: int = 1,
) -> dict[str, Any]:
    """Run the simulation described by ``config``; returns the summary (raises when incomplete)."""
    from coutil.simulate import load_simulation, run_memory_round

    if shards < 1:
        raise InputError(f"bad --shards {shards}: expected 1 (one process) or more")
    sim = load_simulation(config, data_override=data, subjects_override=subjects)
    dataset = sim.dataset(seed)
    with progress(show_progress and not as_json) as bars:
        tasks: dict[str, TaskID] = {}

        def on_progress(phase: str, fraction: float) -> None:
            if phase not in PHASES:
                return
            for earlier in PHASES[: PHASES.index(phase)]:
                if earlier in tasks:
                    bars.update(tasks[earlier], completed=dataset.n)
            if phase not in tasks:
                tasks[phase] = bars.add_task(phase, total=dataset.n)
            bars.update(tasks[phase], completed=round(fraction * dataset.n))

        report = run_memory_round(dataset, sim.config, seed=seed, network=sim.network, faults=sim.faults,
                                  out_dir=out, progress=on_progress, shards=shards)
    summary = report.summary()
    if as_json:
        emit_json(summary)
    else:
        err_console.print(summary_table(summary))
        if out is not None:
            err_console.print(f"outputs written to {out}/ (release.csv, manifest.json, audit.json, trace.jsonl, "
                              "report.json)")
    if not report.completed:
        raise RoundIncompleteError(f"the round did not complete (phase {summary['phase']}, stopped: "
                              f"{summary['stop_reason']})")
    return summary


def register(app: typer.Typer) -> None:
    """Add `coutil simulate` to the `coutil` app."""

    @app.command("simulate")
    def simulate_command(
        config: Annotated[Path, typer.Option("--config", help="Simulation TOML (tables \\[round], \\[data], "
                                                               "\\[network], \\[faults]).")],
        seed: Annotated[int, typer.Option("--seed", help="Seed of everything random in the run.")] = 1,
        out: Annotated[Path | None, typer.Option("--out", help="Directory for the outputs.",
                                                 show_default=False)] = None,
        data: Annotated[Path | None, typer.Option("--data", help="CSV overriding the file's \\[data] source.",
                                                  show_default=False)] = None,
        subjects: Annotated[int | None, typer.Option("--subjects", help="Number of subjects (synthetic) or "
                                                     "first rows of the CSV.", show_default=False)] = None,
        shards: Annotated[int, typer.Option("--shards", help="Processes to spread the nodes over (one per core "
                                            "pays from a few thousand subjects on). The release is the same; the "
                                            "run is reproducible for a given seed and number of shards.")] = 1,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    ) -> None:
        """Run one protocol round in memory: virtual time, real cryptography, seeded network faults."""
        simulate(config, seed, out, data, subjects, as_json, shards=shards)
