"""The round commands: `coutil run` (over MQTT) and `coutil simulate` (in memory). Thin: parse, call, print.

Both read the same round file (`coutil.round.setup`: ``[round]``, ``[data]``, and for `simulate`
``[network]``/``[faults]``) with ``--set key=value`` overrides, and write the same outputs under
``--out`` (release.csv, manifest.json, audit.json, trace.jsonl, report.json).

Exit codes: 0 when the round completed (for `run`: with every subject in the release and every
verdict accepting), 4 when it did not or left a subject out, 5 when a subject complained, 6 when
the broker cannot be reached, 2 for bad input.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from coutil.cli.common import emit_json, err_console, phase_progress, progress
from coutil.errors import ComplaintError, InputError, RoundIncompleteError
from coutil.round.setup import AUTO_WORKERS_FROM, auto_workers, load_round_spec

if TYPE_CHECKING:
    from coutil.round.report import RoundReport

#: The collector phases shown as progress bars (`coutil.round.tracker.PHASES`, whose import costs the
#: protocol stack; a test checks that the two agree).
PHASES = ("registration", "sharing", "auditing")

OUTPUT_FILES = "release.csv, manifest.json, audit.json, trace.jsonl, report.json"


def _summary_table(title: str, summary: dict[str, Any], extra: list[tuple[str, str]]) -> Table:
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        *extra,
        ("completed", str(summary["completed"])),
        ("subjects / registered", f"{summary['subjects']} / {summary['registered']}"),
        ("released rows / groups", f"{summary['released_rows']} / {summary['groups']}"),
        ("excluded", ", ".join(f"{k}: {v}" for k, v in summary["excluded"].items()) or "0"),
        ("verdicts accepted", f"{summary['accepted']} / {summary['verdicts']}"),
    ]
    if "virtual_time" in summary and title == "simulated round":
        rows.append(("virtual time (s)", f"{summary['virtual_time']:.1f}"))
    rows.append(("wall time per phase (s)", ", ".join(f"{k} {v:.2f}" for k, v in summary["wall_times"].items())))
    traffic = summary.get("traffic_per_subject", {})
    for metric in ("sent_messages", "received_messages", "received_messages_excl_bulletin",
                   "total_bytes_excl_bulletin", "total_bytes"):
        if metric in traffic:
            rows.append((f"per subject {metric} (mean / max)",
                         f"{traffic[metric]['mean']:.1f} / {traffic[metric]['max']:.0f}"))
    rows.append(("rejections", ", ".join(f"{k}: {v}" for k, v in summary["rejections"].items()) or "0"))
    for what, value in rows:
        table.add_row(what, value)
    return table


def _outcome_line(summary: dict[str, Any], k: int) -> str:
    """One line: did the round work (every subject released, nobody complaining) and what did it cost."""
    subjects, released = summary["subjects"], summary["released_rows"]
    excluded = sum(summary["excluded"].values())
    complaining = summary["verdicts"] - summary["accepted"]
    worked = summary["completed"] and released == subjects and complaining == 0 and summary["verdicts"] > 0
    walls = summary["wall_times"]
    phases = ", ".join(f"{p} {walls[p]:.1f} s" for p in PHASES if p in walls)
    total = f"{walls['run']:.1f} s" if "run" in walls else "?"
    return (f"{'[green]round OK[/]' if worked else '[red]round NOT OK[/]'}: {released} of {subjects} subjects "
            f"released, {excluded} excluded, {complaining} complaining; k = {k}; {total} ({phases})")


def _check_round(report: RoundReport, summary: dict[str, Any], out: Path | None, *, every_subject: bool) -> None:
    """Raise the error (exit code) the round's outcome calls for."""
    if not report.completed:
        raise RoundIncompleteError(
            f"the round did not complete (phase {summary['phase']}, stopped: {summary['stop_reason']})"
        )
    where = f"; see {out}/" if out is not None else ""
    if every_subject and summary["released_rows"] != report.subjects:
        # Every subject of `coutil run` is an honest simulated one: one left out of the release is a
        # failure of the run (a lost connection, a machine too slow for the timing), not a protocol outcome.
        excluded = ", ".join(f"{reason}: {count}" for reason, count in summary["excluded"].items())
        raise RoundIncompleteError(
            f"the release holds {summary['released_rows']} of the {report.subjects} subjects "
            f"({summary['registered']} registered{'; excluded ' + excluded if excluded else ''})"
            f"{where + 'report.json' if where else ''}"
        )
    if every_subject and (summary["accepted"] != summary["verdicts"] or summary["verdicts"] == 0):
        reasons = Counter(str(v["reason"]) for v in report.outcome.verdicts if not v["accept"])
        raise ComplaintError(
            f"{summary['verdicts'] - summary['accepted']} subject(s) rejected the release "
            f"({', '.join(f'{r}: {c}' for r, c in reasons.items()) or 'no verdicts'})"
            f"{where + 'audit.json' if where else ''}"
        )


def run_round_command(
    data: Path | None,
    qi: str | None,
    confidential: str | None,
    k: int | None,
    subjects: int | None,
    out: Path,
    seed: int,
    broker: str | None,
    config_file: Path | None,
    timeout: float | None,
    as_json: bool,
    workers: int | None = None,
    sets: tuple[str, ...] = (),
) -> dict[str, Any]:
    from coutil.round.mqtt import run_mqtt_round  # the MQTT stack: imported only when a round runs over it

    spec = load_round_spec(config_file, sets=sets, qi=qi, confidential=confidential, k=k, data=data,
                           subjects=subjects)
    spec.require("coutil run", simulated_network=False)
    dataset = spec.data.load(spec.config, seed)
    config = spec.for_local_swarm(dataset.n)
    if workers is None:
        workers = auto_workers(dataset.n, external_broker=broker is not None)
    if workers < 0:
        raise InputError(f"bad --workers {workers}: expected 0 (subjects in this process) or more")
    with progress(not as_json) as bars:
        report, stats = run_mqtt_round(dataset, config, seed=seed, broker=broker, timeout=timeout, out_dir=out,
                                       workers=workers, progress=phase_progress(bars, PHASES, dataset.n))
    summary = report.summary()
    summary["broker"] = broker or "embedded"
    summary["network"] = stats.as_dict()
    summary["workers"] = workers
    summary["out"] = str(out)
    if as_json:
        emit_json(summary)
    else:
        err_console.print(_summary_table("coutil run", summary,
                                         [("broker", broker or "embedded amqtt on 127.0.0.1")]))
    dropped = summary.get("dropped")
    broker_drops = dropped.get("broker", 0) if isinstance(dropped, dict) else 0
    if broker_drops:
        err_console.print(
            f"[yellow]note:[/] the broker dropped {broker_drops} messages during the round; the protocol re-sent "
            "them, which costs time. mosquitto drops QoS 1 messages to a client beyond max_queued_messages "
            "(1000 by default): see docker/mosquitto/mosquitto.conf (max_queued_messages 200000)."
        )
    if not as_json:
        err_console.print(_outcome_line(summary, config.k))
        err_console.print(f"outputs written to {out}/ ({OUTPUT_FILES})")
        err_console.print(f"all of it on one HTML page: [bold]coutil report {out}[/]")
    _check_round(report, summary, out, every_subject=True)
    return summary


def simulate(
    config: Path | None,
    seed: int,
    out: Path | None,
    data: Path | None = None,
    subjects: int | None = None,
    as_json: bool = False,
    show_progress: bool = True,
    sets: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run the simulation described by ``config``; returns the summary (raises when incomplete)."""
    from coutil.round.memory import run_memory_round

    spec = load_round_spec(config, sets=sets, data=data, subjects=subjects)
    dataset = spec.data.load(spec.config, seed)
    with progress(show_progress and not as_json) as bars:
        report = run_memory_round(dataset, spec.config, seed=seed, network=spec.network, faults=spec.faults,
                                  out_dir=out, progress=phase_progress(bars, PHASES, dataset.n))
    summary = report.summary()
    if as_json:
        emit_json(summary)
    else:
        err_console.print(_summary_table("simulated round", summary, []))
        if out is not None:
            err_console.print(f"outputs written to {out}/ ({OUTPUT_FILES})")
    _check_round(report, summary, out, every_subject=False)
    return summary


ConfigOption = Annotated[Path | None, typer.Option(
    "--config", help="Round TOML: tables \\[round], \\[data] (and for simulate \\[network], \\[faults]); see "
    "simulations/README.md.", show_default=False)]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", help="Override one key of the round file: k=3, round.k=3, data.rows=100, network.loss=0.1 "
    "(repeatable).", show_default=False)]
DataOption = Annotated[Path | None, typer.Option("--data", help="CSV of the subjects' records, overriding the "
                                                 "file's \\[data] (default: the shipped synthetic survey).",
                                                 show_default=False)]
SubjectsOption = Annotated[int | None, typer.Option(
    "--subjects", help="Number of subjects: the first N records of the CSV, or N synthetic records when the "
    "file asks for synthetic ones (default: the file's \\[data], else 200 of the shipped survey, all of "
    "--data).", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")]


def register(app: typer.Typer) -> None:
    """Add `run` and `simulate` to the `coutil` app."""

    @app.command("run")
    def run_command(
        data: DataOption = None,
        qi: Annotated[str | None, typer.Option("--qi", help="Quasi-identifier columns (comma-separated).",
                                               show_default=False)] = None,
        confidential: Annotated[str | None, typer.Option("--confidential", help="Confidential columns.",
                                                         show_default=False)] = None,
        k: Annotated[int | None, typer.Option("--k", help="Minimum group size (default 5).",
                                              show_default=False)] = None,
        subjects: SubjectsOption = None,
        out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("out/run"),
        seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated subjects' keys.")] = 1,
        broker: Annotated[str | None, typer.Option("--broker", help="mqtt[s]://[user:pass@]host:port (default: an "
                                                   "embedded broker on 127.0.0.1).", show_default=False)] = None,
        config: ConfigOption = None,
        sets: SetOption = None,
        timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.",
                                                      show_default=False)] = None,
        workers: Annotated[int | None, typer.Option("--workers", help="Host the subjects in this many worker "
                                                    "processes (0: in this process; default: two from "
                                                    f"{AUTO_WORKERS_FROM} subjects on with --broker, if the "
                                                    "machine has two cores or more).", show_default=False)] = None,
        as_json: JsonOption = False,
    ) -> None:
        """Run one whole round over MQTT: broker, collector and N subjects; write release and audit."""
        run_round_command(data, qi, confidential, k, subjects, out, seed, broker, config, timeout, as_json, workers,
                          tuple(sets or ()))

    @app.command("simulate")
    def simulate_command(
        config: ConfigOption = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of everything random in the run.")] = 1,
        out: Annotated[Path | None, typer.Option("--out", help="Directory for the outputs.",
                                                 show_default=False)] = None,
        data: DataOption = None,
        subjects: SubjectsOption = None,
        sets: SetOption = None,
        as_json: JsonOption = False,
    ) -> None:
        """Run one protocol round in memory: virtual time, real cryptography, seeded network faults."""
        simulate(config, seed, out, data, subjects, as_json, sets=tuple(sets or ()))
