"""Per-second CPU use of a benchmark's processes: this one, its children (worker processes, a broker).

Where a round spends its wall time is not where it spends its CPU: a phase in which one process works
while the others wait for it costs a whole second of wall time per CPU second. `CpuTimeline` samples
every process of the tree once a second (psutil) so that such stretches show; `serial_seconds` counts
them and `plot` draws the timeline (matplotlib, the ``plot`` extra).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psutil

#: A second in which the processes together used less than this many cores, while one of them used
#: most of a core, is counted as serial (one process working, the others waiting for it).
SERIAL_BELOW = 1.3


def _role(proc: psutil.Process, me: int) -> str:
    if proc.pid == me:
        return "collector"
    try:
        name = " ".join(proc.cmdline()).lower()
    except psutil.Error:
        return f"pid{proc.pid}"
    for broker in ("mosquitto", "nats", "rabbitmq", "beam"):
        if broker in name:
            return "broker"
    return "worker"


class CpuTimeline:
    """Samples this process and its descendants every ``interval`` seconds, in a thread."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.samples: list[dict[str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cpu-timeline", daemon=True)
        self._me = psutil.Process()
        self._last: dict[int, float] = {}
        self._roles: dict[int, str] = {}

    def __enter__(self) -> CpuTimeline:
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            row: dict[str, float] = {"t": round(time.monotonic() - self._t0, 1)}
            try:
                procs = [self._me, *self._me.children(recursive=True)]
            except psutil.Error:
                continue
            for proc in procs:
                try:
                    times = proc.cpu_times()
                except psutil.Error:
                    continue
                used = times.user + times.system
                role = self._roles.get(proc.pid, "")
                if not role:
                    role = _role(proc, self._me.pid)
                    if role == "worker":
                        role = f"worker {sum(r.startswith('worker') for r in self._roles.values()) + 1}"
                    self._roles[proc.pid] = role
                if proc.pid in self._last:
                    row[role] = round(row.get(role, 0.0) + (used - self._last[proc.pid]) / self.interval, 3)
                self._last[proc.pid] = used
            self.samples.append(row)

    def as_dict(self) -> dict[str, Any]:
        return {"interval_s": self.interval, "samples": self.samples,
                "serial_seconds": serial_seconds(self.samples, self.interval)}


def serial_seconds(samples: list[dict[str, float]], interval: float) -> dict[str, float]:
    """Seconds in which one process worked alone (see `SERIAL_BELOW`), by that process's role."""
    alone: dict[str, float] = {}
    for row in samples:
        loads = {k: v for k, v in row.items() if k != "t"}
        if not loads or sum(loads.values()) >= SERIAL_BELOW:
            continue
        role, load = max(loads.items(), key=lambda kv: kv[1])
        if load >= 0.8:
            key = "worker" if role.startswith("worker") else role
            alone[key] = round(alone.get(key, 0.0) + interval, 1)
    return alone


def plot(timeline: dict[str, Any], title: str, path: Path) -> bool:
    """Draw the timeline (stacked cores per role); False when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples = timeline["samples"]
    roles = sorted({k for row in samples for k in row if k != "t"},
                   key=lambda r: (r != "collector", r != "broker", r))
    t = [row["t"] for row in samples]
    fig, ax = plt.subplots(figsize=(10, 3.5))
    ax.stackplot(t, [[row.get(r, 0.0) for row in samples] for r in roles], labels=roles, alpha=0.85)
    ax.set_xlabel("seconds since the run started")
    ax.set_ylabel("cores busy")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
