"""What a subject checks on the release, and the caches that make it cheap in simulations.

The checks (protocol/SPEC.md, phase "audit"): the release is signed by the collector (done by the
codec); her confidential record is among her group's rows; every group has at least k rows with one
QI vector; her (d,v,f)-permuted privacy: the permutation distance d of her whole record (QIs then
confidential values) in the release (coutil.audit), and whether a match at distance d is plausible
as a random match. The null distribution of random-record distances is a function of the release
alone: its random records are drawn with a seed derived from the release digest, so anyone can
recompute it and a simulation computes it once per release.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from coutil.protocol import codec, merkle
from coutil.protocol.messages import Release, RoundParams


@dataclass(frozen=True)
class ReleaseView:
    """A decoded release, with its rank index, random-record null distribution and k-anonymity."""

    rows: NDArray[np.float64]
    group_slices: dict[int, slice]
    index: object  # coutil.audit.ranks.RankIndex
    null_distances: NDArray[np.int64]  # sorted ascending
    #: Smallest group (0 for an empty release).
    min_group_size: int
    #: Every group's rows share one QI vector (the first ``n_qi`` columns).
    single_qi_vector: bool
    #: The rows' Merkle root as SPEC §8.3 defines it (compared with the release's ``rows_root``).
    rows_root: bytes = b""


@dataclass(frozen=True)
class SubjectVerdict:
    """The subject's own audit result. Only accept and reason go on the wire (protocol v2): d, the
    plausibility and v stay on her device."""

    accept: bool
    reason: str
    included: bool
    k_anonymous: bool
    permutation_distance: int
    p_value: float
    plausible: bool
    #: v: per attribute (QIs then confidential), the population variance of the release values within
    #: rank distance d of hers (paper 002, Definition 1, condition 2). Kept local: never sent or logged.
    variances: tuple[float, ...] = ()


class SharedCaches:
    """Memoizes pure functions of received bytes, shared by the subjects one process hosts: message
    decoding (`codec.DecodeCache`), the release's rank index and null distribution, and the hosted
    subjects' permutation distances and variances in it.

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

    def expect(self, record: tuple[float, ...]) -> None:
        """A hosted subject's whole record (QIs then confidential values), audited in a batch."""
        self._expected[record] = None

    def distance_and_variances(self, view_key: bytes, view: ReleaseView,
                               record: tuple[float, ...]) -> tuple[int, tuple[float, ...]]:
        """Her permutation distance d in the release and the variances v at d (see `audit_release`)."""
        batch = self._audits.get(view_key)
        if batch is None:
            width = view.rows.shape[1]
            records = [r for r in self._expected if len(r) == width]
            batch = dict(zip(records, _distances_and_variances(view, records), strict=True)) if records else {}
            self._audits = {view_key: batch}  # one release at a time
        hit = batch.get(record)
        if hit is None:
            hit = _distances_and_variances(view, [record])[0]
        return hit

    def decode(self, payload: bytes, limits: codec.Limits) -> codec.Decoded:
        return self.decode_cache.decode(payload, limits)

    @staticmethod
    def view_key(digest: bytes, random_records: int, n_qi: int) -> bytes:
        return digest + random_records.to_bytes(8, "big") + n_qi.to_bytes(4, "big")

    def release_view(self, release: Release, digest: bytes, random_records: int, n_qi: int) -> ReleaseView:
        key = self.view_key(digest, random_records, n_qi)
        hit = self._views.get(key)
        if hit is not None:
            return hit
        view = build_release_view(release, digest, random_records, n_qi)
        self._views[key] = view
        while len(self._views) > self._capacity:
            self._views.popitem(last=False)
        return view


def _distances_and_variances(view: ReleaseView,
                             records: list[tuple[float, ...]]) -> list[tuple[int, tuple[float, ...]]]:
    """(d, v) of each record in the release: one vectorized query for all of them."""
    index = view.index
    matrix = np.asarray(records, dtype=np.float64).reshape(len(records), -1)
    lo, hi = index.star(matrix)  # type: ignore[attr-defined]
    distances = np.asarray(index.nearest(lo, hi, want_ties=False).distance, dtype=np.int64)  # type: ignore[attr-defined]
    variances = index.window_variance(lo, hi, distances)  # type: ignore[attr-defined]
    return [(int(d), tuple(float(v) for v in row)) for d, row in zip(distances, variances, strict=True)]


def release_matrix(release: Release) -> NDArray[np.float64]:
    m = len(release.columns)
    rows = np.frombuffer(release.rows, dtype="<f8")
    if m == 0 or rows.size % m:
        raise ValueError("release rows do not fill the columns")
    return rows.reshape(-1, m).astype(np.float64)


def build_release_view(release: Release, digest: bytes, random_records: int, n_qi: int) -> ReleaseView:
    from coutil.audit.ranks import RankIndex

    rows = release_matrix(release)
    slices: dict[int, slice] = {}
    start = 0
    for group, size in zip(release.group_ids, release.group_sizes, strict=True):
        slices[group] = slice(start, start + size)
        start += size
    if start != rows.shape[0] or n_qi >= rows.shape[1]:
        raise ValueError("release groups do not cover its rows, or too few columns")
    sizes = np.asarray(release.group_sizes, dtype=np.int64)
    first_row = np.repeat(np.cumsum(sizes) - sizes, sizes)
    single_qi_vector = bool(np.all(rows[:, :n_qi] == rows[first_row, :n_qi]))
    index = RankIndex.build(rows)
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    n, m = rows.shape
    if random_records > 0 and n > 0:
        picks = rng.integers(0, n, size=(random_records, m))
        randoms = rows[picks, np.arange(m)]
        lo, hi = index.star(randoms)
        null = np.sort(np.asarray(index.nearest(lo, hi, want_ties=False).distance, dtype=np.int64))
    else:
        null = np.zeros(0, dtype=np.int64)
    return ReleaseView(rows, slices, index, null, int(sizes.min()) if sizes.size else 0,
                       single_qi_vector, merkle.rows_root(release.rows, len(release.columns)))


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
    """The subject's audit of a release; never raises on a malformed release (it is a complaint).

    The plausibility test draws ``params.random_records`` random records and uses ``params.alpha``.
    """
    n_qi = len(qi)
    try:
        view = caches.release_view(release, digest, params.random_records, n_qi)
    except (ValueError, KeyError):
        return SubjectVerdict(False, "malformed_release", False, False, 0, 0.0, False)
    rows = view.rows
    if rows.shape[1] != n_qi + len(confidential):
        return SubjectVerdict(False, "malformed_release", False, False, 0, 0.0, False)
    if view.rows_root != release.rows_root:
        return SubjectVerdict(False, "rows_root_mismatch", False, False, 0, 0.0, False)
    k_anonymous = bool(release.group_sizes) and view.min_group_size >= params.k and view.single_qi_vector
    mine = view.group_slices.get(group)
    included = False
    if mine is not None:
        conf = np.asarray(confidential, dtype=np.float64)
        included = bool(np.any(np.all(rows[mine, n_qi:] == conf, axis=1)))
    key = SharedCaches.view_key(digest, params.random_records, n_qi)
    distance, variances = caches.distance_and_variances(key, view, qi + confidential)
    null = view.null_distances
    p_value = float(np.searchsorted(null, distance, side="right") / null.size) if null.size else 1.0
    plausible = p_value >= params.alpha
    if not included:
        reason = "not_included"
    elif not k_anonymous:
        reason = "not_k_anonymous"
    elif distance < params.min_permutation_distance:
        reason = "distance_below_promise"
    else:
        reason = "ok"
    return SubjectVerdict(reason == "ok", reason, included, k_anonymous, distance, p_value, plausible, variances)
