"""`subject join --evidence FILE` across her rounds: what FILE already holds is kept, and a file that cannot take
her evidence is refused before she waits for a round.

Found by an attacker of a subject's host across restarts: her proof that the collector equivocated (two roster
roots it signed for her round, SPEC §4 group) exists only in her evidence file. Run again with the same
--evidence (her host restarted, or the collector aborted its round after a crash and she joined its next one),
`subject join` replaced the file when that round ended: the proof, its only copy, was gone, and `coutil verify
--evidence FILE` then passed the collector it had convicted. --evidence naming her --data overwrote her record with
JSON, and a directory failed only after the round (her verdict unprinted, her evidence lost).
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from coutil.cli import main
from coutil.collector.service import identity_from_secret
from coutil.protocol import codec, crypto, topics
from coutil.protocol.equivocation import EquivocationEvidence
from coutil.protocol.messages import Announce, Roster
from coutil.protocol.node import SeededRandom
from coutil.protocol.subject import SubjectNode
from tests.collector.test_no_false_success import _finish, _FirstGroupMessage, _spawn
from tests.net.helpers import Mosquitto
from tests.round_params import round_params

HEADER = "age,height_cm,weight_kg,hours_worked,income,savings,medical_spend\n"


def _earlier_proof(identity: crypto.SigningKey) -> EquivocationEvidence:
    """Her proof from an earlier round of this collector: two roster roots it signed for that round."""
    params = round_params()
    round_id = b"r" * 16
    node = SubjectNode(collector_key=identity.public, qi=(1.0, 2.0), confidential=(3.0,), rng=SeededRandom(4))
    node.receive(topics.ANNOUNCE, codec.encode(Announce(round_id, identity.public, params), identity), 1.0)
    for at, root in ((2.0, b"y" * 32), (3.0, b"z" * 32)):
        roster = codec.encode(Roster(round_id, identity.public, 10, root, 4), identity)
        node.receive(topics.roster(round_id), roster, at)
    proof = node.equivocation_evidence()
    assert proof is not None
    return EquivocationEvidence(*proof)


@pytest.mark.broker
@pytest.mark.slow
def test_her_proof_of_an_earlier_round_survives_her_next_join(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        db = tmp_path / "c.sqlite"
        serve = _spawn("collector", "serve", "--broker", broker.url, "--db", str(db), "--k", "2",
                       "--register-window", "4", "--expected", "2", "--json")
        secret = db.with_name("c.sqlite.secret")
        deadline = time.monotonic() + 20
        while not (secret.exists() and secret.stat().st_size == 32) and time.monotonic() < deadline:
            time.sleep(0.1)
        identity = identity_from_secret(secret.read_bytes())
        her = tmp_path / "her-evidence.json"
        her.write_text(json.dumps([_earlier_proof(identity).as_dict()]))
        other = tmp_path / "other-evidence.json"
        me = tmp_path / "us.csv"
        me.write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n39,168,66,40,38000,9000,400\n")
        joins = [_spawn("subject", "join", "--broker", broker.url, "--data", str(me), "--row", str(row),
                        "--timeout", "60", "--json", "--evidence", str(path))
                 for row, path in ((1, her), (2, other))]
        for proc in (*joins, serve):
            _, err = _finish(proc, 90)
            assert proc.returncode == 0, err[-2000:]
    finally:
        broker.stop()
    kept = json.loads(her.read_text())
    # The earlier proof, then this round's verdict pair and receipt (before: only the latter two).
    assert [sorted(entry) for entry in kept] == [["equivocation"], ["verdict", "verdict_ack"], ["receipt"]]
    assert [sorted(entry) for entry in json.loads(other.read_text())] == [["verdict", "verdict_ack"], ["receipt"]]
    capsys.readouterr()
    key = identity.public.hex()
    assert main(["verify", "--evidence", str(her), "--collector-key", key, "--json"]) == 3  # before: 0
    checks = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["equivocation"]["status"] == "fail" and (b"r" * 16).hex() in checks["equivocation"]["problems"][0]
    assert main(["verify", "--evidence", str(other), "--collector-key", key, "--json"]) == 0


@pytest.mark.parametrize(("evidence", "expected"), [
    ("me.csv", "is the input --data"),
    ("folder", "is a directory"),
    ("notes.txt", "not a JSON evidence file"),
])
def test_an_evidence_file_that_cannot_take_her_evidence_is_refused_before_she_waits(
        tmp_path: Path, evidence: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No broker listens: the input error comes first, and her files are as they were."""
    (tmp_path / "me.csv").write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n")
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("my notes\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    assert main(["subject", "join", "--broker", "mqtt://127.0.0.1:1", "--data", str(tmp_path / "me.csv"),
                 "--timeout", "5", "--evidence", str(tmp_path / evidence)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_an_empty_evidence_file_is_taken_as_holding_nothing(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A file made empty beforehand (``touch``, ``mktemp``) is no error: the broker is reached for, as without one."""
    (tmp_path / "me.csv").write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n")
    (tmp_path / "empty.json").write_text("")
    assert main(["subject", "join", "--broker", "mqtt://127.0.0.1:1", "--data", str(tmp_path / "me.csv"),
                 "--timeout", "1", "--evidence", str(tmp_path / "empty.json")]) == 6
    assert "broker" in capsys.readouterr().err


@pytest.mark.broker
@pytest.mark.slow
def test_her_evidence_is_on_disk_before_her_host_dies(tmp_path: Path) -> None:
    """Written only when `subject join` ended, her evidence (her receipt here; a proof of equivocation the same way)
    was lost with a host that died mid-round (kill -9, a power loss): no file at all. Now written as it changes."""
    broker = Mosquitto(tmp_path)
    broker.start()
    sharing = _FirstGroupMessage(broker.port)
    procs: list[subprocess.Popen[str]] = []
    try:
        serve = _spawn("collector", "serve", "--broker", broker.url, "--db", str(tmp_path / "c.sqlite"), "--k", "3",
                       "--register-window", "60", "--expected", "3")
        procs.append(serve)
        time.sleep(1.5)
        me = tmp_path / "me.csv"
        me.write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n")
        her = tmp_path / "her-evidence.json"
        join = _spawn("subject", "join", "--broker", broker.url, "--data", str(me), "--timeout", "60",
                      "--evidence", str(her))
        swarm = _spawn("subject", "swarm", "--broker", broker.url, "--count", "2", "--timeout", "60")
        procs += [join, swarm]
        # Mid-round: the others die at the first member message (her run cannot finish: she waits for their keys
        # until the step deadline, 20 s), and her host a second later.
        sharing.action = lambda: swarm.send_signal(signal.SIGKILL)
        assert sharing.seen.wait(60)
        time.sleep(1.0)
        assert join.poll() is None
        join.send_signal(signal.SIGKILL)
        join.wait(10)
        assert join.returncode == -signal.SIGKILL
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        sharing.close()
        broker.stop()
    assert [sorted(entry) for entry in json.loads(her.read_text())] == [["receipt"]]  # before: no file


def test_an_evidence_file_in_a_directory_she_may_not_search_is_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`Path.is_dir` raises for EACCES: the check before she waits must say so in one line, not crash."""
    from tests.collector.test_operator_mishaps import _unsearchable

    (tmp_path / "me.csv").write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n")
    (tmp_path / "locked").mkdir()
    _unsearchable(monkeypatch, tmp_path / "locked")
    assert main(["subject", "join", "--broker", "mqtt://127.0.0.1:1", "--data", str(tmp_path / "me.csv"),
                 "--timeout", "5", "--evidence", str(tmp_path / "locked" / "e.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Permission denied" in err and "--evidence" in err, err
