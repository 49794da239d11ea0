"""Building a round's nodes: the collector and one subject per record, all keys derived from one seed.

Shared by every driver: the in-memory bus, the MQTT host and its worker processes build the very
same nodes (a subject's keys depend only on the seed and her row, so any process can build any
subject).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from coutil.adversary import collector_strategy, subject_strategy
from coutil.adversary.plan import AdversaryPlan
from coutil.errors import InputError
from coutil.protocol import crypto
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SERIAL_POOL, SeededRandom, SystemRandom, WorkPool
from coutil.protocol.retry import NewsClock
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.protocol.subject_core import MIN_K
from coutil.sdc.dataset import Dataset


@dataclass
class RoundNodes:
    """One collector and one subject node per record."""

    collector: CollectorNode
    #: In dataset order.
    subjects: list[SubjectNode]
    #: Node ids in dataset order (the subject's sid, suffixed when two sids collide).
    node_ids: list[str]
    #: Row -> subject strategy name, for the rows the round's ``[adversary]`` plan gives one.
    deviants: dict[int, str] = field(default_factory=dict)


def build_round_nodes(data: Dataset, config: RoundConfig, *, seed: int, fresh_round: bool = False,
                      adversary: AdversaryPlan | None = None, identity_seed: int | None = None,
                      pool: WorkPool = SERIAL_POOL) -> RoundNodes:
    """The nodes of one round over ``data``.

    Every key derives from ``seed``. ``fresh_round`` draws the collector's key and the round id from
    the operating system instead: a real broker keeps the retained announce and bulletins of an
    earlier round, which a seeded collector would have signed with the very same key. ``adversary``
    gives the collector and chosen rows their strategy (`coutil.adversary`): a strategy is just
    another node class, so every driver runs it. ``identity_seed`` derives the collector's long-term
    key from another seed than the rest (a collector's other round: same key, another round id).
    ``pool``: the collector's `WorkPool` (threads from a driver with spare cores).
    """
    # One decode cache for every node of the process: each message is verified once, not once per receiver.
    caches = SharedCaches()
    collector = build_collector(config, seed=seed, fresh_round=fresh_round, caches=caches, adversary=adversary,
                                data=data, identity_seed=identity_seed, pool=pool)
    subjects, node_ids = build_subject_nodes(data, config, collector.public_key, seed=seed, rows=range(data.n),
                                             caches=caches, adversary=adversary, fresh_round=fresh_round)
    deviants = {} if adversary is None else {r: a.strategy for r, a in adversary.subject_rows(data.n, seed).items()}
    return RoundNodes(collector, subjects, node_ids, deviants)


def build_collector(config: RoundConfig, *, seed: int, fresh_round: bool = False,
                    caches: SharedCaches | None = None, adversary: AdversaryPlan | None = None,
                    data: Dataset | None = None, identity_seed: int | None = None,
                    pool: WorkPool = SERIAL_POOL) -> CollectorNode:
    """The round's collector (see `build_round_nodes` for ``seed`` and ``fresh_round``); of the
    plan's collector strategy if it has one (one that targets a victim needs ``data`` to find her key)."""
    root = SeededRandom(seed)
    collector_rng = root.fork("collector")
    if fresh_round:
        identity = crypto.SigningKey.generate(SystemRandom())
        round_id = SystemRandom().bytes(16)
    else:
        identity_rng = collector_rng if identity_seed is None else SeededRandom(identity_seed).fork("collector")
        identity = crypto.SigningKey.generate(identity_rng.fork("identity"))
        round_id = root.fork("round").bytes(16)
    cls: type[CollectorNode] = CollectorNode
    if adversary is not None and adversary.collector is not None:
        cls = collector_strategy(adversary.collector)
    collector = cls(config, identity=identity, rng=collector_rng, round_id=round_id,
                    decode_cache=None if caches is None else caches.decode_cache, pool=pool)
    if adversary is not None and adversary.collector is not None:
        collector.configure(dict(adversary.collector_params))  # type: ignore[attr-defined]
        victim = adversary.victim_row()
        if victim is not None:
            if data is None or victim >= data.n:
                raise InputError(f"[adversary] {adversary.collector}: victim row {victim} is not in the data set")
            # Her key derives from the seed and her row (and its key) alone: the collector recognises its target.
            nodes, _ = build_subject_nodes(data, config, collector.public_key, seed=seed, rows=[victim],
                                           fresh_round=fresh_round)
            collector.victim_key = nodes[0].public_key  # type: ignore[attr-defined]
    return collector


def build_subject_nodes(
    data: Dataset, config: RoundConfig, collector_key: bytes, *, seed: int, rows: Iterable[int],
    caches: SharedCaches | None = None, adversary: AdversaryPlan | None = None, fresh_round: bool = False,
) -> tuple[list[SubjectNode], list[str]]:
    """Subject nodes for the given rows of ``data``, with their node ids (the sid, suffixed when two
    collide). A row's keys depend only on ``seed`` and the row number (and, in a ``fresh_round``, on the
    collector's fresh key), so a worker process hosting a slice of them gets the very subjects a single
    process would (strategies included: the plan's choice of rows is a function of the seed). Why the
    collector's key: two rounds over a real broker with the same seed would otherwise give every subject
    the same keys and shuffle permutations in both, and a blame in one (which publishes a run's outer
    secrets and permutations) would trace the other's submissions (found by an attacker: 3 of 3 records)."""
    deviants = adversary.subject_rows(data.n, seed) if adversary is not None else {}
    caches = caches if caches is not None else SharedCaches()
    # One news clock: the subjects of one process wait in the same queues (see `coutil.protocol.retry`).
    news = NewsClock()
    qi_values = data.select(list(config.qi)).values
    conf_values = data.select(list(config.confidential)).values
    subject_rng = SeededRandom(seed).fork("subjects")
    if fresh_round:
        subject_rng = subject_rng.fork(collector_key.hex())
    subjects: list[SubjectNode] = []
    node_ids: list[str] = []
    seen: set[str] = set()
    for i in rows:
        plan = deviants.get(i)
        cls: type[SubjectNode] = SubjectNode
        if plan is not None:
            cls = subject_strategy(plan.strategy)
        subject = cls(collector_key=collector_key, qi=qi_values[i], confidential=conf_values[i],
                      rng=subject_rng.fork(str(i)), caches=caches, retry_interval=config.retry_interval,
                      news=news, min_k=min(MIN_K, config.k))
        if plan is not None:
            subject.configure(dict(plan.params))  # type: ignore[attr-defined]
        node_id = subject.sid if subject.sid not in seen else f"{subject.sid}-{i}"
        seen.add(node_id)
        subjects.append(subject)
        node_ids.append(node_id)
    return subjects, node_ids


def distinct_receipts(subjects: Iterable[SubjectNode]) -> list[tuple[str, tuple[bytes, bytes]]]:
    """The subjects' receipts (`SubjectNode.roster_receipt`), one per distinct statement envelope, each with the
    sid of a subject holding it: what an auditor needs of them (an honest round: one)."""
    kept: dict[bytes, tuple[str, tuple[bytes, bytes]]] = {}
    for subject in subjects:
        receipt = subject.roster_receipt()
        if receipt is not None and receipt[1] not in kept:
            kept[receipt[1]] = (subject.sid, receipt)
    return list(kept.values())
