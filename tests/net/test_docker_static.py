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
    # The broker is published on the host's loopback only, on its TLS port.
    assert broker.get("ports") == ["127.0.0.1:8883:8883"]

    collector = services["collector"]
    command = _command(collector)
    assert command.startswith("collector serve ")
    assert re.search(r"--broker mqtts://collector:\$\{[^}]+\}@mosquitto:8883\b", command)
    assert "--ca-file /tls/ca.crt" in command and re.search(r"--rounds \S+", command)
    assert "--db /data/collector.sqlite" in command
    assert any(v.endswith(":/data") for v in collector["volumes"])
    assert collector["build"]["dockerfile"] == "docker/Dockerfile"
    assert (DOCKER / collector["build"]["context"] / collector["build"]["dockerfile"]).is_file()

    subjects = services["subjects"]
    command = _command(subjects)
    assert command.startswith("subject swarm ")
    assert re.search(r"--broker mqtts://subject:\$\{[^}]+\}@mosquitto:8883\b", command)
    assert "--ca-file /tls/ca.crt" in command
    assert re.search(r"--count \S+", command)
    # Scalable with --scale subjects=N: no fixed container name, no published host ports.
    assert "container_name" not in subjects and "ports" not in subjects
    assert subjects["image"] == collector["image"]


def test_compose_pins_images_checks_health_and_requires_secrets() -> None:
    compose = _compose()
    services = compose["services"]
    assert isinstance(services, dict)
    for name, service in services.items():
        image = service.get("image", "")
        # An exact release (x.y.z) or our own versioned build: never a floating tag such as :2.0 or :latest.
        assert re.fullmatch(r"[\w./-]+:\d+\.\d+\.\d+", image), (name, image)
    for name in ("mosquitto", "collector"):
        check = services[name]["healthcheck"]
        assert check["test"] and check["retries"] >= 1, name
    assert services["collector"]["depends_on"]["mosquitto"]["condition"] == "service_healthy"
    assert services["mosquitto"]["depends_on"]["broker-secrets"]["condition"] == "service_completed_successfully"
    # A collector that ran its --rounds exits 0 and is not started again (restart: unless-stopped repeated
    # rounds forever); a crash still restarts it.
    assert services["collector"]["restart"] == "on-failure"
    text = (DOCKER / "compose.yaml").read_text()
    # No password falls back to an example: every secret is required (${VAR:?message}).
    for variable in ("COUTIL_PASSWORDS_FILE", "COUTIL_COLLECTOR_PASSWORD", "COUTIL_SUBJECT_PASSWORD"):
        assert re.search(r"\$\{" + variable + r":\?[^}]+\}", text), variable
        assert not re.search(r"\$\{" + variable + r":-", text), variable
    assert "change-me" not in text and "passwords.example" not in text.split("#")[-1]


def test_compose_config_is_valid_for_docker_compose(tmp_path: Path) -> None:
    import shutil
    import subprocess

    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True, check=False).returncode:
        pytest.skip("the docker compose plugin is not installed here (the file is checked statically above)")
    env = {**os.environ, "COUTIL_PASSWORDS_FILE": str(tmp_path / "p"), "COUTIL_COLLECTOR_PASSWORD": "x",
           "COUTIL_SUBJECT_PASSWORD": "y"}
    result = subprocess.run([docker, "compose", "-f", str(DOCKER / "compose.yaml"), "config", "--quiet"],
                            capture_output=True, text=True, env=env, check=False)
    assert result.returncode == 0, result.stderr


def test_image_build_context_and_lock_file() -> None:
    ignore = (DOCKER.parent / ".dockerignore").read_text().splitlines()
    # Everything is excluded first, then only what the Dockerfile copies is let back in (no .venv, no .git).
    assert ignore[[ln.strip() for ln in ignore].index("*")] == "*"
    allowed = {ln[1:].rstrip("/") for ln in ignore if ln.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "coutil", "docker/requirements.lock"}
    lock = [ln for ln in (DOCKER / "requirements.lock").read_text().splitlines() if ln and not ln.startswith("#")]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+==[\w.]+", ln) for ln in lock), "every line pins one exact version"
    pinned = {re.sub(r"[-_.]+", "-", ln.split("==")[0]).lower() for ln in lock}
    import tomllib

    project = tomllib.loads((DOCKER.parent / "pyproject.toml").read_text())["project"]
    wanted = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0]).lower()
              for dep in project["dependencies"]}
    assert wanted <= pinned, f"pyproject dependencies missing from docker/requirements.lock: {wanted - pinned}"


def test_dockerfile_is_slim_non_root_with_coutil_entrypoint() -> None:
    lines = [ln.strip() for ln in (DOCKER / "Dockerfile").read_text().splitlines() if ln.strip()]
    instructions = [ln for ln in lines if not ln.startswith("#")]
    assert re.fullmatch(r"FROM python:3\.11\.\d+-slim-\w+", instructions[0]), instructions[0]
    assert "RUN pip install --no-deps -r requirements.lock" in instructions
    assert any(re.match(r"RUN pip install --no-deps \.(\s|$)", ln) for ln in instructions)
    assert not any(re.match(r"RUN pip install (?!--no-deps)", ln) for ln in instructions)
    assert any(ln.startswith("HEALTHCHECK ") for ln in instructions)
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
    # Least privilege: bulletins, groups' traffic, her own inbox; never anyone's registration (s/<sid>/up).
    assert sorted(rules["subject"]) == sorted([
        ("read", "coutil/v2/announce"), ("read", "coutil/v2/+/c/roster"), ("read", "coutil/v2/+/c/release"),
        ("read", "coutil/v2/+/c/group/+"), ("read", "coutil/v2/+/s/+/group")])
    assert sorted(rules[None]) == sorted([("read", "coutil/v2/+/c/to/%c"), ("read", "coutil/v2/+/s/+/to/%c"),
                                          ("write", SUBJECT_WRITE_PATTERN)])
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


def _make_tls(tmp_path: Path) -> dict[str, Path]:
    """What docker/make-certs.sh makes (a CA and a broker certificate for 127.0.0.1), with `cryptography`."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("coutil test CA")).issuer_name(name("coutil test CA"))
          .public_key(ca_key.public_key()).serial_number(1).not_valid_before(now)
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (x509.CertificateBuilder().subject_name(name("mosquitto")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(2).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("mosquitto"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = {"cafile": tmp_path / "ca.crt", "certfile": tmp_path / "broker.crt", "keyfile": tmp_path / "broker.key"}
    files["cafile"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files["certfile"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files["keyfile"].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
    return files


def _rewritten_config(tmp_path: Path, port: int) -> str:
    """The docker mosquitto.conf with its TLS listener on a free loopback port and files in tmp_path."""
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
        **{key: f"{key} {path}" for key, path in _make_tls(tmp_path).items()},
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

    def client(identifier: str, user: str | None, tls: bool = True) -> aiomqtt.Client:
        return aiomqtt.Client(
            "127.0.0.1",
            port,
            identifier=identifier,
            username=user,
            password=examples.get(user or ""),
            protocol=aiomqtt.ProtocolVersion.V311,
            tls_params=aiomqtt.TLSParameters(ca_certs=str(tmp_path / "ca.crt")) if tls else None,
        )

    async def main() -> tuple[list[str], list[str], list[str], bool, bool]:
        refused = plain_refused = False
        try:
            async with client("anonymous", None):
                pass
        except aiomqtt.MqttError:
            refused = True
        try:
            async with client("cccc", "subject", tls=False):
                pass
        except aiomqtt.MqttError:
            plain_refused = True
        collector_saw: list[str] = []
        alice_saw: list[str] = []
        bob_saw: list[str] = []
        async with client("collector-1", "collector") as collector, client("aaaa", "subject") as alice, \
                client("bbbb", "subject") as bob:
            await collector.subscribe("coutil/v2/#", qos=1)
            for topic_filter in ("coutil/v2/+/s/+/up", "coutil/v2/+/c/to/+", "coutil/v2/+/s/+/group",
                                 "coutil/v2/+/s/+/to/+"):
                await alice.subscribe(topic_filter, qos=1)
            # Bob asks for Alice's registration topic by name: the broker hands him nothing from it.
            await bob.subscribe("coutil/v2/r1/s/aaaa/up", qos=1)
            await bob.subscribe("coutil/v2/r1/s/aaaa/group", qos=1)
            await alice.publish("coutil/v2/r1/s/bbbb/up", b"forged: another sid", qos=1)
            await alice.publish("coutil/v2/announce", b"forged: collector topic", qos=1)
            await alice.publish("coutil/v2/r1/c/to/bbbb", b"forged: collector inbox", qos=1)
            await alice.publish("coutil/v2/r1/s/aaaa/up", b"own up", qos=1)
            await alice.publish("coutil/v2/r1/s/aaaa/group", b"own group", qos=1)
            # A member's message addressed to another member (protocol v2): only its addressee reads it.
            await bob.publish("coutil/v2/r1/s/bbbb/to/cccc", b"bob to carol", qos=1)
            await bob.publish("coutil/v2/r1/s/bbbb/to/aaaa", b"bob to alice", qos=1)
            await collector.publish("coutil/v2/r1/c/to/bbbb", b"to bob", qos=1)
            await collector.publish("coutil/v2/r1/c/to/aaaa", b"to alice", qos=1)
            async with asyncio.timeout(10):
                # Each ends once it saw everything it should (across publishers, order is not guaranteed).
                for who, seen, wanted in ((collector, collector_saw, {"to alice", "bob to alice"}),
                                          (alice, alice_saw, {"to alice", "bob to alice"}),
                                          (bob, bob_saw, {"own group"})):
                    async for message in who.messages:
                        seen.append(bytes(message.payload).decode())  # type: ignore[arg-type]
                        if wanted <= set(seen):
                            break
        return collector_saw, alice_saw, bob_saw, refused, plain_refused

    try:
        collector_saw, alice_saw, bob_saw, refused, plain_refused = asyncio.run(main())
    finally:
        broker.stop()
    assert refused, "anonymous client was let in"
    assert plain_refused, "a client without TLS was let in"
    # Messages of one publisher arrive in order, so once its last one arrived, its earlier ones (and the
    # forged ones, dropped) are not in flight any more.
    assert set(collector_saw) == {"own up", "own group", "bob to carol", "bob to alice", "to bob", "to alice"}
    # A subject reads her own inbox, the groups' traffic and what is addressed to her; never a
    # registration (not even her own), another's inbox or a message addressed to someone else.
    assert sorted(alice_saw) == ["bob to alice", "own group", "to alice"]
    assert bob_saw == ["own group"]


@pytest.mark.broker
def test_a_subject_under_anothers_client_id_reads_her_inbox_the_measured_limit(tmp_path: Path) -> None:
    """SPEC §3, another subject (found by an attacker): `%c` is the client id the client chooses and every
    subject shares one account, so Mallory, connecting with Alice's sid as client id, reads Alice's inbox (and
    takes her connection). Liveness and metadata only; binding a client id to a key is not done."""
    port = free_port()
    broker = Mosquitto(tmp_path, port=port, config_text=_rewritten_config(tmp_path, port))
    broker.start()
    examples = dict(ln.split(":", 1) for ln in (DOCKER / "mosquitto" / "passwords.example").read_text().split())

    def client(identifier: str, user: str) -> aiomqtt.Client:
        return aiomqtt.Client("127.0.0.1", port, identifier=identifier, username=user, password=examples[user],
                              protocol=aiomqtt.ProtocolVersion.V311,
                              tls_params=aiomqtt.TLSParameters(ca_certs=str(tmp_path / "ca.crt")))

    async def main() -> list[str]:
        seen: list[str] = []
        async with client("collector-1", "collector") as collector, client("aaaa", "subject") as mallory:
            await mallory.subscribe("coutil/v2/+/c/to/aaaa", qos=1)  # Alice's inbox, under Alice's client id
            await collector.publish("coutil/v2/r1/c/to/aaaa", b"to alice", qos=1)
            async with asyncio.timeout(10):
                async for message in mallory.messages:
                    seen.append(bytes(message.payload).decode())  # type: ignore[arg-type]
                    break
        return seen

    try:
        assert asyncio.run(main()) == ["to alice"]
    finally:
        broker.stop()
