"""The round commands: `coutil run` (over MQTT) and `coutil simulate` (in memory). Thin: parse, call, print.

Both read the same round file (`coutil.round.setup`: ``[round]``, ``[data]``, and for `simulate`
``[network]``/``[faults]``) with ``--set key=value`` overrides, and write the same outputs under
``--out`` (release.csv, manifest.json, audit.json, trace.jsonl, report.json).

Exit codes: 0 when the round completed (for `run`: with every subject in the release and every
verdict accepting), 4 when it did not or left a subject out, 5 when a subject complained, 6 when
the broker cannot be reached, 2 for bad input.
"""

from __future__ import annotations

import shlex
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console, phase_progress, progress
from coutil.errors import ComplaintError, CoutilError, InputError, RoundIncompleteError
from coutil.round.setup import AUTO_WORKERS_FROM, auto_workers, load_round_spec

if TYPE_CHECKING:
    from coutil.round.report import RoundReport


def _written(out: Path) -> str:
    """The round's files in ``out``, as written (evidence.json and transcript.json included)."""
    from coutil.round.report import ROUND_OUTPUT_NAMES

    return f"outputs written to {out}/ ({', '.join(name for name in ROUND_OUTPUT_NAMES if (out / name).exists())})"


def _how_to_see(out: Path | None) -> str:
    """The last line of `run` and `simulate` (without --json): the command that shows ``out`` on one page."""
    if out is None:
        return "nothing written (no --out)"
    return f"all of it on one HTML page: [bold]{escape(f'coutil report {shlex.quote(str(out))}')}[/]"


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
        ("subjects accepting the release / verdicts", f"{summary['accepted']} / {summary['verdicts']}"),
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
    # Messages, not people: duplicates and stale re-sends are the protocol's normal de-duplication.
    rows.append(("messages ignored or rejected (by reason)",
                 ", ".join(f"{k}: {v}" for k, v in summary["rejections"].items()) or "0"))
    for what, value in rows:
        table.add_row(what, value)
    return table


def _outcome_line(summary: dict[str, Any], k: int, *, worked: bool | None = None, vanished: int = 0) -> str:
    """One line: did the round work (every subject released, nobody complaining) and what did it cost.

    ``worked``: the verdict of `_check_round` when the caller has it (`simulate`: subjects the fault plan made
    vanish, ``vanished``, are not owed a place in the release)."""
    subjects, released = summary["subjects"], summary["released_rows"]
    excluded = sum(summary["excluded"].values())
    complaining = summary["verdicts"] - summary["accepted"]
    if worked is None:
        worked = summary["completed"] and released == subjects and complaining == 0 and summary["verdicts"] > 0
    walls = summary["wall_times"]
    phases = ", ".join(f"{p} {seconds:.1f} s" for p, seconds in walls.items()
                       if p not in ("setup", "run", "outputs", "done", "aborted"))
    total = f"{walls['run']:.1f} s" if "run" in walls else "?"
    gone = f" ({vanished} vanished by the fault plan)" if vanished else ""
    return (f"{'[green]round OK[/]' if worked else '[red]round NOT OK[/]'}: {released} of {subjects} subjects "
            f"released{gone}, {excluded} excluded, {complaining} complaining; k = {k}; {total} ({phases})")


def _check_round(report: RoundReport, summary: dict[str, Any], out: Path | None, *, every_subject: bool) -> None:
    """Raise the error (exit code) the round's outcome calls for.

    Never a success for a round that did not complete, released nothing, or left out a live subject:
    for `coutil run` (``every_subject``) every subject is live; for `coutil simulate` those the fault
    plan makes vanish are not. A rejecting verdict is exit 5 (for `run`, so is a missing verdict).
    """
    where = f"; see {out}/" if out is not None else ""
    if not report.completed:
        raise RoundIncompleteError(
            f"the round did not complete (phase {summary['phase']}, stopped: {summary['stop_reason']})"
            f"{where + 'report.json' if where else ''}"
        )
    if summary["released_rows"] == 0:
        raise RoundIncompleteError(f"the round released nothing ({summary['registered']} registered)"
                                   f"{where + 'report.json' if where else ''}")
    live = report.subjects if every_subject else report.subjects - len(report.vanished)
    # A SafePub round leaves out by design the subjects whose own coin said no and the classes below k.
    live -= summary["subject_states"].get("sampled_out", 0) + summary["excluded"].get("suppressed_class", 0)
    # Deviating subjects ([adversary]) are not owed a place in the release: excluding them is the defence.
    live -= sum(1 for d in _deviants(summary) if d.get("role") == "subject")
    # Nor is the victim of a deviating broker that cut her off (SPEC §3: liveness, like a vanished subject).
    live -= sum(1 for d in _deviants(summary) if d.get("role") == "broker" and isinstance(d.get("victim"), dict)
                and (d["victim"]["excluded"] is not None or not d["victim"]["grouped"]))
    if summary["released_rows"] < live:
        # Every subject of `coutil run` is an honest simulated one: one left out of the release is a
        # failure of the run (a lost connection, a machine too slow for the timing), not a protocol outcome.
        excluded = ", ".join(f"{reason}: {count}" for reason, count in summary["excluded"].items())
        vanished = "" if every_subject else f", {len(report.vanished)} vanished by the fault plan"
        raise RoundIncompleteError(
            f"the release holds {summary['released_rows']} of the {report.subjects} subjects "
            f"({summary['registered']} registered{'; excluded ' + excluded if excluded else ''}{vanished})"
            f"{where + 'report.json' if where else ''}"
        )
    missing_verdicts = every_subject and summary["verdicts"] == 0
    if summary["accepted"] != summary["verdicts"] or missing_verdicts:
        reasons = Counter(str(v["reason"]) for v in report.outcome.verdicts if not v["accept"])
        raise ComplaintError(
            f"{summary['verdicts'] - summary['accepted']} subject(s) rejected the release "
            f"({', '.join(f'{r}: {c}' for r, c in reasons.items()) or 'no verdicts'})"
            f"{where + 'audit.json' if where else ''}"
        )


def _deviants(summary: dict[str, Any]) -> list[dict[str, Any]]:
    adversary = summary.get("adversary")
    return list(adversary.get("deviants", [])) if isinstance(adversary, dict) else []


def _adversary_lines(summary: dict[str, Any]) -> list[str]:
    """One line per strategy: how many nodes followed it, detected, excluded, and the leak."""
    by_strategy: dict[str, list[dict[str, Any]]] = {}
    for entry in _deviants(summary):
        by_strategy.setdefault(f"{entry['role']} {entry['strategy']}", []).append(entry)
    lines = []
    for name, entries in by_strategy.items():
        detected = sum(1 for e in entries if e["detected"])
        excluded = sum(1 for e in entries if e["excluded"])
        leak = sum(len(e["leak"]) for e in entries)
        line = (f"adversary {name}: {len(entries)} node(s), {detected} detected, {excluded} excluded, "
                f"{leak} honest record(s) attributed")
        across = entries[0].get("across_rounds") if entries[0]["role"] == "broker" else None
        if isinstance(across, dict) and across.get("leak"):
            line += f" (+ {len(across['leak'])} across rounds: the difference of two releases)"
        received = entries[0].get("received") if entries[0]["role"] == "broker" else None
        if isinstance(received, dict) and received:
            # What the receivers made of what the broker replayed, copied or substituted.
            line += "; its deliveries: " + ", ".join(f"{reason} {count}" for reason, count in sorted(received.items()))
        lines.append(line)
    return lines


def _check_out(out: Path | None, inputs: dict[str, Path | None], force: bool) -> None:
    """Before the round runs: ``--out`` can be replaced whole (it holds only a round's outputs) and
    holds none of the inputs (unless ``--force``)."""
    if out is None:
        return
    from coutil.fileio import check_replaceable_directory, refuse_overwriting_inputs
    from coutil.round.report import ROUND_REPLACEABLE_NAMES

    refuse_overwriting_inputs({"--out": out}, inputs, force=force, directories=("--out",))
    check_replaceable_directory(out, ROUND_REPLACEABLE_NAMES)


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
    force: bool = False,
    allow_k1: bool = False,
    ca_file: Path | None = None,
    with_registrations: bool = False,
) -> dict[str, Any]:
    from coutil.net.mqtt import parse_broker_url
    from coutil.round.mqtt import run_mqtt_round  # the MQTT stack: imported only when a round runs over it
    from coutil.round.tracker import PHASES

    _check_out(out, {"--data": data, "--config": config_file}, force)
    spec = load_round_spec(config_file, sets=sets, qi=qi, confidential=confidential, k=k, data=data,
                           subjects=subjects, allow_k1=allow_k1)
    # Shown and reported without its password (the URL may carry one).
    address = parse_broker_url(broker, ca_file=str(ca_file) if ca_file else None) if broker is not None else None
    broker_shown = address.display() if address is not None else "embedded"
    spec.require("coutil run", simulated_network=False, deviations=True)
    dataset = spec.data.load(spec.config, seed)
    config = spec.for_local_swarm(dataset.n)
    if workers is None:
        workers = auto_workers(dataset.n, external_broker=broker is not None)
    if workers < 0:
        raise InputError(f"bad --workers {workers}: expected 0 (subjects in this process) or more")
    with progress(not as_json) as bars:
        report, stats = run_mqtt_round(dataset, config, seed=seed, broker=address, timeout=timeout, out_dir=out,
                                       workers=workers, progress=phase_progress(bars, PHASES, dataset.n),
                                       adversary=spec.adversary, transcript_registrations=with_registrations)
    summary = report.summary()
    summary["broker"] = broker_shown
    summary["network"] = stats.as_dict()
    summary["workers"] = workers
    summary["out"] = str(out)
    if as_json:
        emit_json(summary)
    else:
        err_console.print(_summary_table("coutil run", summary,
                                         [("broker", broker_shown if broker else "embedded amqtt on 127.0.0.1")]))
    dropped = summary.get("dropped")
    broker_drops = dropped.get("broker", 0) if isinstance(dropped, dict) else 0
    if broker_drops:
        err_console.print(
            f"[yellow]note:[/] the broker dropped {broker_drops} messages during the round; the protocol re-sent "
            "them, which costs time. mosquitto drops QoS 1 messages to a client beyond max_queued_messages "
            "(1000 by default): see docker/mosquitto/mosquitto.conf (max_queued_messages 200000)."
        )
    if not as_json:
        for line in _adversary_lines(summary):
            err_console.print(line)
        err_console.print(_outcome_line(summary, config.k))
        err_console.print(_written(out))
        err_console.print(_how_to_see(out))
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
    force: bool = False,
    allow_k1: bool = False,
    with_registrations: bool = False,
) -> dict[str, Any]:
    """Run the simulation described by ``config``; returns the summary (raises when incomplete)."""
    from coutil.round.memory import run_memory_round
    from coutil.round.tracker import PHASES

    _check_out(out, {"--data": data, "--config": config}, force)
    spec = load_round_spec(config, sets=sets, data=data, subjects=subjects, allow_k1=allow_k1)
    dataset = spec.data.load(spec.config, seed)
    with progress(show_progress and not as_json) as bars:
        report = run_memory_round(dataset, spec.config, seed=seed, network=spec.network, faults=spec.faults,
                                  out_dir=out, progress=phase_progress(bars, PHASES, dataset.n),
                                  adversary=spec.adversary, transcript_registrations=with_registrations)
    summary = report.summary()
    if as_json:
        emit_json(summary)
    else:
        err_console.print(_summary_table("simulated round", summary, []))
        for line in _adversary_lines(summary):
            err_console.print(line)
    failure: CoutilError | None = None
    try:
        _check_round(report, summary, out, every_subject=False)
    except CoutilError as exc:
        failure = exc
    if not as_json:
        err_console.print(_outcome_line(summary, spec.config.k, worked=failure is None,
                                        vanished=len(report.vanished)))
        if out is not None:
            err_console.print(_written(out))
        err_console.print(_how_to_see(out))
    if failure is not None:
        raise failure
    return summary


ConfigOption = Annotated[Path | None, typer.Option(
    "--config", help="Round TOML: tables \\[round], \\[data] (and for simulate \\[network], \\[faults]); see "
    "simulations/README.md.", show_default=False)]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", metavar="KEY=VALUE", help="Override one key of the round file: k=3, round.k=3, data.rows=100, "
    "network.loss=0.1 (repeatable).", show_default=False)]
DataOption = Annotated[Path | None, typer.Option("--data", help="CSV of the subjects' records, overriding the "
                                                 "file's \\[data] (default: the shipped synthetic survey).",
                                                 show_default=False)]
SubjectsOption = Annotated[int | None, typer.Option(
    "--subjects", help="Number of subjects: the first N records of the CSV, or N synthetic records when the "
    "file asks for synthetic ones (default: the file's \\[data], else 200 of the shipped survey, all of "
    "--data).", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")]
AllowK1Option = Annotated[bool, typer.Option("--allow-k1", help="Accept k = 1 (every record released unchanged: "
                                             "no anonymity), e.g. for a baseline.")]
WithRegistrationsOption = Annotated[bool, typer.Option(
    "--with-registrations", help="Put the registrations (every subject's exact QIs) in --out/transcript.json too, "
    "so that `coutil verify` can recompute the grouping: only for an auditor entrusted with them.")]
ForceOption = Annotated[bool, typer.Option("--force", help="Write --out even when it holds an input file (--data, "
                                           "--config); it is replaced whole once the round's outputs are complete.")]


def register(app: typer.Typer) -> None:
    """Add `run` and `simulate` to the `coutil` app."""

    @app.command("run", cls=OneLineErrorsCommand)
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
        broker: Annotated[str | None, typer.Option("--broker", help="mqtt\\[s]://\\[user:pass@]host:port (default: an "
                                                   "embedded broker on 127.0.0.1).", show_default=False)] = None,
        config: ConfigOption = None,
        sets: SetOption = None,
        timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.",
                                                      show_default=False)] = None,
        workers: Annotated[int | None, typer.Option("--workers", help="Host the subjects in this many worker "
                                                    "processes (0: in this process; default: two from "
                                                    f"{AUTO_WORKERS_FROM} subjects on with --broker, if the "
                                                    "machine has two cores or more).", show_default=False)] = None,
        ca_file: Annotated[Path | None, typer.Option("--ca-file", help="CA certificate (PEM) of the broker's TLS "
                                                     "certificate, for mqtts://.", show_default=False)] = None,
        allow_k1: AllowK1Option = False,
        with_registrations: WithRegistrationsOption = False,
        force: ForceOption = False,
        as_json: JsonOption = False,
    ) -> None:
        """Run one whole round over MQTT: broker, collector and N subjects; write release and audit.

        The outputs are written into a temporary directory beside --out which replaces --out whole when
        they are complete; interrupted (Ctrl-C, SIGTERM), the command leaves --out untouched.
        """
        run_round_command(data, qi, confidential, k, subjects, out, seed, broker, config, timeout, as_json, workers,
                          tuple(sets or ()), force, allow_k1, ca_file, with_registrations)

    @app.command("simulate", cls=OneLineErrorsCommand)
    def simulate_command(
        config: ConfigOption = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of everything random in the run.")] = 1,
        out: Annotated[Path | None, typer.Option("--out", help="Directory for the outputs.",
                                                 show_default=False)] = None,
        data: DataOption = None,
        subjects: SubjectsOption = None,
        sets: SetOption = None,
        allow_k1: AllowK1Option = False,
        with_registrations: WithRegistrationsOption = False,
        force: ForceOption = False,
        as_json: JsonOption = False,
    ) -> None:
        """Run one protocol round in memory: virtual time, real cryptography, seeded network faults.

        Outputs as for `coutil run`: complete in --out, or (interrupted) --out untouched.
        """
        simulate(config, seed, out, data, subjects, as_json, sets=tuple(sets or ()), force=force, allow_k1=allow_k1,
                 with_registrations=with_registrations)
