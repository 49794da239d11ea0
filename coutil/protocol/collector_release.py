"""What the collector releases and reports (sans-IO, no state): the release's rows, the groups of a
roster, and the round's outcome as the collector saw it.

`CollectorNode` decides *when* (the groups it opened, the verdicts it accepted); these functions say
*what*: the rows are the groups' centroids beside their records, sorted within each group so that no
order information survives, never a group below k (protocol/SPEC.md §4 release); the groups are
exactly those centralized MDAV forms (or SafePub's announced classes, the large ones cut).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from coutil.protocol import topics
from coutil.protocol.collector_groups import Record
from coutil.protocol.config import RoundConfig
from coutil.protocol.messages import Verdict
from coutil.protocol.node import Rejection, RejectionLog
from coutil.sdc.generalization import safepub_groups
from coutil.sdc.mdav import mdav


@dataclass
class RoundOutcome:
    """What a round produced (the collector's view)."""

    completed: bool
    phase: str
    columns: tuple[str, ...]
    rows: np.ndarray
    group_sizes: tuple[int, ...]
    verdicts: list[dict[str, object]]
    excluded: list[dict[str, object]]
    manifest: dict[str, str]
    phase_times: dict[str, float]
    registered: int
    round_id: str = ""
    rejections: dict[str, int] = field(default_factory=dict)
    #: The label of each released group, in release order (beside ``group_sizes``).
    group_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ReleaseRows:
    """The rows of a release, group after group, with each group's label and size."""

    matrix: np.ndarray
    group_ids: tuple[int, ...]
    sizes: tuple[int, ...]


#: Domain separation of the SafePub cut order (SPEC §9.1).
CUT_ORDER_TAG = b"coutil/v2 safepub cut"


def safepub_cut_order(keys: Sequence[bytes], roster_root: bytes) -> np.ndarray:
    """The order in which SafePub cuts its large classes (SPEC §9.1): roster entries (``keys`` in roster order) by
    SHA-256(tag || roster root || key). Not the sorted keys themselves: a collector picks the keys of identities of
    its own, and Sybils whose keys were ground to sort beside a victim's made every part holding her theirs (found by
    an attacker of the cut). The root depends on every registration, so each attempt at another order re-draws all
    of it: a part of Sybils around her then takes about (class size / Sybils)^(part - 1) attempts."""
    digests = [hashlib.sha256(CUT_ORDER_TAG + roster_root + key).digest() for key in keys]
    return np.array(sorted(range(len(keys)), key=digests.__getitem__), dtype=np.int64)


def form_groups(qi: np.ndarray, config: RoundConfig, keys: Sequence[bytes],
                roster_root: bytes) -> tuple[np.ndarray, np.ndarray, int]:
    """(group label of every roster entry, released QI values of every group, number of groups).

    MDAV: its groups and centroids, exactly as centralized MDAV. SafePub: the classes of the
    announced bins, released with the bins' midpoints (data-independent, as the theorem requires), a class of more
    than 2k - 1 cut into groups of at most that many in the cut order of the roster (``keys`` in roster order, its
    ``roster_root``: `safepub_cut_order`, `safepub_groups`)."""
    if config.grouping == "safepub":
        classes = safepub_groups(qi, config.safepub_bins, config.k, safepub_cut_order(keys, roster_root))
        return classes.labels, classes.midpoints, classes.n_classes
    grouping = mdav(qi, config.k)
    return grouping.groups, np.asarray(grouping.centroids, dtype=np.float64), grouping.n_groups


def members_by_label(labels: np.ndarray) -> dict[int, list[int]]:
    """Roster indices of every group, by label, in roster order (labels in order of first member)."""
    members_of: dict[int, list[int]] = {}
    for index, label in enumerate(labels.tolist()):
        members_of.setdefault(int(label), []).append(index)
    return members_of


def release_rows(records: Mapping[int, list[Record]], centroid_of: Callable[[int], np.ndarray], k: int,
                 n_columns: int) -> ReleaseRows:
    """Every group with at least ``k`` records, by label: its centroid beside each of its records."""
    ids: list[int] = []
    sizes: list[int] = []
    blocks: list[np.ndarray] = []
    for label in sorted(records):
        group_records = records[label]
        if len(group_records) < k:
            continue  # never a group below k (SPEC §4 release)
        conf = np.array(sorted(group_records), dtype=np.float64)  # sorted: no order information survives
        blocks.append(np.hstack([np.tile(centroid_of(label), (conf.shape[0], 1)), conf]))
        ids.append(label)
        sizes.append(conf.shape[0])
    matrix = np.vstack(blocks) if blocks else np.zeros((0, n_columns))
    return ReleaseRows(matrix, tuple(ids), tuple(sizes))


def verdict_rows(verdicts: Mapping[bytes, Verdict],
                 binds_release: Callable[[Verdict], bool]) -> list[dict[str, object]]:
    """One row per verdict: an accept bound to another release or roster counts as ``other_release``."""
    return [
        {"sid": topics.sid_of(key), "accept": v.accept and binds_release(v),
         "reason": v.reason if not v.accept or binds_release(v) else "other_release"}
        for key, v in sorted(verdicts.items())
    ]


def excluded_rows(excluded: Mapping[bytes, str]) -> list[dict[str, object]]:
    return [{"sid": topics.sid_of(k), "reason": r} for k, r in sorted(excluded.items())]


def rejection_counts(rejections: Iterable[Rejection]) -> dict[str, int]:
    if isinstance(rejections, RejectionLog):
        return dict(rejections.counts())  # every one, not only those kept one by one
    counts: dict[str, int] = {}
    for rejection in rejections:
        counts[rejection.reason] = counts.get(rejection.reason, 0) + 1
    return counts
