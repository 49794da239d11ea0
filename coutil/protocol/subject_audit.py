"""The protocol's glue around the subject's audit (`coutil.audit.subject`): decoding the Release
message, and the caches that make the audit cheap in simulations.

The checks and their maths (protocol/SPEC.md section 10) live in `coutil.audit.subject`, the very
function ``coutil audit --record-values`` runs, so that anyone can recompute a subject's verdict
from the files of a round. The random records are seeded from the *release digest*
(`coutil.audit.subject.release_digest`: round id, columns, group sizes and rows), not from the
digest of the signed message, whose signature and Merkle root the round's files do not hold; the
payload digest only keys the caches.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from coutil.audit.subject import (
    MALFORMED,
    AuditParams,
    ReleaseView,
    SubjectAudit,
    distances_and_variances,
    judge,
    release_digest,
)
from coutil.audit.subject import (
    build_release_view as build_view,
)
from coutil.protocol import codec, merkle
from coutil.protocol.crypto import SigningKey
from coutil.protocol.messages import Message, Release, RoundParams

#: The subject's verdict (the name the protocol modules use).
SubjectVerdict = SubjectAudit

__all__ = ["ReleaseView", "SharedCaches", "SubjectVerdict", "audit_params", "audit_release",
           "build_release_view", "release_matrix"]


@dataclasses.dataclass(frozen=True)
class GroupShape:
    """A release's groups as a subject checks them against the roster she saw (SPEC §10)."""

    #: Rows the release's groups account for.
    rows: int
    #: No group number appears twice.
    distinct: bool
    #: The largest group number (-1 without groups).
    max_group: int
    #: Group number -> its number of rows (the first, if a number repeats).
    sizes: Mapping[int, int]

    @classmethod
    def of(cls, release: Release) -> GroupShape:
        ids = release.group_ids
        sizes: dict[int, int] = {}
        for group, size in zip(ids, release.group_sizes, strict=False):
            sizes.setdefault(group, size)
        return cls(sum(release.group_sizes), len(sizes) == len(ids), max(ids, default=-1), sizes)

    def fits(self, roster_size: int, roster_groups: int) -> bool:
        """No more rows than subjects, group numbers distinct and below the roster's count."""
        return self.rows <= roster_size and self.distinct and self.max_group < roster_groups


class SharedCaches:
    """Memoizes pure functions of received bytes, shared by the subjects one process hosts: message
    decoding (`codec.DecodeCache`), the release's view (rank index and null distribution), and the
    hosted subjects' permutation distances and variances in it.

    A subject's d and v are a pure function of the release and her record. Computed one record at a
    time they cost about a millisecond each, nearly all of it fixed overhead; so the subjects of a
    process register their records (`expect`) and the first audit of a release computes everyone's
    at once (at 10^4 subjects: a fifth of a second instead of ten). The records never leave the
    process, and each subject still gets exactly what she would have computed alone.
    """

    def __init__(self, capacity: int = 4, decode_cache: codec.DecodeCache | None = None) -> None:
        self.decode_cache = decode_cache if decode_cache is not None else codec.DecodeCache()
        self._views: OrderedDict[bytes, ReleaseView] = OrderedDict()
        self._capacity = capacity
        self._expected: dict[tuple[float, ...], None] = {}
        #: release view key -> record -> (d, v)
        self._audits: dict[bytes, dict[tuple[float, ...], tuple[int, tuple[float, ...]]]] = {}
        #: payload digest -> the release rows' Merkle root (SPEC §8.3), computed once per release.
        self._rows_roots: OrderedDict[bytes, bytes] = OrderedDict()
        #: payload digest -> the release's `GroupShape`, computed once per release.
        self._shapes: OrderedDict[bytes, GroupShape] = OrderedDict()

    def expect(self, record: tuple[float, ...]) -> None:
        """A hosted subject's whole record (QIs then confidential values), audited in a batch."""
        self._expected[record] = None

    def distance_and_variances(self, view_key: bytes, view: ReleaseView,
                               record: tuple[float, ...]) -> tuple[int, tuple[float, ...]]:
        """Her permutation distance d in the release and the variances v at d."""
        batch = self._audits.get(view_key)
        if batch is None:
            width = view.rows.shape[1]
            records = [r for r in self._expected if len(r) == width]
            batch = dict(zip(records, distances_and_variances(view, records), strict=True)) if records else {}
            self._audits = {view_key: batch}  # one release at a time
        hit = batch.get(record)
        if hit is None:
            hit = distances_and_variances(view, [record])[0]
        return hit

    def rows_root(self, release: Release, digest: bytes) -> bytes:
        """The Merkle root of the release's rows, as a subject recomputes it (keyed by payload digest)."""
        root = self._rows_roots.get(digest)
        if root is None:
            root = self._rows_roots[digest] = merkle.rows_root(release.rows, len(release.columns))
            while len(self._rows_roots) > self._capacity:
                self._rows_roots.popitem(last=False)
        return root

    def group_shape(self, release: Release, digest: bytes) -> GroupShape:
        """What a subject checks of the release's groups against her roster (keyed by payload digest).

        Scanning the group ids costs about a millisecond at 20,000 groups: once per hosted subject,
        that was 50 s of one event-loop callback in a worker hosting 50,000 subjects of a 10^5 round,
        past the broker's keep-alive (the worker was disconnected and its subjects re-sent everything).
        """
        shape = self._shapes.get(digest)
        if shape is None:
            shape = self._shapes[digest] = GroupShape.of(release)
            while len(self._shapes) > self._capacity:
                self._shapes.popitem(last=False)
        return shape

    def decode(self, payload: bytes, limits: codec.Limits) -> codec.Decoded:
        return self.decode_cache.decode(payload, limits)

    def encode(self, message: Message, signing_key: SigningKey) -> bytes:
        """Sign ``message``; the envelope counts as verified for this process (`codec.DecodeCache.encode`)."""
        return self.decode_cache.encode(message, signing_key)

    @staticmethod
    def view_key(digest: bytes, random_records: int, n_qi: int) -> bytes:
        return digest + random_records.to_bytes(8, "big") + n_qi.to_bytes(4, "big")

    def release_view(self, release: Release, digest: bytes, random_records: int, n_qi: int) -> ReleaseView:
        """The view of a release; ``digest`` (of the message payload) only keys the cache."""
        key = self.view_key(digest, random_records, n_qi)
        hit = self._views.get(key)
        if hit is not None:
            return hit
        view = build_release_view(release, random_records, n_qi)
        self._views[key] = view
        while len(self._views) > self._capacity:
            self._views.popitem(last=False)
        return view


def release_matrix(release: Release) -> NDArray[np.float64]:
    m = len(release.columns)
    rows = np.frombuffer(release.rows, dtype="<f8")
    if m == 0 or rows.size % m:
        raise ValueError("release rows do not fill the columns")
    return rows.reshape(-1, m).astype(np.float64)


def build_release_view(release: Release, random_records: int, n_qi: int) -> ReleaseView:
    """`coutil.audit.subject.build_release_view` of a decoded Release message (ValueError if malformed)."""
    rows = release_matrix(release)
    digest = release_digest(release.round_id, release.columns, release.group_sizes, rows)
    return build_view(rows, group_ids=release.group_ids, group_sizes=release.group_sizes, n_qi=n_qi,
                      digest=digest, random_records=random_records)


def audit_params(params: RoundParams) -> AuditParams:
    """The audit thresholds of a round's announced parameters."""
    return AuditParams(params.k, params.min_permutation_distance, params.random_records, params.alpha)


def audit_release(
    release: Release,
    digest: bytes,
    *,
    qi: tuple[float, ...],
    confidential: tuple[float, ...],
    group: int,
    params: RoundParams,
    caches: SharedCaches,
) -> SubjectVerdict:
    """The subject's audit of a release (`coutil.audit.subject.judge`); never raises on a malformed
    release (it is a complaint). ``digest``: the payload digest of the message, a cache key."""
    n_qi = len(qi)
    try:
        view = caches.release_view(release, digest, params.random_records, n_qi)
    except (ValueError, KeyError):
        return MALFORMED
    if view.rows.shape[1] != n_qi + len(confidential):
        return MALFORMED
    if caches.rows_root(release, digest) != release.rows_root:
        # The rows are not the ones the collector committed to (SPEC §8.3): a forged or split release.
        return dataclasses.replace(MALFORMED, reason="rows_root_mismatch")
    key = SharedCaches.view_key(digest, params.random_records, n_qi)
    measured = caches.distance_and_variances(key, view, qi + confidential)
    return judge(view, qi=qi, confidential=confidential, group=group, params=audit_params(params),
                 measured=measured)
