"""`coutil run` end to end: embedded broker and a private mosquitto, outputs checked against MDAV."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from coutil.round.setup import DEFAULT_CONFIDENTIAL, DEFAULT_QI, default_data_path
from coutil.sdc.dataset import load_csv
from tests.net.helpers import Mosquitto


def _coutil(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coutil", *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def _check_outputs(out: Path, n: int, k: int) -> None:
    from coutil.sdc.mdav import mdav

    with (out / "release.csv").open() as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == DEFAULT_QI + DEFAULT_CONFIDENTIAL
    release = np.array([[float(v) for v in r] for r in rows[1:]])
    assert release.shape == (n, len(DEFAULT_QI) + len(DEFAULT_CONFIDENTIAL))
    data = load_csv(default_data_path(), list(DEFAULT_QI + DEFAULT_CONFIDENTIAL))
    qi = data.values[:n, : len(DEFAULT_QI)]
    conf = data.values[:n, len(DEFAULT_QI):]
    central = mdav(qi, k)
    # Same groups as centralized MDAV: every centroid released with the multiset of its members'
    # confidential values (rounded as the CSV writes them).
    want = sorted(
        (tuple(np.round(central.centroids[g], 6)), tuple(sorted(tuple(r) for r in conf[central.groups == g])))
        for g in range(central.n_groups)
    )
    got: dict[tuple[float, ...], list[tuple[float, ...]]] = {}
    for row in release:
        got.setdefault(tuple(np.round(row[: len(DEFAULT_QI)], 6)), []).append(tuple(row[len(DEFAULT_QI):]))
    assert len(got) == central.n_groups
    got_sorted = sorted((c, tuple(sorted(members))) for c, members in got.items())
    for (c_want, m_want), (c_got, m_got) in zip(want, got_sorted, strict=True):
        assert np.allclose(c_want, c_got, rtol=1e-6)
        assert np.allclose(np.array(m_want), np.array(m_got), rtol=1e-6)
    audit = json.loads((out / "audit.json").read_text())
    assert audit["accepted"] == len(audit["verdicts"]) == n
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["manifest"]["k"] == k and manifest["row_order"] == "group"
    assert all(size >= k for size in manifest["group_sizes"])
    trace = (out / "trace.jsonl").read_text().splitlines()
    assert trace and all(json.loads(line)["node"] for line in trace)


def test_run_embedded_broker(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = _coutil("run", "--subjects", "23", "--k", "4", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["completed"] is True and summary["broker"] == "embedded"
    assert "broker" not in summary["dropped"]  # amqtt publishes no drop counter: unknown, not 0
    _check_outputs(out, 23, 4)


@pytest.mark.broker
def test_run_over_private_mosquitto(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        out = tmp_path / "run"
        result = _coutil("run", "--subjects", "30", "--broker", broker.url, "--out", str(out), "--json")
    finally:
        broker.stop()
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["network"]["drops"] == 0
    # mosquitto publishes its drop counter (every 10 s by default): known, and none dropped here.
    assert summary["dropped"].get("broker", 0) == 0
    _check_outputs(out, 30, 5)


@pytest.mark.broker
def test_run_reports_the_messages_a_starved_mosquitto_dropped(tmp_path: Path) -> None:
    """A mosquitto that queues at most 10 messages per client drops part of every burst; the round still
    completes (re-sends), and `coutil run` says how many the broker dropped and what to change."""
    from tests.net.helpers import free_port

    port = free_port()
    broker = Mosquitto(tmp_path, port=port, config_text=(
        f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nset_tcp_nodelay true\n"
        "max_queued_messages 10\nmax_inflight_messages 10\nsys_interval 1\n"))
    broker.start()
    try:
        out = tmp_path / "run"
        result = _coutil("run", "--subjects", "40", "--k", "4", "--broker", broker.url, "--out", str(out), "--json")
    finally:
        broker.stop()
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    dropped = summary["dropped"]["broker"]
    assert dropped > 0, summary["dropped"]
    assert f"the broker dropped {dropped} messages" in " ".join(result.stderr.split())
    assert "max_queued_messages" in result.stderr and "Traceback" not in result.stderr
    _check_outputs(out, 40, 4)


def test_run_bad_inputs_exit_2_or_6(tmp_path: Path) -> None:
    bad_column = _coutil("run", "--qi", "age,nosuch", "--out", str(tmp_path / "a"))
    assert bad_column.returncode == 2
    assert "nosuch" in bad_column.stderr and "Traceback" not in bad_column.stderr
    too_few = _coutil("run", "--subjects", "3", "--k", "5", "--out", str(tmp_path / "b"))
    assert too_few.returncode == 2 and "k = 5" in too_few.stderr
    too_many = _coutil("run", "--subjects", "10001", "--out", str(tmp_path / "e"))
    assert too_many.returncode == 2 and "has only 10000 records" in too_many.stderr and "--data" in too_many.stderr
    bad_url = _coutil("run", "--broker", "http://x", "--out", str(tmp_path / "c"))
    assert bad_url.returncode == 2 and "mqtt://" in bad_url.stderr
    from tests.net.helpers import free_port

    nobody = _coutil("run", "--subjects", "10", "--broker", f"mqtt://127.0.0.1:{free_port()}",
                     "--out", str(tmp_path / "d"), timeout=120)
    assert nobody.returncode == 6, nobody.stderr
    assert "Traceback" not in nobody.stderr


def test_local_round_timing_grows_with_the_swarm_unless_the_config_file_fixes_it(tmp_path: Path) -> None:
    from coutil.round.setup import load_round_spec, local_swarm_timing

    small, large = local_swarm_timing(200), local_swarm_timing(10_000)
    assert small == {"step_timeout": 20.0, "retry_interval": 2.0, "audit_window": 60.0}  # the defaults
    assert large == {"step_timeout": 120.0, "retry_interval": 5.0, "audit_window": 300.0}
    # From 50,000 subjects on the registration window grows too (registration took 34-40 s at 10^5).
    assert local_swarm_timing(100_000)["register_window"] == 60.0 and "register_window" not in large
    config = load_round_spec().for_local_swarm(10_000)
    assert (config.step_timeout, config.retry_interval, config.audit_window) == (120.0, 5.0, 300.0)
    assert config.expected_subjects == 10_000
    toml = tmp_path / "round.toml"
    toml.write_text("[round]\nqi = ['age']\nconfidential = ['income']\nstep_timeout = 30.0\nexpected_subjects = 7\n")
    fixed = load_round_spec(toml).for_local_swarm(10_000)
    assert fixed.step_timeout == 30.0 and fixed.retry_interval == 5.0 and fixed.expected_subjects == 7
    # An override fixes a key as the file does.
    overridden = load_round_spec(toml, sets=["retry_interval=3.5"]).for_local_swarm(10_000)
    assert overridden.retry_interval == 3.5 and overridden.audit_window == 300.0


def test_run_with_subject_worker_processes(tmp_path: Path) -> None:
    """Subjects in two worker processes: the same release (same groups, same records) as MDAV, every
    verdict an accept, the trace and traffic of every subject present."""
    out = tmp_path / "run"
    result = _coutil("run", "--subjects", "24", "--k", "4", "--workers", "2", "--out", str(out), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    diagnosis = {key: summary[key] for key in ("registered", "excluded", "rejections", "wall_times", "network")}
    assert summary["completed"] is True and summary["workers"] == 2, diagnosis
    assert summary["subject_states"] == {"done": 24}, diagnosis
    assert summary["traffic_per_subject"]["sent_messages"]["mean"] >= 7  # register, keys, submit, ...
    _check_outputs(out, 24, 4)
    trace_nodes = {json.loads(line)["node"] for line in (out / "trace.jsonl").read_text().splitlines()}
    assert len(trace_nodes) == 25  # the collector and every subject


def test_worker_slices_partition_the_rows_by_qi_neighbourhood() -> None:
    import numpy as np

    from coutil.protocol.config import RoundConfig
    from coutil.round.simulation import synthetic_dataset
    from coutil.round.workers import split_rows_by_qi
    from coutil.sdc.mdav import mdav

    assert split_rows_by_qi(np.array([[5.0], [1.0], [4.0], [2.0], [3.0]]), 2) == [(1, 3), (0, 2, 4)]
    assert split_rows_by_qi(np.array([5.0, 1.0, 4.0]), 3) == [(1,), (2,), (0,)]
    assert split_rows_by_qi(np.zeros((0, 2)), 2) == [(), ()]
    assert split_rows_by_qi(np.ones((4, 2)), 2) == [(0, 1), (2, 3)]  # all equal: halves, in row order
    rng = np.random.default_rng(3)
    for n, workers in ((2, 3), (7, 2), (1001, 4), (10, 1)):
        slices = split_rows_by_qi(rng.normal(size=(n, 2)), workers)
        sizes = [len(rows) for rows in slices]
        assert len(slices) == workers and max(sizes) - min(sizes) <= 1
        assert sorted(i for rows in slices for i in rows) == list(range(n))
        assert all(list(rows) == sorted(rows) for rows in slices)
    # The point of it: MDAV groups (of neighbours) rarely straddle two workers; contiguous row
    # slices of i.i.d. records put nearly every group across both.
    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=5)
    data = synthetic_dataset(2000, config, 1)
    qi = data.select(list(config.qi)).values
    owner = np.empty(data.n, dtype=int)
    for worker, rows in enumerate(split_rows_by_qi(qi, 2)):
        owner[list(rows)] = worker
    groups = mdav(qi, 5).groups
    straddling = np.mean([len(set(owner[groups == g])) > 1 for g in range(int(groups.max()) + 1)])
    assert straddling < 0.1, straddling


def test_worker_slices_build_the_same_subjects() -> None:
    from coutil.protocol.config import RoundConfig
    from coutil.round.nodes import build_round_nodes, build_subject_nodes
    from coutil.round.simulation import synthetic_dataset
    from coutil.round.workers import SubjectSlice, WorkerPool, WorkerReport, split_rows_by_qi

    config = RoundConfig(qi=("age", "height"), confidential=("income", "savings"), k=3)
    data = synthetic_dataset(12, config, 5)
    whole = build_round_nodes(data, config, seed=5)
    slices = split_rows_by_qi(data.select(list(config.qi)).values, 3)
    pieces = [build_subject_nodes(data, config, whole.collector.public_key, seed=5, rows=rows) for rows in slices]
    by_row = {row: node.public_key for rows, (nodes, _) in zip(slices, pieces, strict=True)
              for row, node in zip(rows, nodes, strict=True)}
    assert [by_row[i] for i in range(data.n)] == [n.public_key for n in whole.subjects]
    # The pool reports the workers' ids in data set order, whichever rows each worker hosted.
    pool = WorkerPool([SubjectSlice(i, None, b"", config, data, rows, 5, 1.0, None)  # type: ignore[arg-type]
                       for i, rows in enumerate(slices)])
    pool.reports = {i: WorkerReport(i, node_ids=ids) for i, (_, ids) in reversed(list(enumerate(pieces)))}
    assert pool.node_ids() == whole.node_ids


def test_two_fresh_rounds_with_one_seed_give_the_subjects_other_keys_and_workers_the_same_ones() -> None:
    """`coutil run` twice with the default seed: each round's collector key is fresh, and the subjects' keys
    (hence their shuffle permutations) derive from it; before, both rounds had the same, and a blame in one
    traced the other's submissions (found by an attacker). Within one round, workers still build the same."""
    from coutil.protocol.config import RoundConfig
    from coutil.round.nodes import build_round_nodes, build_subject_nodes
    from coutil.round.simulation import synthetic_dataset

    config = RoundConfig(qi=("age", "height"), confidential=("income",), k=3)
    data = synthetic_dataset(6, config, 5)
    first, second = (build_round_nodes(data, config, seed=1, fresh_round=True) for _ in range(2))
    assert not {n.public_key for n in first.subjects} & {n.public_key for n in second.subjects}
    worker, _ = build_subject_nodes(data, config, first.collector.public_key, seed=1, rows=range(data.n),
                                    fresh_round=True)
    assert [n.public_key for n in worker] == [n.public_key for n in first.subjects]
    # In memory (not fresh), one seed is one round, reproducibly.
    again = [build_round_nodes(data, config, seed=1) for _ in range(2)]
    assert [n.public_key for n in again[0].subjects] == [n.public_key for n in again[1].subjects]


def test_run_exits_4_when_a_subject_is_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Every subject of `coutil run` is honest: a completed round that left some out is a failure
    (exit 4, naming how many), not a success. The round here is a real one, in memory, in which a
    tenth of the subjects vanish mid-shuffle (the way a lost connection looks to the collector)."""
    import coutil.round.mqtt as mqtt_driver
    from coutil.cli import main
    from coutil.net.mqtt import HostStats
    from coutil.round.memory import run_memory_round
    from coutil.round.simulation import FaultPlan

    def round_with_vanishing_subjects(data, config, **kwargs):  # type: ignore[no-untyped-def]
        report = run_memory_round(data, config, seed=1, faults=FaultPlan(vanish_fraction=0.1),
                                  out_dir=kwargs.get("out_dir"))
        return report, HostStats({}, 1.0, "condition")

    monkeypatch.setattr(mqtt_driver, "run_mqtt_round", round_with_vanishing_subjects)
    code = main(["run", "--subjects", "40", "--k", "4", "--workers", "0", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "the release holds 36 of the 40 subjects" in err and "excluded" in err


def test_run_ends_with_its_outcome_and_how_to_see_it(tmp_path: Path) -> None:
    """Without --json, the last lines answer "did my round work and what did it cost" and name `coutil report`."""
    out = tmp_path / "run"
    result = _coutil("run", "--subjects", "12", "--k", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stderr.split())  # rich wraps long lines at the terminal's width
    assert "round OK: 12 of 12 subjects released, 0 excluded, 0 complaining; k = 3;" in text
    outcome = text[text.index("round OK"):]
    assert all(phase in outcome for phase in ("registration", "sharing", "auditing"))
    assert text.endswith(f"all of it on one HTML page: coutil report {out}")
