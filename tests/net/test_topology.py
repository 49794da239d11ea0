"""The docker/compose.yaml topology, run as local processes (no docker engine runs on our machines).

mosquitto with the very mosquitto.conf, ACL and (hashed) example passwords the compose file mounts;
`coutil collector serve` with the collector account; two `coutil subject swarm` processes and one
`coutil subject join` person with the shared subject account, each subject confined by the ACL to
her own topics (her MQTT client id is her sid). The round must complete with every verdict an
accept, and `coutil collector export` must give the release.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.net.helpers import Mosquitto, free_port
from tests.net.test_docker_static import DOCKER, _rewritten_config

SWARMS = (4, 4)


def _spawn(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "coutil", *args], stdout=subprocess.PIPE,
                            stderr=log.open("wb"))


@pytest.mark.broker
@pytest.mark.slow
def test_compose_topology_as_processes_completes_a_round(tmp_path: Path) -> None:
    port = free_port()
    broker = Mosquitto(tmp_path, port=port, config_text=_rewritten_config(tmp_path, port))
    broker.start()
    examples = dict(ln.split(":", 1) for ln in (DOCKER / "mosquitto" / "passwords.example").read_text().split())
    # The docker broker speaks TLS only (its CA was made by _rewritten_config, as docker/make-certs.sh would).
    collector_url = f"mqtts://collector:{examples['collector']}@127.0.0.1:{port}"
    subject_url = f"mqtts://subject:{examples['subject']}@127.0.0.1:{port}"
    ca = ["--ca-file", str(tmp_path / "ca.crt")]
    db = tmp_path / "collector.sqlite"
    me = tmp_path / "me.csv"
    me.write_text("age,height_cm,weight_kg,hours_worked,income,savings,medical_spend\n"
                  "41,172.5,70.2,38,41250.5,12000,830.25\n")
    total = sum(SWARMS) + 1
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        procs["collector"] = _spawn(["collector", "serve", "--broker", collector_url, *ca, "--db", str(db), "--k",
                                     "3", "--register-window", "60", "--expected", str(total)],
                                    tmp_path / "collector.log")
        for i, count in enumerate(SWARMS):
            procs[f"swarm{i}"] = _spawn(["subject", "swarm", "--broker", subject_url, *ca, "--count", str(count),
                                         "--timeout", "150", "--json"], tmp_path / f"swarm{i}.log")
        procs["join"] = _spawn(["subject", "join", "--broker", subject_url, *ca, "--data", str(me), "--row", "1",
                                "--timeout", "150", "--json", "--evidence", str(tmp_path / "her-evidence.json")],
                               tmp_path / "join.log")
        outputs: dict[str, bytes] = {}
        for name, proc in procs.items():
            try:
                outputs[name], _ = proc.communicate(timeout=200)
            except subprocess.TimeoutExpired:
                proc.kill()
                tail = (tmp_path / f"{name}.log").read_text()[-3000:]
                raise AssertionError(f"{name} did not finish: {tail}") from None
            assert proc.returncode == 0, (name, (tmp_path / f"{name}.log").read_text()[-3000:])
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        broker.stop()

    log = [json.loads(ln) for ln in (tmp_path / "collector.log").read_text().splitlines() if ln.startswith("{")]
    end = next(entry for entry in log if entry["event"] == "round_end")
    assert end["completed"] is True and end["registered"] == total and end["released_rows"] == total
    assert end["accepted"] == end["verdicts"] == total
    for i, count in enumerate(SWARMS):
        summary = json.loads(outputs[f"swarm{i}"])
        assert summary["finished"] == summary["accepted"] == count
    joined = json.loads(outputs["join"])
    verdict = joined["verdict"]
    assert verdict["accept"] is True and verdict["included"] is True and verdict["k_anonymous"] is True
    assert set(verdict["variances"]) == {"age", "height_cm", "weight_kg", "hours_worked", "income", "savings",
                                         "medical_spend"}
    assert joined["collector_key"] == next(entry for entry in log if entry["event"] == "round")["collector_key"]
    # Her evidence: her verdict and its signed acknowledgement; no proof of equivocation from an honest collector.
    assert joined["equivocation_proof"] is False
    kept = json.loads((tmp_path / "her-evidence.json").read_text())
    assert [sorted(entry) for entry in kept] == [["verdict", "verdict_ack"], ["receipt"]]

    exported = tmp_path / "release.csv"
    result = subprocess.run([sys.executable, "-m", "coutil", "collector", "export", "--db", str(db), "-o",
                             str(exported)], check=False, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    rows = exported.read_text().splitlines()
    assert len(rows) == 1 + total
    # The person's own confidential values are in the release (as a row's confidential part).
    assert any(row.endswith(",41250.5,12000,830.25") for row in rows[1:])
