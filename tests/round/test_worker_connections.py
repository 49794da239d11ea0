"""A subject worker hosts its subjects over several multiplexed connections, one per
`DriverOptions.subjects_per_connection` (mosquitto's cost of a connection's subscriptions grows with
the square of their number: README, "10^5 subjects over mosquitto")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from coutil.net.mqtt import DriverOptions
from coutil.protocol.config import RoundConfig
from coutil.round.simulation import synthetic_dataset
from coutil.round.workers import connection_slices
from coutil.sdc.mdav import mdav


def test_connection_slices_cover_the_subjects_in_slices_of_neighbours() -> None:
    rng = np.random.default_rng(7)
    assert connection_slices(rng.normal(size=(10, 2)), 10) == [list(range(10))]  # one connection: as before
    assert connection_slices(np.zeros((0, 2)), 5) == [[]]
    for n, per in ((11, 10), (1000, 300), (50, 7)):
        slices = connection_slices(rng.normal(size=(n, 2)), per)
        sizes = [len(s) for s in slices]
        assert len(slices) == -(-n // per) and max(sizes) <= per and max(sizes) - min(sizes) <= 1
        assert sorted(j for s in slices for j in s) == list(range(n))
    # Neighbours share a connection: few MDAV groups straddle two of them.
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=5)
    qi = synthetic_dataset(2000, config, 1).select(list(config.qi)).values
    owner = np.empty(len(qi), dtype=int)
    for connection, positions in enumerate(connection_slices(qi, 500)):
        owner[positions] = connection
    groups = mdav(qi, 5).groups
    straddling = np.mean([len(set(owner[groups == g])) > 1 for g in range(int(groups.max()) + 1)])
    assert straddling < 0.15, straddling


@pytest.mark.broker
def test_a_round_with_workers_on_several_connections_each_releases_everyone(tmp_path: Path) -> None:
    from coutil.round.mqtt import run_mqtt_round
    from tests.net.helpers import Mosquitto

    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=3, expected_subjects=50)
    data = synthetic_dataset(50, config, 6)
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        report, stats = run_mqtt_round(data, config, seed=6, broker=broker.url, timeout=240, workers=2,
                                       options=DriverOptions(subjects_per_connection=8))
    finally:
        broker.stop()
    assert report.completed and stats.stopped_by == "condition"
    # The collector's own connection, and 25 subjects per worker over ceil(25 / 8) = 4 connections each.
    assert len(stats.wire) == 1 + 2 * 4, sorted(stats.wire)
    assert int(report.outcome.rows.shape[0]) == 50
    assert sum(bool(v["accept"]) for v in report.outcome.verdicts) == 50
    np.testing.assert_array_equal(np.sort(np.asarray(report.outcome.group_sizes)),
                                  np.sort(np.bincount(mdav(data.select(list(config.qi)).values, 3).groups)))


def test_a_worker_process_does_not_import_scipy_stats() -> None:
    """Every worker process imports the round's modules; scipy.stats alone took about a second of each (no cached
    bytecode here), for a report figure only the main process computes (`coutil.sdc.dp` imports it when used)."""
    import subprocess
    import sys

    code = "import sys, coutil.round.workers, coutil.round.mqtt; print('scipy.stats' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout
