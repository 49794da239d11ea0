"""Running a round: one package for everything between the protocol nodes and the command line.

- `setup`: the round file every runner reads (``[round]``, ``[data]``, ``[network]``, ``[faults]``,
  ``--set`` overrides) and the timing of a swarm hosted on one machine;
- `nodes`: building the collector and the subjects from one seed;
- `tracker`: the one tracker from typed node events to subject states, collector phases, progress
  and wall times;
- `report`: `RoundReport`, traffic statistics, the output files;
- `transcript`: the signed transcript of a round (transcript.json, ``collector export --transcript``) and
  the recorder that writes it in a driver; `verify` (and `verify_roster`): the auditor's checks on it
  (``coutil verify``);
- `simulation`: fault plans and synthetic records;
- the drivers: `memory` (the in-memory bus, virtual time), `mqtt` (a real broker) and `workers`
  (subjects hosted in worker processes against that broker); `subjects` hosts the subjects of a
  deployed swarm or of one person; `heap` keeps the garbage collector off the nodes while a round runs;
  `parallel` gives a collector threads to open the groups' records on spare cores.

Layers below (`coutil.protocol`, `coutil.net`) never import this package; the collector service
and the CLI sit above it. The names below are importable from the package itself
(``from coutil.round import run_memory_round``); they are loaded on first use, so that importing
one light submodule (`setup`) does not pull in the protocol's crypto stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coutil.round.memory import MemoryRound as MemoryRound
    from coutil.round.memory import run_memory_round as run_memory_round
    from coutil.round.memory import simulate_round as simulate_round
    from coutil.round.report import RoundReport as RoundReport
    from coutil.round.simulation import FaultPlan as FaultPlan
    from coutil.round.simulation import synthetic_dataset as synthetic_dataset

_EXPORTS = {
    "MemoryRound": "coutil.round.memory",
    "run_memory_round": "coutil.round.memory",
    "simulate_round": "coutil.round.memory",
    "RoundReport": "coutil.round.report",
    "FaultPlan": "coutil.round.simulation",
    "synthetic_dataset": "coutil.round.simulation",
}

__all__ = ["FaultPlan", "MemoryRound", "RoundReport", "run_memory_round", "simulate_round", "synthetic_dataset"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'coutil.round' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
