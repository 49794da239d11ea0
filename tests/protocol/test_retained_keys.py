"""A member's run_keys are retained on her group topic until every member holds them (SPEC §5).

A fellow member whose subscription to that topic reaches the broker after the keys were published
(another connection, slower to handle its assign: measured over two worker processes, README) gets
them from the broker on subscribing instead of waiting a retransmission timeout for a re-send; once
the keys were used, each member clears her retained message, so the broker keeps nothing of the round.
"""

from __future__ import annotations

from collections import Counter

import pytest

from coutil.protocol import topics
from coutil.protocol.node import Outgoing
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_core import SubjectCore
from tests.protocol.test_v2_defences import SEEDS, Round, group_of, run_round

#: How long the late member holds back her subscriptions to her fellow members' group topics: longer
#: than their run_keys take to reach the broker (link latency 0.05 s), shorter than a re-send (1 s).
HOLD_BACK = 0.5


class LateSubscriber(SubjectNode):
    """Subscribes to her fellow members' group topics only HOLD_BACK after her run started (as a
    subject on a slower connection does), asks to be called then, and notes when she held every
    member's keys."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.run_started_at: float | None = None
        self.all_keys_at: float | None = None

    def subscriptions(self) -> frozenset[str]:
        subs = super().subscriptions()
        if self._run is not None and self.run_started_at is None:
            self.run_started_at = self._now
        if self.run_started_at is None or self._now < self.run_started_at + HOLD_BACK:
            return frozenset(t for t in subs if not topics.is_subject_group(t))
        return subs

    def next_timer(self) -> float | None:
        due = super().next_timer()
        if self.run_started_at is not None and self._now < self.run_started_at + HOLD_BACK:
            release = self.run_started_at + HOLD_BACK
            return release if due is None else min(due, release)
        return due

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        out = super().receive(topic, payload, now)
        run = self._run
        if self.all_keys_at is None and run is not None and len(run.keys) == len(run.members):
            self.all_keys_at = now
        return out

    def waited_for_keys(self) -> float:
        """Seconds from her subscribing to her fellows' topics to holding all their keys."""
        assert self.run_started_at is not None and self.all_keys_at is not None
        return self.all_keys_at - (self.run_started_at + HOLD_BACK)


def _run_late_round(seed: int) -> tuple[Round, list[float]]:
    """Every subject subscribes late; the waits (seconds from subscribing to holding all keys) of
    those whose fellow members had all published their run_keys before she subscribed."""
    r = run_round(LateSubscriber, seed=seed, culprits=21)
    assert r.collector.outcome().completed and r.excluded() == {}
    assert all(v["accept"] is True for v in r.verdicts().values())
    first_keys: dict[str, float] = {}
    for publication in r.bus.publications or ():
        # The first message on a member's group topic is her run_keys.
        if topics.is_subject_group(publication.topic) and publication.payload:
            first_keys.setdefault(publication.topic, publication.at)
    waits = []
    for subject in r.subjects:
        assert isinstance(subject, LateSubscriber) and subject.run_started_at is not None
        subscribed = subject.run_started_at + HOLD_BACK
        fellows = [topics.subject_group(r.collector.round_id, m.public_key) for m in group_of(r, subject)
                   if m is not subject]
        if all(first_keys[t] < subscribed for t in fellows):
            waits.append(subject.waited_for_keys())
    assert len(waits) >= 5  # most of the round: the test below is about them
    return r, waits


@pytest.mark.parametrize("seed", SEEDS)
def test_a_member_who_subscribes_late_gets_the_retained_keys_at_once(seed: int) -> None:
    _, waits = _run_late_round(seed)
    # One link latency each way (0.05 s), nothing like a re-send (1 s).
    assert max(waits) < 0.2, waits


@pytest.mark.parametrize("seed", SEEDS)
def test_without_retained_keys_a_late_member_waits_for_a_resend(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: run_keys published as ordinary messages leave her without them until
    her fellows re-send (the round still completes: re-sending is the fallback)."""
    monkeypatch.setattr(SubjectCore, "RETAIN_KEYS", False)
    _, waits = _run_late_round(seed)
    assert min(waits) > 0.4, waits


@pytest.mark.parametrize("seed", SEEDS)
def test_every_member_clears_her_retained_keys_once_and_the_broker_keeps_none(seed: int) -> None:
    r = run_round(seed=seed)
    assert r.collector.outcome().completed
    group_topics = {topics.subject_group(r.collector.round_id, s.public_key): s.sid for s in r.subjects}
    retained_keys = Counter(p.sender for p in r.bus.publications or ()
                            if p.topic in group_topics and p.retain and p.payload)
    clears = Counter(p.sender for p in r.bus.publications or ()
                     if p.topic in group_topics and p.retain and not p.payload)
    # One run each in an honest round: her run_keys (and its re-sends, if any) retained, one clear.
    assert set(retained_keys) == set(clears) == {s.sid for s in r.subjects}
    assert set(clears.values()) == {1}
    last: dict[str, bytes] = {}
    for publication in r.bus.publications or ():
        if publication.retain:
            last[publication.topic] = publication.payload
    assert all(last[topic] == b"" for topic in group_topics)
    # Cleared run_keys are not messages: nobody recorded a rejection for them.
    assert not [x for s in r.subjects for x in s.rejections
                if topics.is_subject_group(x.topic) and x.reason == "not_msgpack"]
    assert not [x for x in r.collector.rejections if topics.is_subject_group(x.topic) and x.reason == "not_msgpack"]
