"""`ProcessPool` and `ThreadPool`: a collector's spare-core `WorkPool` gives exactly what `SERIAL_POOL` gives."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from coutil.net.memory import MemoryBus
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SERIAL_POOL, WorkPool
from coutil.round.nodes import build_round_nodes
from coutil.round.parallel import ProcessPool, ThreadPool
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


def _release(pool: WorkPool) -> tuple[np.ndarray, tuple[int, ...]]:
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=3)
    data = synthetic_dataset(30, config, 4)
    built = build_round_nodes(data, config, seed=4, pool=pool)
    bus = MemoryBus(seed=4)
    bus.add_node("collector", built.collector)
    for node_id, subject in zip(built.node_ids, built.subjects, strict=True):
        bus.add_node(node_id, subject)
    assert bus.run_until(until=600.0, predicate=lambda: built.collector.finished) == "predicate"
    outcome = built.collector.outcome()
    return outcome.rows, outcome.group_sizes


def test_a_collector_opening_records_on_threads_releases_what_a_serial_one_does() -> None:
    serial_rows, serial_sizes = _release(SERIAL_POOL)
    with ThreadPool(2) as pool:
        rows, sizes = _release(pool)
    assert sizes == serial_sizes and sum(sizes) == 30
    np.testing.assert_array_equal(rows, serial_rows)


def test_a_collector_opening_records_in_processes_releases_what_a_serial_one_does() -> None:
    serial_rows, serial_sizes = _release(SERIAL_POOL)
    with ProcessPool(2) as pool:
        rows, sizes = _release(pool)
    assert sizes == serial_sizes
    np.testing.assert_array_equal(rows, serial_rows)


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
        assert pool.submit(_interrupted_self, [1]).result(timeout=30) != 0
        assert pool.submit(_pid, [2]).result(timeout=30)[0] > 0
