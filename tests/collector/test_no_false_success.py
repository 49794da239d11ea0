"""No false success: a round that aborted, released nothing or left its subjects waiting is never exit 0.

Real processes on a private mosquitto: `coutil collector serve` reports an aborted round (exit 4,
one line, ``--json``), subjects stop as soon as the collector ends the round instead of waiting out
``--timeout``, and subjects left waiting by a collector that died say so and exit 4.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from coutil.protocol import topics
from tests.net.helpers import Mosquitto


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "coutil", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen[str], seconds: float) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(f"still running after {seconds} s: {err[-2000:]}") from None


def _registrations(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM registrations").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


class _FirstGroupMessage:
    """Sees the first message a member publishes to her group: the subjects have their assignments.
    ``action`` runs then, in the client's thread: a round of a few subjects over a local broker is over
    within milliseconds of it (no member waits for a re-send since run_keys are retained), sooner
    than the test's thread would wake up to act."""

    def __init__(self, port: int) -> None:
        self.seen = threading.Event()
        self.action: Callable[[], None] | None = None
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2)
        self._client.on_message = lambda client, userdata, message: self._first()
        self._client.connect("127.0.0.1", port)
        self._client.subscribe(f"{topics.PREFIX}/+/s/+/group")
        self._client.loop_start()

    def _first(self) -> None:
        if not self.seen.is_set():
            if self.action is not None:
                self.action()
            self.seen.set()

    def close(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()


def _serve_announced(broker: Mosquitto, tmp_path: Path, *, k: int) -> subprocess.Popen[str]:
    """`collector serve` with a 4 s registration window, once its (retained) announce is out."""
    serve = _spawn("collector", "serve", "--broker", broker.url, "--db", str(tmp_path / "c.sqlite"), "--k", str(k),
                   "--register-window", "4", "--json")
    time.sleep(1.5)  # the announce is retained: the subjects find it
    return serve


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    """A private mosquitto for one test, stopped whatever the test's outcome."""
    started = Mosquitto(tmp_path)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("coutil: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.broker
@pytest.mark.slow
def test_an_aborted_round_is_exit_4_for_the_collector_and_its_subjects(tmp_path: Path, broker: Mosquitto) -> None:
    serve = _serve_announced(broker, tmp_path, k=5)
    started = time.monotonic()
    swarm = _spawn("subject", "swarm", "--broker", broker.url, "--count", "2", "--timeout", "120", "--json")
    out, err = _finish(serve, 60)
    assert serve.returncode == 4, err[-2000:]
    assert "too_few_subjects" in _one_error_line(err)
    summary = json.loads(out)
    assert summary["completed"] == 0 and summary["rounds"][0]["abort_reason"] == "too_few_subjects"
    assert summary["rounds"][0]["completed"] is False and summary["problems"]
    out, err = _finish(swarm, 60)
    # The collector withdrew its announce: the subjects stop now, not after --timeout (120 s).
    assert time.monotonic() - started < 45
    assert swarm.returncode == 4, err[-2000:]
    line = _one_error_line(err)
    assert "0/2 subjects finished" in line and "ended round" in line
    result = json.loads(out)
    assert result["finished"] == 0 and result["ended_by"] == "round_over"


@pytest.mark.broker
@pytest.mark.slow
def test_subjects_left_by_a_dead_collector_say_so_and_exit_4(tmp_path: Path, broker: Mosquitto) -> None:
    db = tmp_path / "c.sqlite"
    procs: list[subprocess.Popen[str]] = []
    sharing = _FirstGroupMessage(broker.port)
    try:
        serve = _spawn("collector", "serve", "--broker", broker.url, "--db", str(db), "--k", "3",
                       "--register-window", "60", "--expected", "4", "--set", "step_timeout=0.5",
                       "--set", "retry_interval=0.25")
        procs.append(serve)
        # Registration closed, the round in its sharing phase: killed at the first member message.
        sharing.action = lambda: serve.send_signal(signal.SIGKILL)
        time.sleep(1.5)
        swarm = _spawn("subject", "swarm", "--broker", broker.url, "--count", "3", "--timeout", "120", "--json")
        procs.append(swarm)
        data = tmp_path / "me.csv"
        data.write_text("age,height_cm,weight_kg,hours_worked,income,savings,medical_spend\n41,170,70,38,30000,5000,900\n")
        limit = time.monotonic() + 60
        while _registrations(db) < 3 and time.monotonic() < limit:
            time.sleep(0.05)
        join = _spawn("subject", "join", "--broker", broker.url, "--data", str(data), "--timeout", "120", "--json")
        procs.append(join)
        while _registrations(db) < 4 and time.monotonic() < limit:
            time.sleep(0.05)
        assert _registrations(db) == 4
        # Until a subject has her assignment, the registration deadline (60 s away) still stands for her,
        # rightly: kill once the members speak in their group, and before the round can be over.
        assert sharing.seen.wait(60)
        serve.wait(10)
        started = time.monotonic()
        for proc in (join, swarm):
            out, err = _finish(proc, 90)
            assert proc.returncode == 4, err[-2000:]
            assert "the collector stopped answering" in _one_error_line(err)
            assert json.loads(out)["ended_by"] == "collector_silent"
        # Ten step timeouts of 0.5 s, not --timeout (120 s).
        assert time.monotonic() - started < 60
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        sharing.close()


@pytest.mark.broker
@pytest.mark.slow
def test_a_swarm_whose_floor_on_k_refuses_the_round_is_exit_4_not_0(tmp_path: Path, broker: Mosquitto) -> None:
    """Subjects that do not take part (k = 3 announced, --min-k 4) finish at once: that is no success."""
    serve = _serve_announced(broker, tmp_path, k=3)
    swarm = _spawn("subject", "swarm", "--broker", broker.url, "--count", "3", "--min-k", "4", "--timeout",
                   "60", "--json")
    out, err = _finish(swarm, 60)
    assert swarm.returncode == 4, err[-2000:]
    assert "3/3 subjects do not take part" in _one_error_line(err) and "--min-k 4" in err
    assert json.loads(out)["incompatible"] == 3
    _finish(serve, 60)
    assert serve.returncode == 4  # nobody registered: too_few_subjects
