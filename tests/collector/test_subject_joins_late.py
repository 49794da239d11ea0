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
from coutil.protocol.messages import Announce, RegisterAck, Roster
from coutil.protocol.node import SeededRandom
from coutil.protocol.states import SubjectState
from coutil.round.subjects import AnnouncedRound, RoundWatch, _WatchedSubject, make_subjects
from tests.collector.test_no_false_success import _finish, _spawn
from tests.net.helpers import Mosquitto
from tests.round_params import round_params

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
    params = round_params(qi=tuple(names[:4]), confidential=tuple(names[4:]), register_deadline=time.time() - 60.0,
                          step_timeout=3.0)
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


def _watched(deadline: float, clock: list[float]) -> tuple[RoundWatch, _WatchedSubject, bytes, crypto.SigningKey]:
    identity = crypto.SigningKey(bytes(range(32)))
    names = HEADER.strip().split(",")
    params = round_params(qi=tuple(names[:4]), confidential=tuple(names[4:]), register_deadline=deadline,
                          step_timeout=20.0)
    round_id = b"r" * 16
    announced = AnnouncedRound(round_id, identity.public, params.qi_names, params.confidential_names, 3, deadline,
                               20.0)
    (node,) = make_subjects(announced, [((41.0, 172.5, 70.2, 38.0), (41250.5, 12000.0, 830.25))],
                            rng=SeededRandom(1))
    watch = RoundWatch(announced, clock=lambda: clock[0])
    watched = _WatchedSubject(node, watch, listen_announce=True)
    watched.start(clock[0])
    watched.receive(topics.ANNOUNCE, codec.encode(Announce(round_id, identity.public, params), identity), clock[0])
    return watch, watched, round_id, identity


@pytest.mark.parametrize("acknowledged", [False, True])
def test_a_roster_without_her_acknowledgement_is_a_registration_closed_before_her(acknowledged: bool) -> None:
    """The collector closes registration before its deadline once ``--expected`` subjects registered: a subject who
    registers after that gets no acknowledgement (`late`, SPEC §4), only the roster. Before, she waited past the
    deadline and ten step timeouts more (260 s with the defaults) and was told the collector stopped answering. Now
    `late` a step timeout after the roster, unless her acknowledgement came (delayed, or lost and sent again)."""
    clock = [1000.0]
    watch, watched, round_id, identity = _watched(deadline=1060.0, clock=clock)
    assert watched.node.state == SubjectState.REGISTERING and not watch.late()
    roster = codec.encode(Roster(round_id, identity.public, 3, b"y" * 32, 1), identity)
    clock[0] = 1005.0
    watched.receive(topics.roster(round_id), roster, clock[0])
    assert not watch.late()
    if acknowledged:  # her acknowledgement after the roster: she is on it, and waits for her assign
        digest = watched.node._register_digest
        assert digest is not None
        ack = codec.encode(RegisterAck(round_id, identity.public, watched.node.public_key, digest), identity)
        clock[0] = 1010.0
        watched.receive(topics.inbox(round_id, watched.node.public_key), ack, clock[0])
        assert watched.node.state == SubjectState.REGISTERED
    clock[0] = 1026.0
    assert watch.late() is not acknowledged
    if not acknowledged:
        watch.ended_by = "late"
        assert "closed its registration before you joined" in watch.describe()
