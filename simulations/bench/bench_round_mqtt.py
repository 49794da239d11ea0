"""Whole protocol rounds over a real MQTT broker (issue 5, item 7): wall time per phase, traffic per
subject, broker drops.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_round_mqtt.py                       # 10^3 and 10^4 subjects, mosquitto
    python simulations/bench/bench_round_mqtt.py --sizes 1000 --brokers mosquitto nats rabbitmq embedded --workers 0 2
    python simulations/bench/bench_round_mqtt.py --sizes 1000 --hosting per-subject --workers 0
    python simulations/bench/bench_round_mqtt.py --sizes 10000 --workers 1 2 3
    python simulations/bench/bench_round_mqtt.py --sizes 200 --quick   # smoke run, bench_round_mqtt_quick.json
    python simulations/bench/bench_round_mqtt.py --sizes 100000 --workers 2 --cpu-timeline   # + CPU per second
    python simulations/bench/bench_round_mqtt.py --sizes 100000 --workers 2 --subjects-per-connection 100000

Each run is what ``coutil run --broker URL`` does (`coutil.round.mqtt.run_mqtt_round_async`), in a
fresh process of its own (a run must not inherit the previous one's heap): one collector and N
subjects in that process, real cryptography, k = 5, synthetic records (seeded),
registration closing as soon as every subject registered, and the timing ``coutil run`` chooses for
a swarm hosted on one machine (`coutil.round.setup.local_swarm_timing`). The subjects share one multiplexed MQTT
connection (``--hosting multiplexed``, the default of ``coutil run``) or have one connection each
(``--hosting per-subject``, as behind a per-subject ACL), in the collector's process (``--workers 0``)
or in worker processes (``--workers 2``: the subjects in two other processes, as ``coutil run`` does
from 1,000 subjects on; `coutil.round.workers`). Brokers, each started here privately on free
loopback ports (`private_brokers.py`; its start-up is not part of the round time): mosquitto with
the settings of ``docker/mosquitto/mosquitto.conf`` (queue and in-flight limits, TCP_NODELAY) plus
``sys_interval 1``, so that its ``$SYS`` counters of dropped messages can be read after the round
("broker drops"); NATS's MQTT gateway (JetStream in a temporary directory, ``max_payload`` 8 MB);
a RabbitMQ node of its own with the ``rabbitmq_mqtt`` plugin; and the embedded amqtt broker of
``coutil run`` (in a child process of its own, `coutil.net.broker_process`). Only mosquitto
publishes a drop counter. A broker that is not installed: its runs are skipped with a message.

Reported per run: completion, wall time per collector phase (registration, sharing, auditing),
messages and bytes sent and received per subject (mean and max), MQTT messages that crossed the
process's sockets, re-sends seen as duplicates, driver drops, broker drops. Ratios against the
first run are measured in the same invocation. Goals: 10^4 subjects, k = 5, within 60 s (issue 5);
10^5 within 180 s with two workers (issue 12). A table goes to stdout, JSON to
simulations/bench/results/bench_round_mqtt.json.

The round is CPU-bound, and these shared machines do not keep one speed (the 10^5 round took
190 s in one session and 397-429 s, with much the same code, in another: README "10^5 subjects
over mosquitto"). Each run also records the host's speed just before and just after it, timed on
the protocol's own curve operations (`bench_crypto.measure`, a few seconds each; JSON
``host_crypto_us``, one line on stderr), to set beside the reference figures in the README. They
show gross changes only: in that slow session they were 1.2-1.3x the reference while the round's
interpreter-heavy work ran about 2x slower.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import platform
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench_crypto import measure as measure_crypto
from cpu_timeline import SERIAL_BELOW, CpuTimeline, plot
from private_brokers import KINDS, MOSQUITTO_SETTINGS, private_broker, unavailable, version

from coutil.net.mqtt import DriverOptions
from coutil.protocol.config import RoundConfig
from coutil.round.mqtt import run_mqtt_round_async
from coutil.round.setup import local_swarm_timing
from coutil.round.simulation import synthetic_dataset
from coutil.round.tracker import PHASES as ROUND_PHASES

RESULTS_DIR = Path(__file__).resolve().parent / "results"
GOAL_SECONDS = {10_000: 60.0, 100_000: 180.0}
#: The operations whose time describes the host (microseconds, `bench_crypto`), and their figures on
#: the machine of the README's reference measurements (README, "Conventions worth knowing").
HOST_OPERATIONS = {"Ed25519 sign": 23.0, "Ed25519 verify": 61.0, "X25519 exchange": 36.0}
HOST_NUMBER = 2000
PHASES = tuple(str(p) for p in ROUND_PHASES)


async def _round(n: int, k: int, seed: int, kind: str, broker: str | None, hosting: str,
                 workers: int, per_connection: int) -> dict[str, Any]:
    config = RoundConfig.from_mapping({"qi": ("age", "height"), "confidential": ("income", "savings"), "k": k,
                                       "expected_subjects": n, **local_swarm_timing(n)})
    data = synthetic_dataset(n, config, seed)
    started = time.perf_counter()
    # With a broker URL the round follows mosquitto's $SYS drop counter itself (report.dropped["broker"]).
    report, stats = await run_mqtt_round_async(data, config, seed=seed, broker=broker,
                                               shared_connection=hosting == "multiplexed", workers=workers,
                                               options=DriverOptions(subjects_per_connection=per_connection))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = stats.elapsed
    summary = report.summary()
    traffic = report.traffic
    if not traffic:  # no subject's counters came back (a worker that did not report)
        zero = {"mean": 0.0, "max": 0.0}
        traffic = {name: zero for name in ("sent_messages", "received_messages", "total_bytes")}
    network = stats.as_dict()
    return {
        "subjects": n,
        "k": k,
        "broker": kind,
        "hosting": hosting,
        "workers": workers,
        "subjects_per_connection": per_connection,
        "completed": summary["completed"],
        "accepted": summary["accepted"],
        "verdicts": summary["verdicts"],
        "excluded": summary["excluded"],
        "wall_round_s": round(wall, 3),
        "wall_including_setup_s": round(time.perf_counter() - started, 3),
        # This run's process (each run has its own) and its finished children (workers, mosquitto).
        "cpu_s_process": round(usage.ru_utime + usage.ru_stime, 2),
        "cpu_s_children": round(children.ru_utime + children.ru_stime, 2),
        "wall_per_phase_s": {p: round(report.wall_times.get(p, 0.0), 3) for p in PHASES},
        "per_subject": {name: {"mean": round(v["mean"], 2), "max": v["max"]} for name, v in traffic.items()},
        "wire": {
            "connections": network["connections"],
            "received_messages": network["wire_received_messages"],
            "sent_messages": network["wire_sent_messages"],
        },
        "duplicates_ignored": report.rejections.get("duplicate", 0),
        "duplicates_per_subject": round(report.rejections.get("duplicate", 0) / n, 3),
        # Which re-sends arrived twice (receiver side), and what the re-send timers sent (sender side).
        "duplicates_by_kind": dict(sorted(report.duplicates_by_kind.items())),
        "resends_by_kind": dict(sorted(report.resends_by_kind.items())),
        "rejections": report.rejections,
        "driver_drops": network["drops"],
        "reconnects": network["reconnects"],
        "broker_drops": report.dropped.get("broker"),
        "goal_s": GOAL_SECONDS.get(n),
        "meets_goal": None if n not in GOAL_SECONDS else bool(summary["completed"] and wall <= GOAL_SECONDS[n]),
    }


def _run(n: int, k: int, seed: int, broker_kind: str, hosting: str, workers: int,
         per_connection: int, cpu_timeline: bool = False) -> dict[str, Any] | None:
    if broker_kind != "embedded":
        reason = unavailable(broker_kind)
        if reason is not None:
            print(f"{broker_kind}: skipped ({reason})", file=sys.stderr)
            return None
    with contextlib.ExitStack() as stack:
        url = None if broker_kind == "embedded" else stack.enter_context(private_broker(broker_kind))
        # Sampled from before the broker starts: the broker is this process's child, as are the workers.
        timeline = stack.enter_context(CpuTimeline()) if cpu_timeline else None
        row = asyncio.run(_round(n, k, seed, broker_kind, url, hosting, workers, per_connection))
    if timeline is not None:
        row["cpu_timeline"] = timeline.as_dict()
    return row


def _child_run(connection: Any, args: tuple[Any, ...]) -> None:
    try:
        connection.send(("row", _run(*args)))
    except BaseException as exc:
        connection.send(("error", f"{type(exc).__name__}: {exc}"))
        raise


def _host_speed() -> dict[str, float]:
    """This host's speed now: microseconds per curve operation (best of three x `HOST_NUMBER`)."""
    return {str(row["operation"]): float(str(row["coutil_us"])) for row in measure_crypto(HOST_NUMBER)
            if row["operation"] in HOST_OPERATIONS}


def _host_line(host: dict[str, dict[str, float]]) -> str:
    parts = [f"{op} {host['before'][op]:.0f}/{host['after'][op]:.0f} us (reference {ref:.0f})"
             for op, ref in HOST_OPERATIONS.items()]
    return "  host speed before/after the run: " + ", ".join(parts)


def _isolated_run(*args: Any) -> dict[str, Any] | None:
    """`_run` in a fresh process: a run must not inherit the previous one's heap (measured: a run
    with two workers took 40.7 s alone and 58.9 s right after a 10^4-subject run in the same
    process), and its CPU counters are then its own."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_child_run, args=(sender, args), name="bench-round")
    process.start()
    sender.close()
    try:
        kind, payload = receiver.recv()
    except EOFError:
        kind, payload = "error", f"the run's process exited with code {process.exitcode} without a result"
    process.join()
    if kind == "error":
        raise RuntimeError(payload)
    row: dict[str, Any] | None = payload
    return row


def _report_timeline(row: dict[str, Any], out: Path) -> None:
    timeline = row.get("cpu_timeline")
    if timeline is None:
        return
    alone = ", ".join(f"{role} {seconds:.0f} s" for role, seconds in timeline["serial_seconds"].items()) or "none"
    print(f"  seconds in which one process worked alone (< {SERIAL_BELOW} cores in all): {alone}", file=sys.stderr)
    png = out.with_name(f"{out.stem}_cpu_{row['broker']}_w{row['workers']}_{row['subjects']}.png")
    title = f"{row['subjects']:,} subjects, {row['broker']}, {row['workers']} workers: {row['wall_round_s']:.0f} s"
    if plot(timeline, title, png):
        print(f"  wrote {png}", file=sys.stderr)


def _raise_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def _table(rows: list[dict[str, Any]]) -> str:
    header = (f"{'broker':<9} {'hosting':<11} {'w':>2} {'n':>6} {'ok':>3} {'round s':>8} "
              + " ".join(f"{p[:8]:>8}" for p in PHASES)
              + f" {'CPU s':>7} {'sent/subj':>9} {'recv/subj':>9} {'max':>4} {'kB/subj':>7} {'dups':>6}"
              + f" {'drops b/d':>9}"
              + f" {'goal':>6}")
    lines = [header, "-" * len(header)]
    for row in rows:
        per = row["per_subject"]
        phases = " ".join(f"{row['wall_per_phase_s'][p]:8.2f}" for p in PHASES)
        goal = "-" if row["goal_s"] is None else ("met" if row["meets_goal"] else "MISSED")
        broker_drops = "-" if row["broker_drops"] is None else str(row["broker_drops"])
        lines.append(
            f"{row['broker']:<9} {row['hosting']:<11} {row['workers']:>2} {row['subjects']:>6} "
            f"{'y' if row['completed'] else 'n':>3} "
            f"{row['wall_round_s']:8.2f} {phases} {row['cpu_s_process'] + row['cpu_s_children']:7.1f} "
            f"{per['sent_messages']['mean']:9.1f} "
            f"{per['received_messages']['mean']:9.1f} {per['received_messages']['max']:4.0f} "
            f"{per['total_bytes']['mean'] / 1e3:7.1f} {row['duplicates_ignored']:>6} "
            f"{broker_drops + '/' + str(row['driver_drops']):>9} {goal:>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="protocol rounds over a real MQTT broker")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--brokers", nargs="+", choices=(*KINDS, "embedded"), default=["mosquitto"])
    parser.add_argument("--hosting", nargs="+", choices=("multiplexed", "per-subject"), default=["multiplexed"])
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2],
                        help="subject worker processes (0: the subjects share the collector's process)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--subjects-per-connection", type=int, default=DriverOptions.subjects_per_connection,
                        help="subjects per multiplexed connection of a worker (DriverOptions.subjects_per_connection)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="write bench_round_mqtt_quick.json instead")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--cpu-timeline", action="store_true",
                        help="sample every process's CPU each second: JSON 'cpu_timeline', a PNG per run beside it")
    args = parser.parse_args(argv)
    out = args.out or RESULTS_DIR / ("bench_round_mqtt_quick.json" if args.quick else "bench_round_mqtt.json")
    _raise_fd_limit(2 * max(args.sizes) + 512)
    rows: list[dict[str, Any]] = []
    for n in args.sizes:
        for broker in args.brokers:
            for hosting in args.hosting:
                for workers in args.workers:
                    print(f"running {broker} {hosting} workers={workers} n={n} ...", file=sys.stderr, flush=True)
                    before = _host_speed()
                    row = _isolated_run(n, args.k, args.seed, broker, hosting, workers,
                                        args.subjects_per_connection, args.cpu_timeline)
                    if row is not None:
                        row["host_crypto_us"] = {"before": before, "after": _host_speed()}
                        print(_host_line(row["host_crypto_us"]), file=sys.stderr)
                        rows.append(row)
                        _report_timeline(row, out)
    print(_table(rows))
    ratios: dict[str, dict[str, float]] = {}
    if rows:
        base = rows[0]
        for row in rows[1:]:
            key = f"{row['broker']}/{row['hosting']}/w{row['workers']}/{row['subjects']}"
            ratios[key] = {
                "subjects_ratio": row["subjects"] / base["subjects"],
                "wall_ratio": row["wall_round_s"] / base["wall_round_s"],
            }
            print(f"{key}: {ratios[key]['subjects_ratio']:.0f}x the subjects of the first run took "
                  f"{ratios[key]['wall_ratio']:.2f}x its time")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "benchmark": "bench_round_mqtt",
        "command": "python simulations/bench/bench_round_mqtt.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": {"python": platform.python_version(), "platform": platform.platform()},
        "mosquitto_settings": MOSQUITTO_SETTINGS.strip().splitlines(),
        "broker_versions": {kind: version(kind) for kind in args.brokers if kind != "embedded"},
        "runs": rows,
        "ratios_vs_first": ratios,
    }, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0 if rows and all(row["completed"] for row in rows) else 4


if __name__ == "__main__":  # the guard matters: worker processes are spawned and import this file
    raise SystemExit(main())
