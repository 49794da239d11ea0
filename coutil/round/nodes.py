"""Building a round's nodes: the collector and one subject per record, all keys derived from one seed.

Shared by every driver: the in-memory bus, the MQTT host and its worker processes build the very
same nodes (a subject's keys depend only on the seed and her row, so any process can build any
subject).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from coutil.protocol import crypto
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.node import SeededRandom, SystemRandom
from coutil.protocol.retry import NewsClock
from coutil.protocol.subject import SubjectNode
from coutil.protocol.subject_audit import SharedCaches
from coutil.sdc.dataset import Dataset


@dataclass
class RoundNodes:
    """One collector and one subject node per record."""

    collector: CollectorNode
    #: In dataset order.
    subjects: list[SubjectNode]
    #: Node ids in dataset order (the subject's sid, suffixed when two sids collide).
    node_ids: list[str]


def build_round_nodes(data: Dataset, config: RoundConfig, *, seed: int, fresh_round: bool = False) -> RoundNodes:
    """The nodes of one round over ``data``.

    Every key derives from ``seed``. ``fresh_round`` draws the collector's key and the round id from
    the operating system instead: a real broker keeps the retained announce and bulletins of an
    earlier round, which a seeded collector would have signed with the very same key.
    """
    # One decode cache for every node of the process: each message is verified once, not once per receiver.
    caches = SharedCaches()
    collector = build_collector(config, seed=seed, fresh_round=fresh_round, caches=caches)
    subjects, node_ids = build_subject_nodes(data, config, collector.public_key, seed=seed, rows=range(data.n),
                                             caches=caches)
    return RoundNodes(collector, subjects, node_ids)


def build_collector(config: RoundConfig, *, seed: int, fresh_round: bool = False,
                    caches: SharedCaches | None = None) -> CollectorNode:
    """The round's collector (see `build_round_nodes` for ``seed`` and ``fresh_round``)."""
    root = SeededRandom(seed)
    collector_rng = root.fork("collector")
    if fresh_round:
        identity = crypto.SigningKey.generate(SystemRandom())
        round_id = SystemRandom().bytes(16)
    else:
        identity = crypto.SigningKey.generate(collector_rng.fork("identity"))
        round_id = root.fork("round").bytes(16)
    return CollectorNode(config, identity=identity, rng=collector_rng, round_id=round_id,
                         decode_cache=None if caches is None else caches.decode_cache)


def build_subject_nodes(
    data: Dataset, config: RoundConfig, collector_key: bytes, *, seed: int, rows: Iterable[int],
    caches: SharedCaches | None = None,
) -> tuple[list[SubjectNode], list[str]]:
    """Subject nodes for the given rows of ``data``, with their node ids (the sid, suffixed when two
    collide). A row's keys depend only on ``seed`` and the row number, so a worker process hosting
    a slice of them gets the very subjects a single process would."""
    caches = caches if caches is not None else SharedCaches()
    # One news clock: the subjects of one process wait in the same queues (see `coutil.protocol.retry`).
    news = NewsClock()
    qi_values = data.select(list(config.qi)).values
    conf_values = data.select(list(config.confidential)).values
    subject_rng = SeededRandom(seed).fork("subjects")
    subjects: list[SubjectNode] = []
    node_ids: list[str] = []
    seen: set[str] = set()
    for i in rows:
        subject = SubjectNode(collector_key=collector_key, qi=qi_values[i], confidential=conf_values[i],
                              rng=subject_rng.fork(str(i)), caches=caches, retry_interval=config.retry_interval,
                              news=news)
        node_id = subject.sid if subject.sid not in seen else f"{subject.sid}-{i}"
        seen.add(node_id)
        subjects.append(subject)
        node_ids.append(node_id)
    return subjects, node_ids
