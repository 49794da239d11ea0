"""The keyed timer heap and the re-sender built on it, against naive models."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.protocol.node import Outgoing
from coutil.protocol.retry import NewsClock, Resender
from coutil.protocol.schedule import TimerHeap, fair_order

operations = st.lists(
    st.tuples(st.sampled_from(["set", "discard", "pop"]), st.integers(0, 6), st.integers(0, 40)), max_size=200
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_timer_heap_matches_a_plain_dict(ops: list[tuple[str, int, int]]) -> None:
    heap: TimerHeap[int] = TimerHeap()
    model: dict[int, float] = {}
    for op, key, time in ops:
        if op == "set":
            heap.set(key, float(time))
            model[key] = float(time)
        elif op == "discard":
            heap.discard(key)
            model.pop(key, None)
        else:
            due = heap.pop_due(float(time))
            expected = sorted((when, k) for k, when in model.items() if when <= time)
            assert sorted(due) == sorted(k for _, k in expected)
            assert [model[k] for k in due] == sorted(model[k] for k in due)  # earliest first
            for k in due:
                del model[k]
        assert heap.next_time() == (min(model.values()) if model else None)
        assert len(heap) == len(model) and set(heap) == set(model)


def test_stale_entries_do_not_accumulate() -> None:
    heap: TimerHeap[str] = TimerHeap()
    for i in range(10_000):
        heap.set("only", float(i))
    assert len(heap._heap) <= 2 * len(heap) + 65
    assert heap.next_time() == 9999.0 and heap.pop_due(10_000.0) == ["only"] and heap.next_time() is None


def test_resender_backs_off_caps_and_cancels() -> None:
    resender = Resender(1.0, max_interval=3.0)
    message = Outgoing("t", b"x")
    resender.arm("a", message, 0.0)
    resender.arm("b", (message, message), 0.5)
    sent: list[tuple[float, int]] = []
    now = 0.0
    while now < 12.0:
        now = resender.next_due() or 99.0
        sent.append((now, len(resender.due(now))))
        if now >= 6.0:
            resender.cancel("b")
    times_a = [t for t, _ in sent if t == int(t)]
    # a: 1, then +2, +3 (capped), +3 ...
    assert times_a[:4] == [1.0, 3.0, 6.0, 9.0]
    assert not resender.pending("b") and resender.pending("a")
    resender.cancel_where(lambda key: key == "a")
    assert resender.next_due() is None and resender.due(100.0) == []


def test_retransmission_timeout_follows_acknowledgement_times() -> None:
    """RFC 6298: slow acknowledgements lengthen the wait before a first re-send, within [base, cap];
    stopping for another reason (acknowledged=False, cancel_where, clear) teaches nothing."""
    resender = Resender(2.0, max_interval=10.0)
    message = Outgoing("t", b"x")
    assert resender.timeout == 2.0  # no sample yet: the base interval
    resender.arm("slow", message, 0.0)
    resender.now = 3.0
    resender.cancel("slow")  # acknowledged after 3 s: SRTT 3, RTTVAR 1.5 -> RTO 3 + 6 = 9
    assert resender.timeout == 9.0
    resender.arm("next", message, 3.0)
    assert resender.next_due() == 12.0  # its first re-send waits the RTO
    resender.now = 40.0
    resender.cancel("next", acknowledged=False)  # an exclusion, not an answer: no sample
    assert resender.timeout == 9.0
    resender.arm("x", message, 40.0)
    resender.cancel_where(lambda key: key == "x")
    assert resender.timeout == 9.0
    for i in range(40):  # fast answers pull it back to the base
        start = 50.0 + i
        resender.arm("fast", message, start)
        resender.now = start + 0.05
        resender.cancel("fast")
    assert 2.0 <= resender.timeout < 3.0
    capped = Resender(2.0, max_interval=5.0)
    capped.arm("huge", message, 0.0)
    capped.now = 100.0
    capped.cancel("huge")
    assert capped.timeout == 5.0  # never beyond the cap (a quarter of the step timeout in the nodes)


def test_news_holds_re_sends_back_within_the_cap() -> None:
    """RFC 6298 rule 5.3: a fresh message restarts the wait; never beyond the cap since the last send."""
    resender = Resender(2.0, max_interval=10.0)
    message = Outgoing("t", b"x")
    resender.arm("a", message, 0.0)
    resender.news(1.5)
    assert resender.due(2.0) == []  # news at 1.5: wait until 3.5
    assert resender.next_due() == 3.5
    for t in (3.0, 5.0, 7.0, 9.0):  # news keeps coming: held, but only up to the cap (10 s)
        resender.news(t)
        assert resender.due(resender.next_due() or 0.0) == []
    assert resender.next_due() == 10.0 and resender.due(10.0) == [message]
    quiet = Resender(2.0, max_interval=10.0)
    quiet.arm("b", message, 0.0)
    assert quiet.due(2.0) == [message]  # no news: the RTO as before
    shared = NewsClock()
    one, two = Resender(2.0, 10.0, news=shared), Resender(2.0, 10.0, news=shared)
    one.arm("c", message, 0.0)
    two.news(1.9)  # another node of the same process heard something
    assert one.due(2.0) == [] and one.next_due() == 3.9
    one.expedite(4.0)  # an outage ended: news from before it holds nothing back
    assert one.due(4.0) == [message]


def test_postpone_and_relax() -> None:
    resender = Resender(2.0, max_interval=10.0)
    message = Outgoing("t", b"x")
    resender.arm("burst", message, 0.0)
    resender.postpone(5.0)
    assert resender.next_due() == 7.0
    resender.postpone(50.0)
    assert resender.next_due() == 10.0  # never beyond the cap since its last send
    resender.cancel("burst", acknowledged=False)
    resender.arm("vote", message, 20.0)
    resender.relax("vote")
    assert resender.due(22.0) == [] and resender.due(30.0) == [message]
    assert resender.resent == {"vote": 1}


def test_fair_order_rotates_a_burst() -> None:
    assert fair_order([], 3) == [] and fair_order(["a"], 5) == ["a"]
    assert fair_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert fair_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert fair_order(["a", "b", "c"], 5) == ["c", "a", "b"]


def test_a_burst_of_re_sends_does_not_keep_the_same_tail() -> None:
    """A broker that keeps only the first messages of a burst (mosquitto's max_queued_messages) must not
    drop the same message every time: the tail of one burst comes earlier in the next."""
    resender = Resender(1.0, 1.0)
    sent = [Outgoing(f"t/{name}", name.encode()) for name in "abcde"]
    for message in sent:
        resender.arm(message.topic, message, 0.0)
    kept: set[bytes] = set()
    now = 0.0
    for _ in range(5):
        now = resender.next_due() or now
        burst = resender.due(now)
        assert sorted(m.payload for m in burst) == sorted(m.payload for m in sent)
        kept.update(m.payload for m in burst[:3])  # the broker's queue holds three
    assert kept == {m.payload for m in sent}
