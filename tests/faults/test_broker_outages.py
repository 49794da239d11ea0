"""Broker outages against a private mosquitto, with the deployed roles as processes.

`coutil collector serve` (SQLite) and `coutil subject swarm` (one MQTT connection per subject) run
against a private mosquitto on a free port, started with the limits of docker/mosquitto/mosquitto.conf.
What each test proves (each fails with the behaviour before issue 14: every subject was excluded as
``silent`` or left without a verdict, and the collector still reported the round completed):

- `test_broker_paused_during_sharing`: mosquitto frozen (SIGSTOP) for 60 s (three step timeouts)
  just as sharing begins: the round completes with every subject released and accepting.
- `test_broker_paused_during_auditing`: frozen for 60 s just after the release, with an audit window
  of 30 s: every subject's verdict still arrives (the audit window waits for the transport).
- `test_broker_restarted_during_registration`: mosquitto killed (SIGKILL) while registration is open
  and restarted 60 s later on the same port without persistence (every subscription, retained
  message and queued message lost, the registration deadline passed meanwhile): every subject is
  released and accepts; the swarm's connections reconnect and resubscribe, the collector publishes
  its retained bulletins again.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.net.helpers import Mosquitto, free_port, mosquitto_binary

N = 40
PAUSE = 60.0
#: The limits of docker/mosquitto/mosquitto.conf (no auth, no ACL, a loopback listener).
SETTINGS = ("allow_anonymous true\npersistence false\nlog_dest none\nmax_queued_messages 200000\n"
            "max_inflight_messages 100\nmax_packet_size 67200000\nset_tcp_nodelay true\nmax_connections -1\n")

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def _broker(tmp_path: Path, port: int) -> Mosquitto:
    mosquitto_binary()  # skips with a reason when there is none
    broker = Mosquitto(tmp_path, port=port, config_text=f"listener {port} 127.0.0.1\n{SETTINGS}")
    broker.start()
    return broker


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "coutil", *args], stdout=subprocess.PIPE, stderr=log.open("wb"))


def _log_lines(path: Path) -> list[dict[str, object]]:
    lines = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(json.JSONDecodeError):  # a line being written
                lines.append(json.loads(line))
    return lines


def _registrations(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM registrations").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _run(tmp_path: Path, fault: Callable[[Mosquitto, Path, Path], None], *sets: str) -> None:
    """Serve one round of N subjects, inject ``fault`` (given the broker, the collector's log and its
    database), and check that every subject was released and accepted."""
    port = free_port()
    broker = _broker(tmp_path, port)
    db = tmp_path / "collector.sqlite"
    collector_log, swarm_log = tmp_path / "collector.log", tmp_path / "swarm.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        serve_args = ["collector", "serve", "--broker", broker.url, "--db", str(db), "--k", "5",
                      "--register-window", "30"]
        for item in sets:
            serve_args += ["--set", item]
        collector = _spawn(serve_args, collector_log)
        procs.append(collector)
        _wait(lambda: any(line.get("event") == "round" for line in _log_lines(collector_log)), 30, "the round")
        swarm = _spawn(["subject", "swarm", "--broker", broker.url, "--count", str(N), "--timeout", "400",
                        "--json"], swarm_log)
        procs.append(swarm)
        fault(broker, collector_log, db)
        for proc, log in ((swarm, swarm_log), (collector, collector_log)):
            try:
                proc.wait(420)
            except subprocess.TimeoutExpired:
                raise AssertionError(log.read_text()[-3000:]) from None
        lines = _log_lines(collector_log)
        end = next((line for line in lines if line["event"] == "round_end"), None)
        assert end is not None, collector_log.read_text()[-3000:]
        excluded = [line for line in lines if line["event"] == "excluded"]
        assert excluded == [], excluded[:5]
        assert end["completed"] is True and end["registered"] == N, end
        assert end["released_rows"] == N and end["verdicts"] == N and end["accepted"] == N, end
        assert swarm.stdout is not None
        summary = json.loads(swarm.stdout.read().decode())
        assert summary["finished"] == N and summary["accepted"] == N, summary
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        if broker.process is not None and broker.process.poll() is None:
            broker.process.send_signal(signal.SIGCONT)
        broker.stop()


def _pause_on(event: str) -> Callable[[Mosquitto, Path, Path], None]:
    def fault(broker: Mosquitto, collector_log: Path, db: Path) -> None:
        _wait(lambda: any(line.get("event") == event for line in _log_lines(collector_log)), 120, event)
        assert broker.process is not None
        broker.process.send_signal(signal.SIGSTOP)
        try:
            time.sleep(PAUSE)
        finally:
            broker.process.send_signal(signal.SIGCONT)
    return fault


def test_broker_paused_during_sharing(tmp_path: Path) -> None:
    _run(tmp_path, _pause_on("grouped"), f"expected_subjects={N}")


def test_broker_paused_during_auditing(tmp_path: Path) -> None:
    # A release whose audit takes each swarm a few seconds (a large null sample), so that the pause
    # begins while verdicts are still awaited; an audit window shorter than the pause.
    _run(tmp_path, _pause_on("released"), f"expected_subjects={N}", "audit_window=30", "random_records=2000000")


def test_broker_restarted_during_registration(tmp_path: Path) -> None:
    def fault(broker: Mosquitto, collector_log: Path, db: Path) -> None:
        _wait(lambda: _registrations(db) == N, 60, "every registration committed")
        assert broker.process is not None
        broker.process.kill()  # no goodbye, nothing persisted
        broker.process.wait(10)
        time.sleep(PAUSE)
        broker.start()  # same port, empty

    _run(tmp_path, fault)
