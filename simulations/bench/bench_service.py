"""The collector as a long-running service (issue 14, item 2): many rounds in one process, no leak.

Reproduce with (from the repository root, venv active)::

    python simulations/bench/bench_service.py                          # 20 rounds of 1,000 subjects
    python simulations/bench/bench_service.py --rounds 5 --subjects 200   # a quicker look

One ``coutil collector serve --rounds R`` process (SQLite database in a temporary directory) runs R
rounds against a private mosquitto started here on a free loopback port with the limits of
``docker/mosquitto/mosquitto.conf``. For every round it announces, a fresh ``coutil subject swarm
--count N`` process joins (one multiplexed connection by default, ``--per-subject`` for one connection
per subject). The service's JSON log lines are followed on its stderr; at each ``round_end`` the
collector process is sampled: resident memory (VmRSS in /proc/<pid>/status), open file descriptors
(/proc/<pid>/fd) and the database's size (pages in use, WAL included; the files on disk too).

Promises checked (printed as PASS/FAIL, exit status 1 on a failure): every round completes with every
subject released and accepting; VmRSS after the last round within 10 % of VmRSS after round 2; as many
open descriptors after the last round as after round 2; the database grows by about the same amount per
round (the rounds' own records: the last round's growth within 50 % of the median). A table goes to
stdout, JSON to simulations/bench/results/bench_service.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from private_mosquitto import BASE_SETTINGS, mosquitto_binary, private_mosquitto

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: docker/mosquitto/mosquitto.conf's limits (the listener is added by `private_mosquitto`).
MOSQUITTO_SETTINGS = BASE_SETTINGS + (
    "max_queued_messages 200000\nmax_inflight_messages 100\nmax_packet_size 67200000\nmax_connections -1\n"
    "log_dest none\n"
)
RSS_TOLERANCE = 0.10


def _coutil(*args: str) -> list[str]:
    return [sys.executable, "-m", "coutil", *args]


def _proc_sample(pid: int, db: Path) -> dict[str, int]:
    rss_kb = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss_kb = int(line.split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    on_disk = sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())
    # The logical size (pages in use, the WAL's included): the files grow in steps and the WAL is reused.
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return {"rss_kb": rss_kb, "open_fds": fds, "db_bytes": (pages - free) * page_size, "db_files_bytes": on_disk}


def run(rounds: int, subjects: int, per_subject: bool, register_window: float) -> dict[str, Any]:
    binary = mosquitto_binary()
    if binary is None:
        raise SystemExit("mosquitto not found (apt install mosquitto): nothing measured")
    results: list[dict[str, Any]] = []
    swarms: list[subprocess.Popen[bytes]] = []
    with private_mosquitto(binary, MOSQUITTO_SETTINGS) as url, tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "collector.sqlite"
        serve = subprocess.Popen(
            _coutil("collector", "serve", "--broker", url, "--db", str(db), "--rounds", str(rounds),
                    "--k", "5", "--register-window", str(register_window), "--expected", str(subjects)),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert serve.stderr is not None
        started: dict[str, float] = {}
        lines: list[dict[str, Any]] = []
        lock = threading.Lock()

        def follow() -> None:
            assert serve.stderr is not None
            for raw in serve.stderr:
                if not raw.startswith("{"):
                    continue
                line = json.loads(raw)
                event = line.get("event")
                if event == "round":
                    started[line["round"]] = time.monotonic()
                    swarm_args = ["subject", "swarm", "--broker", url, "--count", str(subjects), "--timeout", "900",
                                  "--json"]
                    if not per_subject:
                        swarm_args.append("--shared-connection")
                    swarms.append(subprocess.Popen(_coutil(*swarm_args), stdout=subprocess.PIPE,
                                                   stderr=subprocess.DEVNULL))
                elif event == "round_end":
                    sample = _proc_sample(serve.pid, db)
                    wall = time.monotonic() - started.get(line["round"], time.monotonic())
                    with lock:
                        lines.append({**line, **sample, "wall_s": round(wall, 2)})
                    done = len(lines)
                    print(f"round {done}/{rounds}: completed={line['completed']} released={line['released_rows']} "
                          f"accepted={line['accepted']} rss={sample['rss_kb']} kB fds={sample['open_fds']} "
                          f"db={sample['db_bytes']} B", file=sys.stderr, flush=True)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        t0 = time.monotonic()
        serve.wait()
        follower.join(10)
        total = time.monotonic() - t0
        for swarm in swarms:
            try:
                swarm.wait(60)
            except subprocess.TimeoutExpired:
                swarm.kill()
        swarm_summaries = []
        for swarm in swarms:
            out = swarm.stdout.read().decode() if swarm.stdout is not None else ""
            try:
                swarm_summaries.append(json.loads(out))
            except json.JSONDecodeError:
                swarm_summaries.append({"error": f"exit {swarm.returncode}"})
    results = lines
    return {"rounds": results, "swarms": swarm_summaries, "total_s": round(total, 1), "exit_code": serve.returncode}


def verdicts(data: dict[str, Any], rounds: int, subjects: int) -> dict[str, bool]:
    rows = data["rounds"]
    checks = {
        "every round completed with everyone": len(rows) == rounds and all(
            r["completed"] and r["released_rows"] == subjects and r["accepted"] == subjects for r in rows),
    }
    if len(rows) >= 3:
        second, last = rows[1], rows[-1]
        checks["VmRSS after the last round within 10 % of after round 2"] = (
            abs(last["rss_kb"] - second["rss_kb"]) <= RSS_TOLERANCE * second["rss_kb"])
        checks["open fds after the last round = after round 2"] = last["open_fds"] <= second["open_fds"]
        growth = [b["db_bytes"] - a["db_bytes"] for a, b in itertools.pairwise(rows)]
        median = statistics.median(growth)
        checks["database growth per round steady (last within 50 % of the median)"] = (
            median > 0 and abs(growth[-1] - median) <= 0.5 * median)
    return checks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--per-subject", action="store_true", help="one MQTT connection per subject")
    parser.add_argument("--register-window", type=float, default=120.0,
                        help="seconds (registration closes as soon as every subject registered)")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "bench_service.json")
    args = parser.parse_args(argv)
    data = run(args.rounds, args.subjects, args.per_subject, args.register_window)
    checks = verdicts(data, args.rounds, args.subjects)
    print(f"{'round':>5} {'completed':>9} {'released':>8} {'accepted':>8} {'wall s':>7} {'VmRSS kB':>9} "
          f"{'fds':>4} {'db bytes':>10}")
    for i, r in enumerate(data["rounds"], 1):
        print(f"{i:>5} {r['completed']!s:>9} {r['released_rows']:>8} {r['accepted']:>8} {r['wall_s']:>7} "
              f"{r['rss_kb']:>9} {r['open_fds']:>4} {r['db_bytes']:>10}")
    rows = data["rounds"]
    if len(rows) >= 2:
        print(f"VmRSS last/round 2: {rows[-1]['rss_kb'] / rows[1]['rss_kb']:.3f}; "
              f"fds last - round 2: {rows[-1]['open_fds'] - rows[1]['open_fds']}; total {data['total_s']} s")
    for name, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({
        "command": "python simulations/bench/bench_service.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "measured": time.strftime("%Y-%m-%d %H:%M"), "machine": platform.platform(), "cpus": os.cpu_count(),
        "rounds_requested": args.rounds, "subjects": args.subjects, "per_subject": args.per_subject,
        **data, "checks": checks}, indent=2) + "\n")
    return 0 if all(checks.values()) and data["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
