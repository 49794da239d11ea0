"""One cell of a study: the collaborative round and the baselines on the same records, measured.

A cell is a point of the grid and a seed. Its records are the data set's first ``n`` rows (or ``n``
synthetic records drawn with the seed); the public scales s_j every subject may use alone are the
data's standard deviations (as if published by the collector from an earlier survey). Methods:

- ``collaborative``: the protocol round in memory, every subject playing her strategy: the cell's
  ``mix`` for everyone, the cell's ``deviation`` for the ``focal`` subjects (chosen with the seed, the
  same ones in every cell of that seed, so that a deviation is compared with honest play in pairs),
  and the collector playing the cell's ``collector`` strategy (a deviating collector's ``victim``, a
  data-set row, defaults to the first focal subject in the round). Strategies of the deviation library run as
  their nodes (`coutil.adversary`): whether each deviator was detected and excluded, and the honest
  records a deviating collector attributes (its leak: those subjects' r_C is 1), come from the
  round's ``adversary`` section. Subjects who play ``plain`` or ``local`` hand their (masked) record
  to the collector outside the round; the collector's data set is the round's release plus those rows;
- ``centralized``: everyone hands her record to the collector, which releases MDAV with the same k;
- ``local:a``: everyone masks her own record alone, e ~ N(0, a s_j^2) on every attribute;
- ``plain``: everyone hands her record in; the collector releases it as is;
- ``decline``: nobody takes part; nothing is released.

The result is one row per (method, subject) and one summary per method (`CellResult`). Everything
but the CPU seconds is a function of the cell (seeded), whichever process runs it.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.adversary.plan import AdversaryPlan, SubjectAssignment
from coutil.errors import InputError
from coutil.experiment.config import Study
from coutil.experiment.driver import run_collaborative
from coutil.experiment.measures import (
    NO_RELEASE,
    collector_risk,
    collusion_risk,
    intruder_risk,
    utility,
)
from coutil.experiment.strategies import CollectorStrategy, SubjectStrategy, collector_strategy, subject_strategy
from coutil.protocol.config import RoundConfig
from coutil.round.simulation import FaultPlan, synthetic_dataset
from coutil.sdc.dataset import Dataset, load_csv
from coutil.sdc.masking import local_anonymization
from coutil.sdc.mdav import mdav

FloatMatrix = NDArray[np.float64]
#: Bytes of one signed record handed to the collector outside the protocol: 8 per value plus a 64-byte
#: Ed25519 signature and the 32-byte key (the same envelope overhead as a protocol message).
ENVELOPE_BYTES = 96


@dataclass
class CellResult:
    cell: dict[str, Any]
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    wall_seconds: float


@dataclass
class _Outcome:
    """One method's outcome: the collector's data set and, per subject, what it holds of her."""

    method: str
    release: FloatMatrix
    #: Per subject: her row in ``release`` (-1: not in it).
    rows: NDArray[np.intp]
    #: Per subject: her group (-1: none) and its size.
    group: NDArray[np.intp]
    group_size: NDArray[np.intp]
    r_collector: NDArray[np.float64]
    r_group: NDArray[np.float64]
    messages: NDArray[np.float64]
    bytes: NDArray[np.float64]
    cpu: NDArray[np.float64]
    strategies: list[str]
    excluded: NDArray[np.bool_]
    #: Per subject: her deviation was detected by someone (only the library's node strategies are checked).
    detected: NDArray[np.bool_]
    #: What each subject submitted (for the collector's value-equality test), the data set's true records.
    extra: dict[str, Any]


def load_records(study: Study, cell: dict[str, Any]) -> tuple[Dataset, tuple[str, ...], tuple[str, ...]]:
    attrs = study.attributes[cell["attributes"]] if "attributes" in cell else {"qi": [], "confidential": []}
    qi, conf = tuple(attrs["qi"]), tuple(attrs["confidential"])
    n = int(cell.get("n", 100))
    path = study.dataset_path(str(cell.get("dataset", "synthetic")))
    if path is None:
        qi = qi or ("age", "height")
        conf = conf or ("income", "savings")
        config = RoundConfig(qi=qi, confidential=conf, k=int(cell.get("k", 5)))
        data = synthetic_dataset(n, config, int(cell["seed"]))
    else:
        data = load_csv(path, list(qi + conf))
        data = Dataset(data.names, data.values[:n], data.source, data.ordinal)
    return data, qi, conf


def _adversary_plan(strategies: list[SubjectStrategy], in_round: list[int], collector: CollectorStrategy,
                    victim: int) -> AdversaryPlan | None:
    """The round's deviating nodes: the library strategies of the subjects in the round (by their row
    in the round) and the collector's, its victim given as her row in the round."""
    by_strategy: dict[tuple[str, tuple[tuple[str, object], ...]], list[int]] = {}
    for j, i in enumerate(in_round):
        s = strategies[i]
        if s.node is not None:
            by_strategy.setdefault((s.node, s.node_params), []).append(j)
    subjects = tuple(SubjectAssignment(node, tuple(rows), params=params)
                     for (node, params), rows in by_strategy.items())
    params = collector.node_params
    if collector.node is not None and victim >= 0:
        if victim not in in_round:
            raise InputError(f"collector {collector.name!r}: victim row {victim} does not take part in the round")
        params = tuple(sorted({**dict(params), "victim": in_round.index(victim)}.items()))
    plan = AdversaryPlan(collector.node, params, subjects)
    return None if plan.empty else plan


def _strategies(study: Study, cell: dict[str, Any], n: int) -> tuple[list[SubjectStrategy], list[str], list[bool]]:
    """Each subject's strategy, type and whether she is focal (all functions of the seed)."""
    rng = np.random.default_rng([int(cell["seed"]), 0x57A7])
    mix = study.mix[cell.get("mix", "honest")]
    names = list(mix)
    weights = np.asarray([mix[s] for s in names], dtype=np.float64)
    counts = np.floor(weights / weights.sum() * n).astype(int)
    counts[0] += n - counts.sum()
    pool = [name for name, c in zip(names, counts, strict=True) for _ in range(c)]
    order = rng.permutation(n)
    chosen = [pool[int(i)] for i in np.argsort(order)]
    focal_rows = set(np.random.default_rng([int(cell["seed"]), 0xF0CA1]).choice(n, size=min(study.focal, n),
                                                                                 replace=False).tolist())
    deviation = str(cell.get("deviation", "honest"))
    strategies = [subject_strategy(deviation if i in focal_rows else chosen[i],
                                   study.strategy_params(deviation if i in focal_rows else chosen[i]))
                  for i in range(n)]
    type_names = [t.name for t in study.types]
    fractions = np.asarray([t.fraction for t in study.types], dtype=np.float64)
    types_rng = np.random.default_rng([int(cell["seed"]), 0x7195])
    types = [type_names[int(j)] for j in types_rng.choice(len(type_names), size=n, p=fractions / fractions.sum())]
    return strategies, types, [i in focal_rows for i in range(n)]


def run_cell(study: Study, cell: dict[str, Any]) -> CellResult:
    """Run every method of ``study`` on ``cell`` and measure it."""
    started = time.perf_counter()
    data, qi, conf = load_records(study, cell)
    x = data.values
    n, n_qi = x.shape[0], len(qi)
    k = int(cell.get("k", 5))
    seed = int(cell["seed"])
    scales = x.std(axis=0)
    scales = np.where(scales > 0, scales, 1.0)
    strategies, types, focal = _strategies(study, cell, n)
    collector = collector_strategy(str(cell.get("collector", "honest")),
                                   study.collector_params(str(cell.get("collector", "honest"))))
    outcomes: list[_Outcome] = []
    for method in study.methods:
        if method == "collaborative":
            outcomes.append(_collaborative(study, cell, data, qi, conf, strategies, scales, collector, focal))
        elif method == "centralized":
            outcomes.append(_centralized(x, n_qi, k))
        elif method == "local":
            outcomes.extend(_local(x, a, scales, seed, k) for a in study.local_noise)
        elif method == "plain":
            outcomes.append(_everyone(x, "plain", x.copy(), r_collector=1.0, r_group=1.0))
        elif method == "decline":
            outcomes.append(_declined(x))
    rows: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for outcome in outcomes:
        method_rows, method_summary = _measure(study, cell, x, n_qi, k, outcome, types, focal,
                                               collector if outcome.method == "collaborative" else None)
        rows.extend(method_rows)
        summary.append(method_summary)
    return CellResult(dict(cell), rows, summary, time.perf_counter() - started)


def _collaborative(study: Study, cell: dict[str, Any], data: Dataset, qi: tuple[str, ...], conf: tuple[str, ...],
                   strategies: list[SubjectStrategy], scales: NDArray[np.float64], collector: CollectorStrategy,
                   focal: list[bool]) -> _Outcome:
    x = data.values
    n, n_qi = x.shape[0], len(qi)
    k = int(cell.get("k", 5))
    seed = int(cell["seed"])
    in_round = [i for i, s in enumerate(strategies) if s.channel == "protocol"]
    submitted = np.empty((len(in_round), x.shape[1]), dtype=np.float64)
    for j, i in enumerate(in_round):
        q, c = strategies[i].submitted(x[i, :n_qi], x[i, n_qi:], scales[:n_qi], scales[n_qi:])
        submitted[j] = np.concatenate([q, c])
    round_keys = {key: value for key, value in study.round.items()}
    config = RoundConfig.from_mapping({"qi": list(qi), "confidential": list(conf), "k": k,
                                       "expected_subjects": len(in_round), **round_keys})
    faults = FaultPlan(**study.faults[cell.get("faults", "none")])
    vanish = {j: s.vanish_state for j, i in enumerate(in_round)
              if (s := strategies[i]).vanish_state is not None}
    release_parts: list[FloatMatrix] = []
    rows = np.full(n, -1, dtype=np.intp)
    group = np.full(n, -1, dtype=np.intp)
    group_size = np.zeros(n, dtype=np.intp)
    r_collector = np.zeros(n)
    messages, nbytes, cpu = np.zeros(n), np.zeros(n), np.zeros(n)
    excluded = np.zeros(n, dtype=bool)
    detected = np.zeros(n, dtype=bool)
    extra: dict[str, Any] = {}
    if len(in_round) >= k:
        given_victim = dict(collector.node_params).get("victim")
        # Default: the first focal subject who takes part in the round (else the round's first subject).
        victim = int(given_victim) if isinstance(given_victim, int) else \
            next((i for i in in_round if focal[i]), in_round[0])
        plan = _adversary_plan(strategies, in_round, collector, victim)
        run = run_collaborative(Dataset(data.names, submitted, data.source), config, seed=seed, vanish=vanish,
                                faults=faults, adversary=plan)
        release_parts.append(run.release)
        starts = np.concatenate([[0], np.cumsum(run.block_sizes)]).astype(int).tolist()
        linking = collector_risk(run.collector_orders, run.block_of_subject, run.row_of_subject, starts,
                                 run.block_sizes, run.release[:, n_qi:], submitted[:, n_qi:])
        extra = {"completed": run.report.completed, "virtual_time": run.report.virtual_time,
                 "collector_best_strategy": linking.best, "collector_hits": linking.hits,
                 "collector_chance_hits": linking.chance, "collector_p_value": linking.p_value}
        for j, i in enumerate(in_round):
            rows[i] = run.row_of_subject[j]
            if rows[i] >= 0:
                group[i] = run.block_of_subject[j]
                group_size[i] = run.block_sizes[group[i]]
                r_collector[i] = linking.risk.get(j, 0.0)
            else:
                excluded[i] = True
            messages[i] = run.cost[j].messages
            nbytes[i] = run.cost[j].bytes
            cpu[i] = run.cost[j].cpu_seconds
        if run.adversary is not None:
            extra.update(_deviants(run.adversary, in_round, run.report.sids, detected, r_collector))
    else:
        excluded[in_round] = True
    offset = sum(part.shape[0] for part in release_parts)
    rng = np.random.default_rng([seed, 0x10CA1])
    for i, s in enumerate(strategies):
        if s.channel in ("plain", "local"):
            record = x[i].copy()
            if s.channel == "local":
                record = record + rng.standard_normal(record.shape[0]) * math.sqrt(s.local_a) * scales
            release_parts.append(record[None, :])
            rows[i] = offset
            offset += 1
            r_collector[i] = 1.0
            messages[i], nbytes[i] = 1, 8 * x.shape[1] + ENVELOPE_BYTES
    release = np.vstack(release_parts) if release_parts else np.zeros((0, x.shape[1]))
    r_group = np.array([collusion_risk(int(group_size[i]), k) if group[i] >= 0 else
                        (1.0 if strategies[i].channel == "plain" else
                         (1.0 / max(1, release.shape[0] - (k - 1)) if rows[i] >= 0 else 0.0)) for i in range(n)])
    return _Outcome("collaborative", release, rows, group, group_size, r_collector, r_group, messages, nbytes, cpu,
                    [s.name for s in strategies], excluded, detected, extra)


def _deviants(section: dict[str, Any], in_round: list[int], sids: list[str], detected: NDArray[np.bool_],
              r_collector: NDArray[np.float64]) -> dict[str, Any]:
    """From the round's ``adversary`` section: mark the subjects whose deviation was detected, give r_C = 1
    to the honest subjects whose record a deviating collector attributes, and the collector's figures."""
    extra: dict[str, Any] = {}
    row_of_sid = {sid.split("-")[0]: in_round[j] for j, sid in enumerate(sids)}
    for entry in section["deviants"]:
        if entry["role"] == "subject":
            detected[in_round[int(entry["row"])]] = bool(entry["detected"])
        else:
            leak = [row_of_sid[str(sid)] for sid in entry["leak"]]
            r_collector[leak] = 1.0
            extra.update({"collector_deviated": bool(entry["deviated"]), "collector_detected": bool(entry["detected"]),
                          "collector_public": bool(entry["public"]), "collector_leak": len(leak),
                          "collector_detectors": int(entry["detectors"])})
    extra["honest_excluded"] = int(sum(section["honest_excluded"].values()))
    extra["honest_complaints"] = int(sum(section["honest_complaints"].values()))
    return extra


def _record_cost(x: FloatMatrix) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    n, m = x.shape
    return np.ones(n), np.full(n, float(8 * m + ENVELOPE_BYTES))


def _everyone(x: FloatMatrix, method: str, release: FloatMatrix, *, r_collector: float, r_group: float,
              group: NDArray[np.intp] | None = None, k: int = 1) -> _Outcome:
    n = x.shape[0]
    messages, nbytes = _record_cost(x)
    if group is None:
        groups = np.full(n, -1, dtype=np.intp)
        sizes = np.zeros(n, dtype=np.intp)
        r_g = np.full(n, r_group)
    else:
        groups = group
        sizes = np.bincount(group)[group].astype(np.intp)
        r_g = np.array([collusion_risk(int(g), k) for g in sizes])
    return _Outcome(method, release, np.arange(n, dtype=np.intp), groups, sizes, np.full(n, r_collector), r_g,
                    messages, nbytes, np.zeros(n), [method] * n, np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {})


def _centralized(x: FloatMatrix, n_qi: int, k: int) -> _Outcome:
    result = mdav(x[:, :n_qi], k)
    release = x.copy()
    release[:, :n_qi] = result.masked()
    return _everyone(x, "centralized", release, r_collector=1.0, r_group=1.0,
                     group=np.asarray(result.groups, dtype=np.intp), k=k)


def _local(x: FloatMatrix, a: float, scales: NDArray[np.float64], seed: int, k: int) -> _Outcome:
    release = local_anonymization(x, scales, a, np.random.default_rng([seed, 0x10CA1, int(a * 1000)]))
    # The collector knows whose masked record each is (r_C = 1); k-1 colluders strike out their own.
    return _everyone(x, f"local:{a:g}", release, r_collector=1.0, r_group=1.0 / max(1, x.shape[0] - (k - 1)))


def _declined(x: FloatMatrix) -> _Outcome:
    n = x.shape[0]
    zeros = np.zeros(n)
    return _Outcome("decline", np.zeros((0, x.shape[1])), np.full(n, -1, dtype=np.intp), np.full(n, -1, np.intp),
                    np.zeros(n, dtype=np.intp), zeros, zeros, zeros, zeros, zeros, ["decline"] * n,
                    np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), {})


def _measure(study: Study, cell: dict[str, Any], x: FloatMatrix, n_qi: int, k: int, outcome: _Outcome,
             types: list[str], focal: list[bool],
             collector: CollectorStrategy | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows (one per subject) and the summary of one method's outcome. ``collector``: the
    collector's strategy in the collaborative round (None: the method has no round; it plays honest)."""
    n = x.shape[0]
    released = np.flatnonzero(outcome.rows >= 0)
    if released.size >= 2:
        rows = outcome.rows[released]
        aligned = outcome.release[rows]
        util = utility(x[released], aligned, n_qi)
        # Rows no subject owns (a deviating collector's Sybils) are left out: the maximum-knowledge
        # intruder knows every real record, and the reverse mapping pairs records with rows one to one.
        own_rows = outcome.release.shape[0] == released.size
        attack = intruder_risk(x[released], outcome.release if own_rows else aligned,
                               rows if own_rows else np.arange(released.size), seed=int(cell["seed"]),
                               random_records=study.intruder_random_records)
        hellinger = attack.hellinger
    else:
        util, attack, hellinger = NO_RELEASE, None, math.nan
    r_intruder = np.zeros(n)
    distance = np.full(n, -1, dtype=np.int64)
    if attack is not None:
        r_intruder[released] = attack.success
        distance[released] = attack.distance
    weights = study.risk
    risk = (weights["collector"] * outcome.r_collector + weights["intruder"] * r_intruder
            + weights["group"] * outcome.r_group)
    by_type = {t.name: t for t in study.types}
    kilobytes = outcome.bytes / 1000.0
    records: list[dict[str, Any]] = []
    for i in range(n):
        included = bool(outcome.rows[i] >= 0)
        u_i = util.u if included else 0.0
        t = by_type[types[i]]
        records.append({
            "cell": cell["id"], "seed": cell["seed"], "subject": i, "type": types[i],
            "strategy": outcome.strategies[i], "focal": focal[i], "method": outcome.method,
            "group": int(outcome.group[i]), "group_size": int(outcome.group_size[i]),
            "released": included, "excluded": bool(outcome.excluded[i]), "detected": bool(outcome.detected[i]),
            "messages": float(outcome.messages[i]), "bytes": float(outcome.bytes[i]),
            "cpu_seconds": float(outcome.cpu[i]),
            "r_collector": float(outcome.r_collector[i]), "r_intruder": float(r_intruder[i]),
            "permutation_distance": int(distance[i]), "r_group": float(outcome.r_group[i]),
            "risk": float(risk[i]), "utility_received": u_i,
            "payoff": t.a * u_i - t.b * float(risk[i]) - t.c * float(kilobytes[i]),
            **{f"release_{key}": value for key, value in util.as_dict().items()},
        })
    strategy = collector if collector is not None else collector_strategy("honest")
    # The first collector type's payoff; the payoff table values every type (coutil.experiment.payoffs).
    collector_payoff = strategy.payoff(util.u if released.size else 0.0,
                                       float(outcome.extra.get("collector_leak", 0)) / n,
                                       bool(outcome.extra.get("collector_public", False)),
                                       next(iter(study.collector_types.values())))
    summary = {
        "cell": cell["id"], "seed": cell["seed"], "method": outcome.method,
        **{key: value for key, value in cell.items() if key not in ("id", "seed")},
        "subjects": n, "released": int(released.size), "excluded": int(outcome.excluded.sum()),
        **util.as_dict(), "hellinger": hellinger,
        "r_collector": float(outcome.r_collector[released].mean()) if released.size else 0.0,
        "r_intruder": float(r_intruder[released].mean()) if released.size else 0.0,
        "r_group": float(outcome.r_group[released].mean()) if released.size else 0.0,
        "permutation_distance": float(distance[released].mean()) if released.size else math.nan,
        "messages": float(outcome.messages.mean()), "bytes": float(outcome.bytes.mean()),
        "cpu_seconds": float(outcome.cpu.mean()),
        "collector_strategy": strategy.name, "collector_payoff": collector_payoff,
        "detected": int(outcome.detected.sum()),
        **outcome.extra,
    }
    return records, summary


def with_methods(study: Study, methods: tuple[str, ...]) -> Study:
    return replace(study, methods=methods)
