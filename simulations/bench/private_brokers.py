"""Private MQTT brokers for the benchmarks and tests: mosquitto, NATS's MQTT gateway, RabbitMQ's MQTT plugin.

Each is started on free loopback ports in a temporary directory of its own and stopped afterwards: never the
machine's shared services (mosquitto on 1883, NATS on 4222, RabbitMQ on 5672), which a benchmark must neither
disturb nor be disturbed by. `unavailable(kind)` says why a broker cannot be started here (no binary, no
plugin) or None; `private_broker(kind)` yields its ``mqtt://127.0.0.1:PORT`` URL.

What each needs for the protocol (protocol/SPEC.md sections 5-6: QoS 1, retained bulletins, ``+``/``#``):

- mosquitto: nothing beyond a loopback listener with anonymous access; the queue limits of
  ``docker/mosquitto/mosquitto.conf`` keep it from dropping messages (its ``$SYS`` drop counter says when).
- NATS (2.9): MQTT needs JetStream (retained messages and QoS 1 live in streams) and a ``server_name``;
  ``max_payload`` (1 MB by default) bounds a message, here 8 MB. A client gets at most 65,535 /
  ``mqtt.max_ack_pending`` (default 1,024: 63) QoS 1 subscriptions; the driver then falls back to covering
  filters (`coutil.net.hosting`).
- RabbitMQ (3.10): the ``rabbitmq_mqtt`` plugin, anonymous access mapped to a user and a vhost; started as
  a node of its own (``RABBITMQ_NODENAME``, ``RABBITMQ_MNESIA_BASE``, ...), which takes about 10 s.

Imported by ``bench_round_mqtt.py`` (run as a script, so this directory is on ``sys.path``) and by
``tests/net/test_brokers.py``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from private_mosquitto import BASE_SETTINGS, free_port, mosquitto_binary, private_mosquitto

KINDS = ("mosquitto", "nats", "rabbitmq")

#: mosquitto with the limits of docker/mosquitto/mosquitto.conf, publishing its $SYS counters every second.
MOSQUITTO_SETTINGS = BASE_SETTINGS + (
    "max_queued_messages 200000\nmax_inflight_messages 100\nmax_connections -1\nsys_interval 1\n"
)
NATS_CANDIDATES = ("/usr/sbin/nats-server", "/usr/local/bin/nats-server")
RABBITMQ_SERVER = "/usr/lib/rabbitmq/bin/rabbitmq-server"
RABBITMQ_PLUGINS_GLOB = "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_mqtt-*"
#: Seconds a broker may take to listen (a RabbitMQ node boots in about 10 s on the 2-core machine).
START_SECONDS = {"mosquitto": 10.0, "nats": 20.0, "rabbitmq": 90.0}


def nats_binary() -> str | None:
    found = shutil.which("nats-server")
    return found or next((p for p in NATS_CANDIDATES if os.path.exists(p)), None)


def rabbitmq_server() -> str | None:
    """The node launcher itself (``/usr/sbin/rabbitmq-server`` is a wrapper that switches to the
    rabbitmq user and the system node's files)."""
    if os.path.exists(RABBITMQ_SERVER) and shutil.which("erl") is not None:
        return RABBITMQ_SERVER
    return None


def unavailable(kind: str) -> str | None:
    """Why broker ``kind`` cannot be started here, or None."""
    if kind == "mosquitto":
        return None if mosquitto_binary() else "no mosquitto binary on PATH or in /usr/sbin"
    if kind == "nats":
        return None if nats_binary() else "no nats-server binary on PATH or in /usr/sbin"
    if kind == "rabbitmq":
        if rabbitmq_server() is None:
            return f"no RabbitMQ ({RABBITMQ_SERVER} and erl)"
        if not glob.glob(RABBITMQ_PLUGINS_GLOB):
            return "RabbitMQ has no rabbitmq_mqtt plugin"
        return None
    raise ValueError(f"unknown broker {kind!r}; expected one of {', '.join(KINDS)}")


def _wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float, log: Path) -> None:
    limit = time.monotonic() + seconds
    while time.monotonic() < limit:
        if process.poll() is not None:
            raise RuntimeError(f"the broker exited with code {process.returncode}: {_tail(log)}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {seconds:g} s: {_tail(log)}")


def _tail(log: Path) -> str:
    try:
        return " | ".join(log.read_text(errors="replace").strip().splitlines()[-3:])
    except OSError:
        return "(no log)"


def _stop(process: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    """Terminate the broker's process group (a RabbitMQ node runs helpers of its own), then kill it."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@contextlib.contextmanager
def _running(command: list[str], env: dict[str, str] | None, port: int, kind: str, workdir: Path) -> Iterator[str]:
    log = workdir / "broker.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                                   start_new_session=True)
    try:
        _wait_for_port(port, process, START_SECONDS[kind], log)
        yield f"mqtt://127.0.0.1:{port}"
    finally:
        _stop(process)


@contextlib.contextmanager
def private_nats(binary: str) -> Iterator[str]:
    """nats-server with JetStream and an MQTT listener, all on free loopback ports."""
    port, client_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="coutil-nats-") as tmp:
        workdir = Path(tmp)
        config = workdir / "nats.conf"
        config.write_text(
            f'server_name: "coutil_{port}"\n'
            f"listen: 127.0.0.1:{client_port}\n"
            "max_payload: 8MB\n"
            f'jetstream {{ store_dir: "{workdir / "js"}" }}\n'
            f"mqtt {{ listen: 127.0.0.1:{port} }}\n"
        )
        with _running([binary, "-c", str(config)], None, port, "nats", workdir) as url:
            yield url


@contextlib.contextmanager
def private_rabbitmq(server: str) -> Iterator[str]:
    """A RabbitMQ node of its own (name, ports, database, plugins file) with the MQTT plugin."""
    port, amqp_port, dist_port = free_port(), free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="coutil-rabbitmq-") as tmp:
        workdir = Path(tmp)
        (workdir / "home").mkdir()
        (workdir / "enabled_plugins").write_text("[rabbitmq_mqtt].\n")
        (workdir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{amqp_port}\n"
            f"mqtt.listeners.tcp.default = 127.0.0.1:{port}\n"
            "mqtt.allow_anonymous = true\n"
            "mqtt.default_user = guest\nmqtt.default_pass = guest\nmqtt.vhost = /\n"
            "loopback_users.guest = true\n"
        )
        env = {
            **os.environ,
            "HOME": str(workdir / "home"),  # the Erlang cookie of this node, not the system node's
            "RABBITMQ_NODENAME": f"coutil{port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(amqp_port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(workdir / "mnesia"),
            "RABBITMQ_LOG_BASE": str(workdir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(workdir / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(workdir / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(workdir / "advanced.config"),
            "RABBITMQ_PID_FILE": str(workdir / "rabbit.pid"),
        }
        with _running([server], env, port, "rabbitmq", workdir) as url:
            yield url


@contextlib.contextmanager
def private_broker(kind: str) -> Iterator[str]:
    """Start broker ``kind`` privately and yield its URL; raises RuntimeError when `unavailable`."""
    reason = unavailable(kind)
    if reason is not None:
        raise RuntimeError(f"{kind}: {reason}")
    if kind == "mosquitto":
        binary = mosquitto_binary()
        assert binary is not None
        with private_mosquitto(binary, MOSQUITTO_SETTINGS) as url:
            yield url
    elif kind == "nats":
        binary = nats_binary()
        assert binary is not None
        with private_nats(binary) as url:
            yield url
    else:
        server = rabbitmq_server()
        assert server is not None
        with private_rabbitmq(server) as url:
            yield url


def version(kind: str) -> str | None:
    """The broker's version as its binary reports it (None when unknown)."""
    try:
        if kind == "mosquitto":
            binary = mosquitto_binary()
            if binary is None:
                return None
            text = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=10, check=False).stdout
            return text.splitlines()[0].strip() if text else None
        if kind == "nats":
            binary = nats_binary()
            if binary is None:
                return None
            return subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10,
                                  check=False).stdout.strip() or None
        if kind == "rabbitmq":
            plugins = sorted(glob.glob(RABBITMQ_PLUGINS_GLOB))
            return "rabbitmq_server " + Path(plugins[-1]).name.split("-", 1)[1] if plugins else None
    except (OSError, subprocess.SubprocessError):
        return None
    return None
