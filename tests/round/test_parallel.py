"""`ProcessPool` and `ThreadPool`: a collector's spare-core `WorkPool` gives exactly what `SERIAL_POOL` gives."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol import topics
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SERIAL_POOL, WorkPool
from coutil.round.nodes import build_round_nodes
from coutil.round.parallel import ProcessPool, ThreadPool, signature_prechecker
from coutil.round.simulation import synthetic_dataset


def test_a_thread_pool_keeps_the_order_and_runs_off_the_callers_thread() -> None:
    seen: set[str] = set()

    def square(x: int) -> int:
        seen.add(threading.current_thread().name)
        return x * x

    items = list(range(101))
    with ThreadPool(2) as pool:
        pending = [pool.submit(square, items[i:i + 7]) for i in range(0, len(items), 7)]
        threaded = [r for p in pending for r in p.result()]
        assert seen and "MainThread" not in seen, seen
        assert threaded == SERIAL_POOL.submit(square, items).result()
        assert pool.submit(square, []).result() == []


def test_a_thread_pool_raises_what_an_item_raised_when_the_result_is_taken() -> None:
    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("item 3")
        return x

    with ThreadPool(2) as pool:
        pending = pool.submit(boom, list(range(10)))
        with pytest.raises(ValueError, match="item 3"):
            pending.result()


def _release(pool: WorkPool) -> tuple[np.ndarray, tuple[int, ...], list[tuple[str, bytes]]]:
    """The release, its group sizes, and every message the collector published (topic, exact bytes)."""
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=3)
    data = synthetic_dataset(30, config, 4)
    built = build_round_nodes(data, config, seed=4, pool=pool)
    bus = MemoryBus(seed=4, record_publications=True)
    bus.add_node("collector", built.collector)
    for node_id, subject in zip(built.node_ids, built.subjects, strict=True):
        bus.add_node(node_id, subject)
    assert bus.run_until(until=600.0, predicate=lambda: built.collector.finished) == "predicate"
    outcome = built.collector.outcome()
    assert bus.publications is not None
    published = [(p.topic, p.payload) for p in bus.publications if p.sender == "collector"]
    return outcome.rows, outcome.group_sizes, published


def test_a_collector_opening_records_on_threads_releases_what_a_serial_one_does() -> None:
    serial_rows, serial_sizes, serial_published = _release(SERIAL_POOL)
    with ThreadPool(2) as pool:
        rows, sizes, published = _release(pool)
    assert sizes == serial_sizes and sum(sizes) == 30
    np.testing.assert_array_equal(rows, serial_rows)
    assert published == serial_published


def test_a_collector_signing_and_opening_in_processes_publishes_what_a_serial_one_does() -> None:
    serial_rows, serial_sizes, serial_published = _release(SERIAL_POOL)
    with ProcessPool(2) as pool:
        rows, sizes, published = _release(pool)
    assert sizes == serial_sizes
    np.testing.assert_array_equal(rows, serial_rows)
    # The assigns, signed in the pool's processes (`CollectorCore._sign_many`), are the very bytes a
    # serial collector signs, in the same order among the rest.
    assert sum(topics.INBOX_MARK in topic for topic, _ in published) >= 30  # an assign (and acks) each
    assert published == serial_published


def _pid(_: int) -> int:
    import os
    return os.getpid()


def test_a_process_pool_runs_in_other_processes() -> None:
    import os
    with ProcessPool(1) as pool:
        assert set(pool.submit(_pid, [1, 2, 3]).result()) - {os.getpid()} == set(pool.submit(_pid, [4]).result())


def _interrupted_self(_: int) -> int:
    import os
    import signal
    os.kill(os.getpid(), signal.SIGINT)  # what a terminal's Ctrl-C does to the whole process group
    return os.getpid()


def test_a_process_pool_outlives_ctrl_c_its_parent_ends_it() -> None:
    with ProcessPool(1) as pool:
        assert pool.submit(_interrupted_self, [1]).result(timeout=30)[0] > 0
        assert pool.submit(_pid, [2]).result(timeout=30)[0] > 0


def _helper_pids() -> set[int]:
    import multiprocessing
    return {child.pid for child in multiprocessing.active_children() if child.pid is not None}


def _kill_helpers(pool: ProcessPool) -> None:
    """SIGKILL every helper process of ``pool`` (what the kernel's out-of-memory killer does)."""
    import os
    import signal
    import time
    before = _helper_pids()
    assert before, "the pool's processes are children of this process"
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _helper_pids() & before and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_process_pool_whose_process_died_does_the_work_in_the_callers_process() -> None:
    import os
    from concurrent.futures.process import BrokenProcessPool
    with ProcessPool(2) as pool:
        pending = pool.submit(_pid, [1, 2])
        assert os.getpid() not in pending.result(timeout=30)
        _kill_helpers(pool)
        assert pool.submit(_pid, [3, 4]).result(timeout=30) == [os.getpid(), os.getpid()]
        assert pool.broken
        with pytest.raises(BrokenProcessPool):  # the burst check's shortcut is off; its node verifies
            pool.future(_pid, [5])


def _slow_pid(_: int) -> int:
    import os
    import time
    time.sleep(0.5)
    return os.getpid()


def test_work_whose_helper_died_while_doing_it_is_done_in_the_callers_process() -> None:
    import os
    with ProcessPool(1) as pool:
        pool.submit(_pid, [0]).result(timeout=30)  # the process is up
        pending = pool.submit(_slow_pid, [1, 2])
        _kill_helpers(pool)
        assert pending.result(timeout=30) == [os.getpid(), os.getpid()]
        assert pool.broken


def test_a_collector_whose_helper_processes_die_mid_round_releases_what_a_serial_one_does() -> None:
    """The helpers sign the assigns, then die before the records are opened: the collector opens them
    itself, and publishes the very bytes a serial collector publishes."""
    serial_rows, serial_sizes, serial_published = _release(SERIAL_POOL)
    with ProcessPool(2) as pool:
        killed: list[bool] = []

        class DyingAfterSigning:
            def submit(self, fn: Any, items: Any) -> Any:
                pending = pool.submit(fn, items)
                if not killed:  # the first submission: the assigns' signing
                    pending.result(timeout=30)
                    _kill_helpers(pool)
                    killed.append(True)
                return pending

        rows, sizes, published = _release(DyingAfterSigning())
        assert pool.broken
    assert sizes == serial_sizes
    np.testing.assert_array_equal(rows, serial_rows)
    assert published == serial_published


@pytest.mark.broker
def test_a_round_with_helper_processes_checks_bursts_ahead_and_releases_everyone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`coutil run`'s path from 5,000 subjects (helper processes that verify bursts ahead of the
    collector, sign its assigns and open records), taken here by 60 subjects over a real mosquitto."""
    from coutil.net import burst
    from coutil.round import mqtt as mqtt_driver
    from tests.net.helpers import Mosquitto

    checked: list[int] = []
    real_prechecker = signature_prechecker

    def counting_prechecker(*args: Any) -> burst.BurstCheck:
        check = real_prechecker(*args)

        async def counted(payloads: list[bytes]) -> None:
            await check(payloads)
            checked.append(len(payloads))

        return counted

    monkeypatch.setattr(mqtt_driver, "PROCESS_POOL_FROM", 0)
    monkeypatch.setattr(mqtt_driver, "signature_prechecker", counting_prechecker)
    monkeypatch.setattr(burst, "CHECK_FROM", 1)  # every batch, however small, goes to the helpers
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=3, expected_subjects=60)
    data = synthetic_dataset(60, config, 5)
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        report, stats = mqtt_driver.run_mqtt_round(data, config, seed=5, broker=broker.url, timeout=240)
    finally:
        broker.stop()
    assert report.completed and stats.stopped_by == "condition"
    assert int(report.outcome.rows.shape[0]) == 60
    assert sum(bool(v["accept"]) for v in report.outcome.verdicts) == 60
    assert sum(checked) >= 120  # at least every registration and every verdict went through the helpers
