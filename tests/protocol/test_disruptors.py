"""Disruptors inside a group: the run fails, blame names the culprit, the group re-runs without her.

Each test puts one misbehaving subject (a subclass of the honest `SubjectNode` that deviates at
one point of run 0) into an otherwise honest round on the in-memory bus, then checks that

- the round completes, the culprit is excluded with the reason the spec gives for her deviation,
  and no honest subject is excluded;
- the release holds exactly the honest subjects' confidential records (the culprit's never);
- every honest subject's verdict is an accept;
- for deviations detected by the go/no-go vote, the collector ran the blame procedure, and no
  failed run's records were ever opened (no reveal message in a failed run).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol import codec, crypto
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import Batch, Message, Submit, Vote
from coutil.protocol.node import Outgoing, SeededRandom
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.protocol.subject_core import SubjectRun
from coutil.round.simulation import synthetic_dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)


class TamperingMixer(SubjectNode):
    """Corrupts one item of the batch she publishes in run 0 (same length, so sizes link nothing)."""

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        out = super()._mix(run, step, inputs, now)
        if run.number != 0:
            return out
        items = list(run.batches[step])
        items[0] = items[0][:-1] + bytes([items[0][-1] ^ 1])
        run.batches[step] = tuple(items)
        assert self._round_id is not None and self._group is not None
        batch = Batch(self._round_id, self.public_key, self._group, run.number, step, tuple(items))
        tampered = self._publish_group(batch)
        run.my_batch = tampered
        self._resend.arm(("batch", run.number), tampered, now)
        return [tampered]


class MalformedSubmitter(SubjectNode):
    """Submits an onion of the right length that no mixer can peel, in run 0."""

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Submit) and message.run == 0:
            message = dataclasses.replace(message, onion=bytes(len(message.onion)))
            assert self._run is not None
            self._run.submissions[self.public_key] = message.onion  # she mixes what she published
        return super()._emit(topic, message)


class FalseComplainer(SubjectNode):
    """Votes no-go in run 0 although her ciphertext is in the final batch."""

    def _emit(self, topic: str, message: Message) -> Outgoing:
        if isinstance(message, Vote) and message.run == 0 and message.go:
            message = dataclasses.replace(message, go=False)
            assert self._run is not None
            self._run.votes[self.public_key] = message  # she acts on the vote she published (and blames)
        return super()._emit(topic, message)


class Withholder(SubjectNode):
    """Stays connected but never publishes her batch (nor anything else in that run): the run waits
    for her until the step deadline."""

    def _mix(self, run: SubjectRun, step: int, inputs: tuple[bytes, ...], now: float) -> list[Outgoing]:
        run.blamed = True  # the flag that stops every further action of hers in this run
        return []


def _run_round(culprit_class: type[SubjectNode], n: int = 21, seed: int = 3) -> dict[str, Any]:
    data = synthetic_dataset(n, CONFIG, seed)
    qi = data.select(list(CONFIG.qi)).values
    conf = data.select(list(CONFIG.confidential)).values
    root = SeededRandom(seed)
    collector_rng = root.fork("collector")
    collector = CollectorNode(CONFIG, identity=crypto.SigningKey.generate(collector_rng.fork("identity")),
                              rng=collector_rng, round_id=root.fork("round").bytes(16))
    caches = SharedCaches()
    subjects = []
    for i in range(n):
        cls = culprit_class if i == 0 else SubjectNode
        subjects.append(cls(collector_key=collector.public_key, qi=qi[i], confidential=conf[i],
                            rng=root.fork(f"subject-{i}"), caches=caches, retry_interval=1.0))
    bus = MemoryBus(seed=seed, record_publications=True)
    bus.add_node("collector", collector)
    for subject in subjects:
        bus.add_node(subject.sid, subject)
    bus.run_until(until=2000.0, predicate=lambda: collector.finished)
    return {"collector": collector, "subjects": subjects, "bus": bus, "conf": conf}


def _events(bus: MemoryBus, kind: str) -> list[dict[str, object]]:
    return [event.as_dict() for node, event in bus.events or () if node == "collector" and event.kind == kind]


@pytest.mark.parametrize(("culprit_class", "reason", "via_blame"), [
    (TamperingMixer, "blamed_tamper", True),
    (MalformedSubmitter, "blamed_malformed", True),
    (FalseComplainer, "blamed_false_complaint", True),
    (Withholder, "silent", False),
])
@pytest.mark.parametrize("seed", [3, 8])
def test_disruptor_is_blamed_excluded_and_the_group_completes_without_her(
    culprit_class: type[SubjectNode], reason: str, via_blame: bool, seed: int
) -> None:
    result = _run_round(culprit_class, seed=seed)
    collector: CollectorNode = result["collector"]
    subjects: list[SubjectNode] = result["subjects"]
    bus: MemoryBus = result["bus"]
    outcome = collector.outcome()
    assert outcome.completed, outcome.phase
    culprit = subjects[0]
    excluded = {str(e["sid"]): str(e["reason"]) for e in outcome.excluded}
    assert excluded == {culprit.sid: reason}

    # The release holds every honest subject's record and never the culprit's.
    conf = result["conf"]
    released = Counter(tuple(row) for row in outcome.rows[:, len(CONFIG.qi):].tolist())
    honest = Counter(tuple(conf[i].tolist()) for i in range(1, len(subjects)))
    assert released == honest
    verdicts = {str(v["sid"]): v for v in outcome.verdicts}
    for subject in subjects[1:]:
        assert verdicts[subject.sid]["accept"] is True, verdicts[subject.sid]

    blames = _events(bus, "blame")
    if via_blame:
        assert blames and all(int(str(b["culprits"])) == 1 for b in blames)
        # No reveal was ever published in a run that failed: nothing of run 0 could be opened.
        group = next(int(str(e["group"])) for e in _events(bus, "excluded"))
        reveals = [codec.decode(p.payload).message for p in bus.publications or ()
                   if p.sender != "collector" and p.payload]  # an empty payload: a member's cleared run_keys
        assert not [m for m in reveals if m.TAG == "reveal" and m.group == group and m.run == 0]
    else:
        assert not blames


def test_blame_is_not_triggered_in_an_honest_round() -> None:
    result = _run_round(SubjectNode, n=12, seed=4)
    outcome = result["collector"].outcome()
    assert outcome.completed and not outcome.excluded
    assert not _events(result["bus"], "blame")
    assert all(v["accept"] for v in outcome.verdicts) and len(outcome.verdicts) == 12
