"""Shared by the deviation tests: one small in-memory round with an ``[adversary]`` plan."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

from coutil.adversary.plan import parse_adversary
from coutil.protocol.config import RoundConfig
from coutil.round.memory import MemoryRound, simulate_round
from coutil.round.simulation import synthetic_dataset
from coutil.sdc.dataset import Dataset

CONFIG = RoundConfig(qi=("age", "height"), confidential=("income",), k=3, random_records=50,
                     step_timeout=10.0, retry_interval=1.0, register_window=5.0, audit_window=20.0)
SEEDS = [3, 8, 13]
#: A round file of the same round (30 subjects), for the command-line tests; append an [adversary] table.
ROUND_FILE = """
[round]
qi = ["age", "height"]
confidential = ["income"]
k = 3
random_records = 50
step_timeout = 10.0
retry_interval = 1.0
register_window = 5.0
audit_window = 20.0
[data]
subjects = 30
"""


@dataclass
class Played:
    data: Dataset
    round: MemoryRound
    section: dict[str, Any]
    k: int = CONFIG.k

    @property
    def outcome(self) -> Any:
        return self.round.collector.outcome()

    def entries(self, role: str) -> list[dict[str, Any]]:
        return [e for e in self.section["deviants"] if e["role"] == role]

    @property
    def collector_entry(self) -> dict[str, Any]:
        (entry,) = self.entries("collector")
        return entry

    @property
    def deviant_rows(self) -> set[int]:
        return {int(e["row"]) for e in self.entries("subject")}

    @property
    def honest_rows(self) -> list[int]:
        return [r for r in range(self.data.n) if r not in self.deviant_rows]

    def sid(self, row: int) -> str:
        return self.round.report.sids[row].split("-")[0]

    def excluded(self) -> dict[str, str]:
        return {str(e["sid"]): str(e["reason"]) for e in self.outcome.excluded}

    def verdicts(self) -> dict[str, dict[str, object]]:
        return {str(v["sid"]): v for v in self.outcome.verdicts}

    def released(self) -> Counter[tuple[float, ...]]:
        return Counter(tuple(r) for r in self.outcome.rows[:, len(CONFIG.qi):].tolist())

    def records(self, rows: list[int]) -> Counter[tuple[float, ...]]:
        conf = self.data.select(list(CONFIG.confidential)).values
        return Counter(tuple(conf[r].tolist()) for r in rows)


def play(table: dict[str, Any], *, seed: int, n: int = 30, config: RoundConfig = CONFIG) -> Played:
    """One round of ``n`` synthetic subjects with the ``[adversary]`` table ``table`` (``config``: the round's,
    the data drawn as for `CONFIG`)."""
    plan = parse_adversary(table, "test")
    data = synthetic_dataset(n, CONFIG, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        played = simulate_round(data, config, seed=seed, adversary=plan)
    assert played.report.adversary is not None
    return Played(data, played, played.report.adversary, config.k)
