"""A subject who joins a round after its registration closed is told so at once, not that the collector died.

Found by an attacker of a subject's host across restarts: her host restarted mid-round and she ran `subject join`
again. The retained announce was her round's, past its registration deadline: her node ignores it (`late`, SPEC §4
announce) and nothing of hers is sent, but the command waited ten step timeouts of silence (to her: the collector
says nothing to one who never registered) and then exited 4 saying "the collector stopped answering", a false
diagnosis blaming a live, honest collector, minutes later (ten step timeouts; here 30 s). Now she stops as soon as
every subject it hosts still waits for an announce past the deadline (by her own clock, the one her node judges the
announce by), saying that the round closed its registration before she joined.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from coutil.protocol import codec, crypto, topics
from coutil.protocol.config import TRANSCRIPT_COMMITMENT
from coutil.protocol.messages import Announce, RoundParams
from tests.collector.test_no_false_success import _finish, _spawn
from tests.net.helpers import Mosquitto

HEADER = "age,height_cm,weight_kg,hours_worked,income,savings,medical_spend\n"


def _publish_retained(port: int, topic: str, payload: bytes) -> None:
    client = mqtt.Client(CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", port)
    client.loop_start()
    client.publish(topic, payload, qos=1, retain=True).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


@pytest.mark.broker
@pytest.mark.slow
@pytest.mark.parametrize("command", ["join", "swarm"])
def test_a_subject_joining_after_registration_closed_is_told_at_once(tmp_path: Path, command: str) -> None:
    identity = crypto.SigningKey(bytes(range(32)))
    names = HEADER.strip().split(",")
    params = RoundParams(
        qi_names=tuple(names[:4]), confidential_names=tuple(names[4:]), k=3, method="mdav",
        register_deadline=time.time() - 60.0, step_timeout=3.0, audit_deadline_after_release=20.0,
        collector_kx=crypto.KxKey(bytes(range(1, 33))).public, min_permutation_distance=0, random_records=50,
        alpha=0.05, manifest=(TRANSCRIPT_COMMITMENT,))
    round_id = b"r" * 16
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        _publish_retained(broker.port, topics.ANNOUNCE, codec.encode(Announce(round_id, identity.public, params),
                                                                     identity))
        me = tmp_path / "me.csv"
        me.write_text(HEADER + "41,172.5,70.2,38,41250.5,12000,830.25\n")
        args = ["--data", str(me)] if command == "join" else ["--count", "3"]
        started = time.monotonic()
        proc = _spawn("subject", command, "--broker", broker.url, *args, "--timeout", "120", "--json")
        out, err = _finish(proc, 90)
        took = time.monotonic() - started
    finally:
        broker.stop()
    assert proc.returncode == 4, err[-2000:]
    assert took < 15, took  # before: 30 s of "silence" (10 step timeouts of 3 s), then exit 4
    assert "stopped answering" not in err and "closed its registration" in err, err[-2000:]
    assert json.loads(out)["ended_by"] == "late"
