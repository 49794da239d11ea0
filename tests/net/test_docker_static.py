"""docker/: the compose topology, the image and the mosquitto config/ACL, checked without docker.

No docker engine runs on our machines, so the compose file and Dockerfile are checked statically,
and the very mosquitto.conf + ACL the compose file mounts are loaded by a real mosquitto (rewritten
to a free port and a temp dir) and probed with MQTT clients: anonymous refused, a subject may write
only under her own sid, everyone authorised reads the protocol topics.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
from pathlib import Path

import aiomqtt
import pytest

from tests.net.helpers import Mosquitto, free_port

yaml = pytest.importorskip("yaml", reason="PyYAML (installed with amqtt) parses compose.yaml")

DOCKER = Path(__file__).resolve().parents[2] / "docker"
SUBJECT_WRITE_PATTERN = "coutil/v2/+/s/%c/#"


def _compose() -> dict[str, object]:
    data = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _command(service: dict[str, object]) -> str:
    command = service["command"]
    return " ".join(command) if isinstance(command, list) else str(command)


def test_compose_services_commands_and_volumes() -> None:
    compose = _compose()
    services = compose["services"]
    assert isinstance(services, dict)
    assert {"mosquitto", "collector", "subjects"} <= set(services)
    volumes = compose["volumes"]
    assert isinstance(volumes, dict) and "collector-data" in volumes

    broker = services["mosquitto"]
    mounts = {v.split(":")[1] for v in broker["volumes"]}
    assert "/mosquitto/config/mosquitto.conf" in mounts and "/mosquitto/config/acl" in mounts
    for volume in broker["volumes"]:
        source = volume.split(":")[0]
        if source.startswith("./"):
            assert (DOCKER / source).is_file(), f"compose mounts a missing file {source}"
    # The broker is published on the host's loopback only.
    assert all(str(p).startswith("127.0.0.1:") for p in broker.get("ports", []))

    collector = services["collector"]
    command = _command(collector)
    assert command.startswith("collector serve ")
    assert re.search(r"--broker mqtt://collector:\S+@mosquitto:1883\b", command)
    assert "--db /data/collector.sqlite" in command
    assert any(v.endswith(":/data") for v in collector["volumes"])
    assert collector["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / collector["build"]["context"] / collector["build"]["dockerfile"]).is_file()

    subjects = services["subjects"]
    command = _command(subjects)
    assert command.startswith("subject swarm ")
    assert re.search(r"--broker mqtt://subject:\S+@mosquitto:1883\b", command)
    assert re.search(r"--count \S+", command)
    # Scalable with --scale subjects=N: no fixed container name, no published host ports.
    assert "container_name" not in subjects and "ports" not in subjects
    assert subjects["image"] == collector["image"]


def test_dockerfile_is_slim_non_root_with_coutil_entrypoint() -> None:
    lines = [ln.strip() for ln in (DOCKER / "Dockerfile").read_text().splitlines() if ln.strip()]
    instructions = [ln for ln in lines if not ln.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert any(re.match(r"RUN pip install \.(\s|$)", ln) for ln in instructions)
    users = [ln.split()[1] for ln in instructions if ln.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    entrypoint = next(ln for ln in instructions if ln.startswith("ENTRYPOINT "))
    assert json.loads(entrypoint.removeprefix("ENTRYPOINT ")) == ["coutil"]
    # The last USER comes before the entrypoint: the process never runs as root.
    assert instructions.index(f"USER {users[-1]}") < instructions.index(entrypoint)


def _acl_rules() -> dict[str | None, list[tuple[str, str]]]:
    """user (None for pattern lines) -> [(access, topic)]."""
    rules: dict[str | None, list[tuple[str, str]]] = {None: []}
    user: str | None = None
    for raw in (DOCKER / "mosquitto" / "acl").read_text().splitlines():
        line = raw.strip()  # mosquitto comments are whole lines: "#" inside a topic is a wildcard
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "user":
            user = words[1]
            rules.setdefault(user, [])
        elif words[0] == "topic":
            access, topic = (words[1], words[2]) if len(words) == 3 else ("readwrite", words[1])
            rules[user].append((access, topic))
        elif words[0] == "pattern":
            rules[None].append((words[1], words[2]))
    return rules


def test_acl_confines_subjects_to_their_own_topics() -> None:
    rules = _acl_rules()
    assert ("readwrite", "coutil/v2/#") in rules["collector"]
    assert rules["subject"] == [("read", "coutil/v2/#")]
    assert rules[None] == [("write", SUBJECT_WRITE_PATTERN)]
    config = (DOCKER / "mosquitto" / "mosquitto.conf").read_text()
    settings = dict(ln.split(None, 1) for ln in config.splitlines() if ln.strip() and not ln.startswith("#"))
    assert settings["allow_anonymous"] == "false"
    assert settings["acl_file"] == "/mosquitto/config/acl"
    assert int(settings["max_queued_messages"]) >= 100_000  # the default 1000 drops QoS 1 bursts
    assert int(settings["max_packet_size"]) > 64 * 2**20
    assert settings["set_tcp_nodelay"] == "true"  # else ~40 ms per hop (Nagle + delayed ACK)
    examples = dict(ln.split(":", 1) for ln in (DOCKER / "mosquitto" / "passwords.example").read_text().split())
    assert set(examples) == {"collector", "subject"}


def _mosquitto_hash(password: str, salt: bytes) -> str:
    """mosquitto 2.0 password-file hash ($7$ = PBKDF2-HMAC-SHA512, 101 iterations)."""
    digest = hashlib.pbkdf2_hmac("sha512", password.encode(), salt, 101)
    return f"$7$101${base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def _rewritten_config(tmp_path: Path, port: int) -> str:
    """The docker mosquitto.conf with its listener on a free loopback port and files in tmp_path."""
    examples = dict(ln.split(":", 1) for ln in (DOCKER / "mosquitto" / "passwords.example").read_text().split())
    passwords = tmp_path / "passwords"
    passwords.write_text("".join(f"{u}:{_mosquitto_hash(p, os.urandom(12))}\n" for u, p in examples.items()))
    passwords.chmod(0o600)
    acl = tmp_path / "acl"
    acl.write_text((DOCKER / "mosquitto" / "acl").read_text())
    replaced = {
        "listener": f"listener {port} 127.0.0.1",
        "password_file": f"password_file {passwords}",
        "acl_file": f"acl_file {acl}",
    }
    lines = []
    for line in (DOCKER / "mosquitto" / "mosquitto.conf").read_text().splitlines():
        key = line.split(" ", 1)[0]
        lines.append(replaced.pop(key) if key in replaced else line)
    assert not replaced, f"mosquitto.conf lacks {sorted(replaced)}"
    if os.geteuid() == 0:
        lines.append("user root")  # else mosquitto drops to `mosquitto`, who cannot read tmp_path
    return "\n".join(lines) + "\n"


@pytest.mark.broker
def test_docker_mosquitto_config_loads_and_enforces_the_acl(tmp_path: Path) -> None:
    port = free_port()
    broker = Mosquitto(tmp_path, port=port, config_text=_rewritten_config(tmp_path, port))
    broker.start()
    examples = dict(ln.split(":", 1) for ln in (DOCKER / "mosquitto" / "passwords.example").read_text().split())

    def client(identifier: str, user: str | None) -> aiomqtt.Client:
        return aiomqtt.Client(
            "127.0.0.1",
            port,
            identifier=identifier,
            username=user,
            password=examples.get(user or ""),
            protocol=aiomqtt.ProtocolVersion.V311,
        )

    async def main() -> tuple[list[str], list[str], bool]:
        refused = False
        try:
            async with client("anonymous", None):
                pass
        except aiomqtt.MqttError:
            refused = True
        collector_saw: list[str] = []
        subject_saw: list[str] = []
        async with client("collector-1", "collector") as collector, client("aaaa", "subject") as alice:
            await collector.subscribe("coutil/v2/#", qos=1)
            await alice.subscribe("coutil/v2/#", qos=1)
            await alice.publish("coutil/v2/r1/s/bbbb/up", b"forged: another sid", qos=1)
            await alice.publish("coutil/v2/announce", b"forged: collector topic", qos=1)
            await alice.publish("coutil/v2/r1/c/to/bbbb", b"forged: collector inbox", qos=1)
            await alice.publish("coutil/v2/r1/s/aaaa/up", b"own up", qos=1)
            await alice.publish("coutil/v2/r1/s/aaaa/group", b"own group", qos=1)
            await collector.publish("coutil/v2/r1/c/to/aaaa", b"to alice", qos=1)
            async with asyncio.timeout(10):
                async for message in collector.messages:
                    collector_saw.append(bytes(message.payload).decode())  # type: ignore[arg-type]
                    if collector_saw[-1] == "to alice":
                        break
                async for message in alice.messages:
                    subject_saw.append(bytes(message.payload).decode())  # type: ignore[arg-type]
                    if subject_saw[-1] == "to alice":
                        break
        return collector_saw, subject_saw, refused

    try:
        collector_saw, subject_saw, refused = asyncio.run(main())
    finally:
        broker.stop()
    assert refused, "anonymous client was let in"
    # Messages of one publisher arrive in order, so once "to alice" arrived nothing forged is in flight.
    assert collector_saw == ["own up", "own group", "to alice"]
    assert subject_saw == ["own up", "own group", "to alice"]
