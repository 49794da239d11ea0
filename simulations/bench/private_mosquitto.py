"""A private mosquitto for the MQTT benchmarks: started on a free loopback port, stopped afterwards.

Never the machine's shared broker (127.0.0.1:1883): a benchmark must not disturb, nor be disturbed
by, anyone else's traffic. Imported by ``bench_mqtt.py`` and ``bench_round_mqtt.py`` (run as scripts,
so this directory is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: Settings every benchmark run uses (the listener line is added per run).
BASE_SETTINGS = "allow_anonymous true\npersistence false\nset_tcp_nodelay true\n"


def mosquitto_binary() -> str | None:
    """The mosquitto binary on PATH or in /usr/sbin, or None."""
    found = shutil.which("mosquitto")
    if found is None and Path("/usr/sbin/mosquitto").exists():
        found = "/usr/sbin/mosquitto"
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def private_mosquitto(binary: str, settings: str) -> Iterator[str]:
    """Run ``binary`` with ``settings`` (mosquitto.conf lines, no listener) and yield its mqtt:// URL."""
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "mosquitto.conf"
        config.write_text(f"listener {port} 127.0.0.1\n{settings}")
        process = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        try:
            for _ in range(500):
                with socket.socket() as sock:
                    if sock.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.01)
            yield f"mqtt://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(10)
