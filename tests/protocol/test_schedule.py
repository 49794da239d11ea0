"""The keyed timer heap and the re-sender built on it, against naive models."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coutil.protocol.node import Outgoing
from coutil.protocol.retry import Resender
from coutil.protocol.schedule import TimerHeap

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
