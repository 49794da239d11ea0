"""The collector service as processes: kill -9 mid-registration, restart, nothing acknowledged is lost.

Topology as in docker/compose.yaml, but as local processes: a private mosquitto, `coutil collector
serve`, and `coutil subject swarm` processes.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.net.helpers import Mosquitto


def _spawn(*args: str, stderr_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "coutil", *args], stdout=subprocess.PIPE,
                            stderr=stderr_path.open("wb"))


def _registrations(db: Path) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM registrations").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


def _wait(condition: object, seconds: float, what: str) -> None:
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.broker
@pytest.mark.slow
def test_kill_9_mid_registration_then_resume(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    db = tmp_path / "collector.sqlite"
    serve_args = ("collector", "serve", "--broker", broker.url, "--db", str(db), "--k", "3",
                  "--register-window", "90", "--expected", "12")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        first = _spawn(*serve_args, stderr_path=tmp_path / "collector1.log")
        procs.append(first)
        early = _spawn("subject", "swarm", "--broker", broker.url, "--count", "5", "--timeout", "150", "--json",
                       stderr_path=tmp_path / "early.log")
        procs.append(early)
        _wait(lambda: _registrations(db) == 5, 60, "5 registrations committed")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # Everything acknowledged before the kill is on disk.
        assert _registrations(db) == 5
        second = _spawn(*serve_args, stderr_path=tmp_path / "collector2.log")
        procs.append(second)
        late = _spawn("subject", "swarm", "--broker", broker.url, "--count", "7", "--timeout", "150", "--json",
                      stderr_path=tmp_path / "late.log")
        procs.append(late)
        for proc, name in ((early, "early"), (late, "late"), (second, "collector2")):
            try:
                proc.wait(180)
            except subprocess.TimeoutExpired:
                raise AssertionError((tmp_path / f"{name}.log").read_text()[-3000:]) from None
        log = (tmp_path / "collector2.log").read_text()
        assert second.returncode == 0, log[-3000:]
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        assert lines[0]["how"] == "resumed"
        end = next(line for line in lines if line["event"] == "round_end")
        assert end["completed"] is True and end["registered"] == 12 and end["released_rows"] == 12
        for proc in (early, late):
            assert proc.returncode == 0
            assert proc.stdout is not None
            summary = json.loads(proc.stdout.read().decode())
            assert summary["finished"] == summary["subjects"]
        assert _registrations(db) == 12
        out = tmp_path / "release.csv"
        export = subprocess.run([sys.executable, "-m", "coutil", "collector", "export", "--db", str(db),
                                 "-o", str(out), "--json"], capture_output=True, text=True, check=False)
        assert export.returncode == 0, export.stderr
        assert json.loads(export.stdout)["rows"] == 12
        assert len(out.read_text().splitlines()) == 13
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        broker.stop()
