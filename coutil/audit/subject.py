"""A subject's audit of a release: the one function behind her in-round verdict and ``coutil audit
--record-values`` (protocol/SPEC.md section 10).

Her record x is her QIs followed by her confidential values; the release Y has the same columns,
in groups of consecutive rows (group numbers ``group_ids``, sizes ``group_sizes``). She checks:

- *included*: her confidential values are one of her group's rows;
- *k-anonymous*: every group has at least k rows and one QI vector (the first ``n_qi`` columns);
- her permutation distance d in Y (Algorithm 2 of paper 002, `coutil.audit.ranks`) is at least the
  promised ``min_permutation_distance``;
- v: per attribute, the population variance of the release values within rank distance d of hers
  (Definition 1, condition 2); kept local, never sent;
- *centroid is her own QIs* (kept local): her group's released QI centroid equals her QIs, i.e. every
  other member registered exactly her QIs. In continuous data that is the sign of a group filled with
  identities that copied her QIs (a collector's Sybils isolating her, SPEC §3); honest duplicates in
  discrete data show it too, so it is a warning she may print, never a complaint;
- *plausible*: a match at distance d is plausible as a chance match. ``random_records`` random
  records (one value drawn independently from each release column) are drawn with numpy's PCG64
  generator seeded with the first 8 bytes, big-endian, of the *release digest* (`release_digest`),
  so anyone holding the release can recompute them; p is the Monte Carlo p-value
  ``(1 + #{random records at distance <= d}) / (1 + random_records)`` and the match is plausible
  when p >= alpha.

The p-value convention: ``(1 + k) / (1 + N)`` (Davison & Hinkley 1997, eq. 4.11; Phipson & Smyth
2010) counts her own record as one more draw from the null. Unlike the plain fraction k / N it is
never 0 (N samples cannot show a probability of 0, and a p of 0 would make "not plausible" hold at
every alpha), and ``P(p <= alpha) <= alpha`` holds exactly under the null. With N = 0 it is 1: no
evidence, plausible. The random records are always sampled, even when the n^m possible ones are
fewer than N, so that one rule, not a size threshold, decides.

The release digest is SHA-256 over what every party (and the files of a round: release.csv and
manifest.json) holds: the round id, the column names, the group sizes and the rows (little-endian
float64, -0.0 written as 0.0 since a CSV does not keep the sign of zero). See `release_digest`.

`audit_subject` is the function; `build_release_view` and `judge` are its two halves, so that a
process hosting many subjects (`coutil.protocol.subject_audit`) builds the view of a release once
and computes the distances of all its subjects in one batch, then judges each with `judge`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from coutil.audit.ranks import RankIndex

#: Domain separation of `release_digest` (version 1 of its encoding).
DIGEST_TAG = b"coutil/release-digest/v1\x00"
#: Reasons of a verdict, in the order they are checked (SPEC section 10).
REASONS = ("ok", "malformed_release", "not_included", "not_k_anonymous", "distance_below_promise")


@dataclass(frozen=True)
class AuditParams:
    """The round's audit thresholds (announced in the round's parameters, kept in manifest.json)."""

    #: Least rows of every group.
    k: int
    #: The collector's promise: her permutation distance is at least this.
    min_permutation_distance: int
    #: Random records of the plausibility test (0: no test, p = 1).
    random_records: int
    #: Significance level of the plausibility test.
    alpha: float


@dataclass(frozen=True)
class SubjectAudit:
    """A subject's verdict on a release. Only accept, reason, included, d and plausible go on the wire."""

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
    #: Her group's QI centroid equals her own QIs (module docstring). Kept local: never sent or logged.
    centroid_is_own_qi: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``coutil audit --record-values --json``, key ``verdict``)."""
        out = asdict(self)
        out["variances"] = list(self.variances)
        return out


MALFORMED = SubjectAudit(False, "malformed_release", False, False, 0, 0.0, False)


@dataclass(frozen=True)
class ReleaseView:
    """A release with its rank index, random-record null distribution and k-anonymity (see `judge`)."""

    rows: NDArray[np.float64]
    n_qi: int
    group_slices: dict[int, slice]
    #: None for an empty release (every group suppressed): nobody is in it, there is nothing to rank.
    index: RankIndex | None
    #: Permutation distances of the random records, sorted ascending.
    null_distances: NDArray[np.int64]
    #: Smallest group (0 for an empty release).
    min_group_size: int
    #: Every group's rows share one QI vector (the first ``n_qi`` columns).
    single_qi_vector: bool
    #: `release_digest` of the release, whose first 8 bytes seed the random records.
    digest: bytes


def release_digest(
    round_id: bytes, columns: Sequence[str], group_sizes: Sequence[int], rows: ArrayLike
) -> bytes:
    """SHA-256 of the release as every party holds it: round id, column names, group sizes, rows.

    Encoding (big-endian lengths): `DIGEST_TAG`, u32 len + round id, u32 column count, per column
    u32 len + UTF-8 name, u32 group count, u64 per group size, u64 rows, u64 columns, then the rows
    as little-endian float64 in row-major order with -0.0 replaced by 0.0.
    """
    matrix = np.asarray(rows, dtype=np.float64).reshape(-1, len(columns)) if len(columns) else \
        np.zeros((0, 0), dtype=np.float64)
    h = hashlib.sha256(DIGEST_TAG)
    h.update(len(round_id).to_bytes(4, "big") + bytes(round_id))
    h.update(len(columns).to_bytes(4, "big"))
    for name in columns:
        encoded = name.encode("utf-8")
        h.update(len(encoded).to_bytes(4, "big") + encoded)
    h.update(len(group_sizes).to_bytes(4, "big"))
    for size in group_sizes:
        h.update(int(size).to_bytes(8, "big"))
    h.update(matrix.shape[0].to_bytes(8, "big") + matrix.shape[1].to_bytes(8, "big"))
    h.update(np.ascontiguousarray(matrix + 0.0, dtype="<f8").tobytes())  # + 0.0 turns -0.0 into 0.0
    return h.digest()


def seed_of(digest: bytes) -> int:
    """The random records' seed: the digest's first 8 bytes, big-endian."""
    return int.from_bytes(digest[:8], "big")


def build_release_view(
    rows: ArrayLike,
    *,
    group_ids: Sequence[int],
    group_sizes: Sequence[int],
    n_qi: int,
    digest: bytes,
    random_records: int,
) -> ReleaseView:
    """Index the release and draw its random records; ValueError when the groups do not cover the
    rows, a group number repeats, or there is no column beyond the QIs."""
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.ndim != 2:
        raise ValueError("the release must be a matrix")
    if len(group_ids) != len(group_sizes) or len(set(group_ids)) != len(group_ids):
        raise ValueError("one distinct group number per group size is needed")
    if any(int(size) < 0 for size in group_sizes):
        raise ValueError("negative group size")
    slices: dict[int, slice] = {}
    start = 0
    for group, size in zip(group_ids, group_sizes, strict=True):
        slices[int(group)] = slice(start, start + int(size))
        start += int(size)
    if start != matrix.shape[0] or not 0 <= n_qi < matrix.shape[1]:
        raise ValueError("release groups do not cover its rows, or too few columns")
    sizes = np.asarray(group_sizes, dtype=np.int64)
    first_row = np.repeat(np.cumsum(sizes) - sizes, sizes)
    single_qi_vector = bool(np.all(matrix[:, :n_qi] == matrix[first_row, :n_qi]))
    n, m = matrix.shape
    index = RankIndex.build(matrix) if n else None
    if random_records > 0 and index is not None:
        rng = np.random.default_rng(seed_of(digest))
        picks = rng.integers(0, n, size=(random_records, m))
        randoms = matrix[picks, np.arange(m)]
        lo, hi = index.star(randoms)
        null = np.sort(np.asarray(index.nearest(lo, hi, want_ties=False).distance, dtype=np.int64))
    else:
        null = np.zeros(0, dtype=np.int64)
    return ReleaseView(matrix, n_qi, slices, index, null, int(sizes.min()) if sizes.size else 0,
                       single_qi_vector, digest)


def distances_and_variances(view: ReleaseView,
                            records: Sequence[Sequence[float]]) -> list[tuple[int, tuple[float, ...]]]:
    """(d, v) of each whole record (QIs then confidential values) in the release, in one query; (0, ())
    each in an empty release, where `judge` says `not_included` before looking at d."""
    index = view.index
    if index is None:
        return [(0, ()) for _ in records]
    matrix = np.asarray(records, dtype=np.float64).reshape(len(records), -1)
    lo, hi = index.star(matrix)
    distances = np.asarray(index.nearest(lo, hi, want_ties=False).distance, dtype=np.int64)
    variances = index.window_variance(lo, hi, distances)
    return [(int(d), tuple(float(v) for v in row)) for d, row in zip(distances, variances, strict=True)]


def p_value(null_distances: NDArray[np.int64], distance: int) -> float:
    """``(1 + #{null <= distance}) / (1 + N)`` over the sorted null distances (module docstring)."""
    at_or_below = int(np.searchsorted(null_distances, distance, side="right"))
    return (1 + at_or_below) / (1 + int(null_distances.size))


def judge(
    view: ReleaseView,
    *,
    qi: Sequence[float],
    confidential: Sequence[float],
    group: int | None,
    params: AuditParams,
    measured: tuple[int, tuple[float, ...]] | None = None,
) -> SubjectAudit:
    """Her verdict on a release view. ``measured``: her (d, v) when already computed in a batch by
    `distances_and_variances` (the same numbers it would compute here). ``group`` None: she has no
    group in this release (never included)."""
    rows = view.rows
    if len(qi) != view.n_qi or rows.shape[1] != len(qi) + len(confidential):
        return MALFORMED
    k_anonymous = bool(view.group_slices) and view.min_group_size >= params.k and view.single_qi_vector
    mine = None if group is None else view.group_slices.get(group)
    included = centroid_is_own_qi = False
    if mine is not None:
        conf = np.asarray(confidential, dtype=np.float64)
        included = bool(np.any(np.all(rows[mine, view.n_qi:] == conf, axis=1)))
        # A mean of k equal values is that value up to rounding.
        centroid_is_own_qi = mine.stop > mine.start and bool(
            np.allclose(rows[mine.start, :view.n_qi], np.asarray(qi, dtype=np.float64), rtol=1e-12, atol=1e-12))
    if measured is None:
        measured = distances_and_variances(view, [tuple(qi) + tuple(confidential)])[0]
    distance, variances = measured
    p = p_value(view.null_distances, distance)
    if not included:
        reason = "not_included"
    elif not k_anonymous:
        reason = "not_k_anonymous"
    elif distance < params.min_permutation_distance:
        reason = "distance_below_promise"
    else:
        reason = "ok"
    return SubjectAudit(reason == "ok", reason, included, k_anonymous, distance, p, p >= params.alpha,
                        variances, centroid_is_own_qi)


def audit_subject(
    rows: ArrayLike,
    *,
    round_id: bytes,
    columns: Sequence[str],
    group_ids: Sequence[int],
    group_sizes: Sequence[int],
    qi: Sequence[float],
    confidential: Sequence[float],
    group: int | None,
    params: AuditParams,
) -> SubjectAudit:
    """A subject's audit of the release ``rows`` (QI columns then confidential ones, ``columns``
    names them) of round ``round_id``: the verdict she sends in the round, recomputed by ``coutil
    audit --record-values``. A release whose groups do not cover its rows is ``malformed_release``."""
    matrix = np.asarray(rows, dtype=np.float64)
    if matrix.size == 0:  # no rows: every group suppressed (a list of no rows has no second dimension)
        matrix = matrix.reshape(0, len(columns))
    if matrix.ndim != 2 or matrix.shape[1] != len(columns):
        return MALFORMED
    digest = release_digest(round_id, columns, group_sizes, matrix)
    try:
        view = build_release_view(matrix, group_ids=group_ids, group_sizes=group_sizes, n_qi=len(qi),
                                  digest=digest, random_records=params.random_records)
    except ValueError:
        return MALFORMED
    return judge(view, qi=qi, confidential=confidential, group=group, params=params)


def manifest_fields(
    round_id: bytes, columns: Sequence[str], group_ids: Sequence[int], group_sizes: Sequence[int], rows: ArrayLike
) -> dict[str, Any]:
    """What a round's manifest.json adds so that ``coutil audit --manifest`` finds every subject's
    group and checks that release.csv is the release: ``group_ids`` (the groups in release order)
    and ``release_digest`` (hex)."""
    return {
        "group_ids": [int(g) for g in group_ids],
        "release_digest": release_digest(round_id, columns, group_sizes, rows).hex(),
    }
