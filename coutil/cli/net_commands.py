"""The networked commands: `coutil run`, `coutil collector serve|export`, `coutil subject join|swarm`.

``coutil run`` is the main job: an embedded MQTT broker (or ``--broker URL``), a collector and N
subjects on this machine, one full round, outputs under ``--out``. Exit codes: 0 when the round
completed with every subject in the release and every verdict accepts, 4 when the round did not
complete or left a subject out, 5 when a subject complained
(a reject verdict), 6 when the broker cannot be reached, 2 for bad input.
"""

from __future__ import annotations

import asyncio
import os
import tomllib
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import TaskID
from rich.table import Table

from coutil.cli.common import emit_json, err_console, progress
from coutil.errors import CoutilError, ExitCode, InputError, NetworkError
from coutil.protocol.config import RoundConfig
from coutil.sdc.dataset import Dataset, load_csv

#: The shipped synthetic survey (10,000 fictitious respondents; simulations/make_default_dataset.py).
DEFAULT_QI = ("age", "height_cm", "weight_kg", "hours_worked")
DEFAULT_CONFIDENTIAL = ("income", "savings", "medical_spend")
PHASES = ("registration", "sharing", "auditing")


class RoundIncompleteError(CoutilError):
    exit_code = ExitCode.ROUND_INCOMPLETE


class ComplaintError(CoutilError):
    exit_code = ExitCode.COMPLAINT


def default_data_path() -> Path:
    return Path(str(resources.files("coutil") / "data" / "survey.csv"))


def _names(text: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if text is None:
        return default
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n for n in names):
        raise InputError(f"bad column list {text!r}: expected comma-separated names")
    return names


def build_config(
    config_file: Path | None,
    qi: str | None,
    confidential: str | None,
    k: int | None,
    overrides: dict[str, Any],
) -> RoundConfig:
    """A `RoundConfig` from an optional TOML file plus command-line overrides."""
    base: dict[str, Any] = {}
    if config_file is not None:
        base = {f: getattr(RoundConfig.from_toml(config_file), f) for f in RoundConfig.__dataclass_fields__}
    if qi is not None or "qi" not in base:
        base["qi"] = _names(qi, DEFAULT_QI)
    if confidential is not None or "confidential" not in base:
        base["confidential"] = _names(confidential, DEFAULT_CONFIDENTIAL)
    if k is not None:
        base["k"] = k
    base.update({key: value for key, value in overrides.items() if value is not None})
    return RoundConfig.from_mapping(base)


def _load_subjects(data: Path | None, config: RoundConfig, subjects: int | None) -> Dataset:
    path = data if data is not None else default_data_path()
    dataset = load_csv(path, list(config.columns))
    if subjects is not None:
        if subjects < 1:
            raise InputError(f"bad --subjects {subjects}: expected a positive number")
        if subjects > dataset.n:
            raise InputError(f"--subjects {subjects}: {path} has only {dataset.n} records "
                             "(pass --data FILE.csv with at least that many)")
        dataset = Dataset(dataset.names, dataset.values[:subjects], dataset.source, dataset.ordinal)
    if dataset.n < config.k:
        raise InputError(f"{dataset.n} subjects cannot form a group of k = {config.k}")
    return dataset


#: From this many subjects on, ``coutil run`` hosts them in worker processes by default.
AUTO_WORKERS_FROM = 1000


def auto_workers(subjects: int, external_broker: bool) -> int:
    """Worker processes for ``subjects`` subjects hosted on this machine: none for a small round
    (starting them costs a second or two) or with the embedded broker (a process of its own that
    needs a core: 2,000 subjects took 29 s in one process, 40 s with two workers), else two when
    the machine has two cores or more (over mosquitto, 2,000 subjects: 22.3 s in one process,
    14.9 s with two workers; 10^4: 162 s, 113 s)."""
    cores = os.cpu_count() or 1
    if subjects < AUTO_WORKERS_FROM or cores < 2 or not external_broker:
        return 0
    return 2


def local_round_config(config: RoundConfig, config_file: Path | None, subjects: int) -> RoundConfig:
    """``config`` for a round whose ``subjects`` subjects all run on this machine (``coutil run``).

    Registration closes once all of them registered (unless the config sets ``expected_subjects``),
    and the timing grows with their number (`coutil.net.round.local_swarm_timing`), except where
    the config file sets it. The values in force are recorded in the manifest.
    """
    from coutil.net.round import local_swarm_timing

    fields = {f: getattr(config, f) for f in RoundConfig.__dataclass_fields__}
    if config.expected_subjects == 0:
        fields["expected_subjects"] = subjects
    fixed = _keys_in_config_file(config_file)
    fields.update({key: value for key, value in local_swarm_timing(subjects).items() if key not in fixed})
    return RoundConfig.from_mapping(fields)


def _keys_in_config_file(path: Path | None) -> set[str]:
    """The keys of the config file's [round] table (it was validated by `build_config` already)."""
    if path is None:
        return set()
    with path.open("rb") as handle:
        table = tomllib.load(handle).get("round", {})
    return set(table) if isinstance(table, dict) else set()


def _summary_table(summary: dict[str, Any], broker: str) -> Table:
    table = Table(title="coutil run", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    rows = [
        ("broker", broker),
        ("completed", str(summary["completed"])),
        ("subjects / registered", f"{summary['subjects']} / {summary['registered']}"),
        ("released rows / groups", f"{summary['released_rows']} / {summary['groups']}"),
        ("excluded", ", ".join(f"{k}: {v}" for k, v in summary["excluded"].items()) or "0"),
        ("verdicts accepted", f"{summary['accepted']} / {summary['verdicts']}"),
        ("wall time per phase (s)", ", ".join(f"{k} {v:.2f}" for k, v in summary["wall_times"].items())),
        ("rejections", ", ".join(f"{k}: {v}" for k, v in summary["rejections"].items()) or "0"),
    ]
    traffic = summary.get("traffic_per_subject", {})
    for metric in ("sent_messages", "received_messages", "total_bytes"):
        if metric in traffic:
            rows.append((f"per subject {metric} (mean / max)",
                         f"{traffic[metric]['mean']:.1f} / {traffic[metric]['max']:.0f}"))
    for what, value in rows:
        table.add_row(what, value)
    return table


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
) -> dict[str, Any]:
    from coutil.net.round import run_mqtt_round

    config = build_config(config_file, qi, confidential, k, {})
    dataset = _load_subjects(data, config, subjects if subjects is not None else (None if data else 200))
    config = local_round_config(config, config_file, dataset.n)
    if workers is None:
        workers = auto_workers(dataset.n, external_broker=broker is not None)
    if workers < 0:
        raise InputError(f"bad --workers {workers}: expected 0 (subjects in this process) or more")
    with progress(not as_json) as bars:
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

        report, stats = run_mqtt_round(dataset, config, seed=seed, broker=broker, timeout=timeout, out_dir=out,
                                       workers=workers,
                                       progress=on_progress)
    summary = report.summary()
    summary["broker"] = broker or "embedded"
    summary["network"] = stats.as_dict()
    summary["workers"] = workers
    summary["out"] = str(out)
    if as_json:
        emit_json(summary)
    else:
        err_console.print(_summary_table(summary, broker or "embedded amqtt on 127.0.0.1"))
        err_console.print(f"outputs written to {out}/ (release.csv, manifest.json, audit.json, trace.jsonl, "
                          "report.json)")
    broker_drops = summary.get("dropped", {}).get("broker", 0)
    if broker_drops:
        err_console.print(
            f"[yellow]note:[/] the broker dropped {broker_drops} messages during the round; the protocol re-sent "
            "them, which costs time. mosquitto drops QoS 1 messages to a client beyond max_queued_messages "
            "(1000 by default): see docker/mosquitto/mosquitto.conf (max_queued_messages 200000)."
        )
    if not report.completed:
        raise RoundIncompleteError(
            f"the round did not complete (phase {summary['phase']}, stopped by {summary['stop_reason']})"
        )
    if summary["released_rows"] != dataset.n:
        # Every subject of `coutil run` is an honest simulated one: one left out of the release is a
        # failure of the run (a lost connection, a machine too slow for the timing), not a protocol outcome.
        excluded = ", ".join(f"{reason}: {count}" for reason, count in summary["excluded"].items())
        raise RoundIncompleteError(
            f"the release holds {summary['released_rows']} of the {dataset.n} subjects "
            f"({summary['registered']} registered{'; excluded ' + excluded if excluded else ''}); see {out}/report.json"
        )
    if summary["accepted"] != summary["verdicts"] or summary["verdicts"] == 0:
        reasons = Counter(str(v["reason"]) for v in report.outcome.verdicts if not v["accept"])
        raise ComplaintError(
            f"{summary['verdicts'] - summary['accepted']} subject(s) rejected the release "
            f"({', '.join(f'{r}: {c}' for r, c in reasons.items()) or 'no verdicts'}); see {out}/audit.json"
        )
    return summary


def register(app: typer.Typer) -> None:
    """Add `run`, `collector ...` and `subject ...` to the `coutil` app."""
    from coutil.cli import service_commands

    @app.command("run")
    def run_command(
        data: Annotated[Path | None, typer.Option("--data", help="CSV of the subjects' records (default: the "
                                                  "shipped synthetic survey).", show_default=False)] = None,
        qi: Annotated[str | None, typer.Option("--qi", help="Quasi-identifier columns (comma-separated).",
                                               show_default=False)] = None,
        confidential: Annotated[str | None, typer.Option("--confidential", help="Confidential columns.",
                                                         show_default=False)] = None,
        k: Annotated[int | None, typer.Option("--k", help="Minimum group size (default 5).",
                                              show_default=False)] = None,
        subjects: Annotated[int | None, typer.Option("--subjects", help="Number of subjects: the first N records "
                                                     "(default: 200 of the shipped data, all of --data).",
                                                     show_default=False)] = None,
        out: Annotated[Path, typer.Option("--out", help="Output directory.")] = Path("out/run"),
        seed: Annotated[int, typer.Option("--seed", help="Seed of the simulated subjects' keys.")] = 1,
        broker: Annotated[str | None, typer.Option("--broker", help="mqtt[s]://[user:pass@]host:port (default: an "
                                                   "embedded broker on 127.0.0.1).", show_default=False)] = None,
        config: Annotated[Path | None, typer.Option("--config", help="Round TOML (a \\[round] table).",
                                                    show_default=False)] = None,
        timeout: Annotated[float | None, typer.Option("--timeout", help="Give up after this many seconds.",
                                                      show_default=False)] = None,
        workers: Annotated[int | None, typer.Option("--workers", help="Host the subjects in this many worker "
                                                    "processes (0: in this process; default: two from "
                                                    f"{AUTO_WORKERS_FROM} subjects on with --broker, if the "
                                                    "machine has two cores or more).", show_default=False)] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    ) -> None:
        """Run one whole round over MQTT: broker, collector and N subjects; write release and audit."""
        run_round_command(data, qi, confidential, k, subjects, out, seed, broker, config, timeout, as_json, workers)

    service_commands.register(app)


def run_async(coroutine: Any) -> Any:
    """Run a coroutine; a broker that cannot be reached is a `NetworkError` (exit code 6)."""
    try:
        return asyncio.run(coroutine)
    except OSError as exc:
        raise NetworkError(f"network error: {exc}") from None
