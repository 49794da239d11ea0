"""The collector's serial stretches, in-process: registrations with and without their signatures
verified ahead (`coutil.net.burst`), closing the registration with the assigns signed serially or
in a process pool (`CollectorCore._sign_many`), and encoding one assign.

    python simulations/bench/bench_collector_burst.py [--subjects 20000] [--repeat 2]

No broker: the subjects' registrations are made once, then handed to fresh collectors. A table on
stdout, ``results/bench_collector_burst.json`` beside it. The machine is shared and noisy: compare
the ratios of one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import timeit
from pathlib import Path
from typing import Any

from coutil.protocol import codec
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import Assign
from coutil.protocol.node import SERIAL_POOL, Outgoing, WorkPool
from coutil.round.nodes import build_collector, build_subject_nodes
from coutil.round.parallel import ProcessPool
from coutil.round.setup import local_swarm_timing
from coutil.round.simulation import synthetic_dataset

RESULTS = Path(__file__).resolve().parent / "results" / "bench_collector_burst.json"


def _config(n: int, expected: int) -> RoundConfig:
    return RoundConfig.from_mapping({"qi": ("age", "height"), "confidential": ("income", "savings"), "k": 5,
                                     "expected_subjects": expected, **local_swarm_timing(n)})


def _registrations(n: int, config: RoundConfig) -> tuple[list[Outgoing], bytes]:
    """Every subject's signed registration (for a collector built with seed 1), and the collector's key."""
    collector = build_collector(config, seed=1)
    announce = collector.start(0.0)
    subjects, _ = build_subject_nodes(synthetic_dataset(n, config, 1), config, collector.public_key, seed=1,
                                      rows=range(n))
    registrations: list[Outgoing] = []
    for subject in subjects:
        subject.start(0.0)
        for out in announce:
            registrations.extend(r for r in subject.receive(out.topic, out.payload, 0.1) if r.topic.endswith("/up"))
    return registrations, collector.public_key


def _collector(config: RoundConfig, pool: WorkPool = SERIAL_POOL) -> CollectorNode:
    node = build_collector(config, seed=1, pool=pool)
    node.start(0.0)
    return node


def _registration_us(registrations: list[Outgoing], config: RoundConfig, preverified: bool) -> float:
    collector = _collector(config)
    if preverified:  # what the helper processes hand back (`signature_prechecker`)
        collector.decode_cache.remember_digests(codec.verified_digest(collector.limits, r.payload)
                                                for r in registrations)
    started = time.perf_counter()
    for r in registrations:
        collector.receive(r.topic, r.payload, 0.2)
    return (time.perf_counter() - started) / len(registrations) * 1e6


def _closing_s(registrations: list[Outgoing], config: RoundConfig, pool: WorkPool) -> float:
    """Seconds of the last registration's call: grouping, every assign signed, the runs started."""
    collector = _collector(config, pool=pool)
    for r in registrations[:-1]:
        collector.receive(r.topic, r.payload, 0.2)
    started = time.perf_counter()
    collector.receive(registrations[-1].topic, registrations[-1].payload, 0.3)
    return time.perf_counter() - started


def _assign_encoding_us() -> float:
    message = Assign(os.urandom(16), os.urandom(32), os.urandom(32), 12345, tuple(os.urandom(32) for _ in range(17)),
                     os.urandom(32), 77, tuple(os.urandom(32) for _ in range(5)), (1.5, 2.5),
                     tuple((i, os.urandom(32), tuple(os.urandom(32) for _ in range(17))) for i in range(4)))
    return min(timeit.repeat(lambda: codec.encode_payload(message), number=2000, repeat=7)) / 2000 * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    n = args.subjects
    print(f"making {n} registrations ...", file=sys.stderr)
    registrations, _ = _registrations(n, _config(n, n + 1))
    rows: list[dict[str, Any]] = []
    with ProcessPool(2) as pool:
        for trial in range(1, args.repeat + 1):
            open_config = _config(n, n + 1)
            closing_config = _config(n, n)
            row = {
                "trial": trial,
                "registration_us": _registration_us(registrations, open_config, preverified=False),
                "registration_preverified_us": _registration_us(registrations, open_config, preverified=True),
                "closing_serial_s": _closing_s(registrations, closing_config, SERIAL_POOL),
                "closing_pool_s": _closing_s(registrations, closing_config, pool),
                "assign_encode_payload_us": _assign_encoding_us(),
            }
            rows.append(row)
    header = ("trial", "registration us", "pre-verified us", "ratio", "closing serial s", "closing pool s", "ratio",
              "assign encode us")
    print(" | ".join(header))
    for r in rows:
        print(" | ".join([
            str(r["trial"]), f"{r['registration_us']:.1f}", f"{r['registration_preverified_us']:.1f}",
            f"{r['registration_preverified_us'] / r['registration_us']:.2f}", f"{r['closing_serial_s']:.2f}",
            f"{r['closing_pool_s']:.2f}", f"{r['closing_pool_s'] / r['closing_serial_s']:.2f}",
            f"{r['assign_encode_payload_us']:.1f}"]))
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench_collector_burst", "command": " ".join(["python", *sys.argv]), "subjects": n,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()}, "runs": rows,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":  # the guard matters: the pool's processes are spawned and import this file
    raise SystemExit(main())
