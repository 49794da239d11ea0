"""The subject's checks on a release (SPEC section 10), on hand-made releases."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from coutil.protocol import merkle
from coutil.protocol.messages import Release, RoundParams
from coutil.protocol.subject_audit import SharedCaches, audit_release

PARAMS = RoundParams(("a", "b"), ("c",), 2, "mdav", 0.0, 1.0, 1.0, bytes(32), 0, 200, 0.05)
ROUND, COLLECTOR = bytes(16), bytes(32)


def _release(rows: list[list[float]], sizes: tuple[int, ...], columns: int = 3) -> Release:
    matrix = np.asarray(rows, dtype="<f8").reshape(-1, columns)
    return Release(ROUND, COLLECTOR, ("a", "b", "c")[:columns], tuple(range(len(sizes))), sizes,
                   matrix.tobytes(), merkle.rows_root(matrix.tobytes(), columns), bytes(32))


GOOD = [[1, 1, 10], [1, 1, 11], [5, 5, 20], [5, 5, 21], [5, 5, 22]]


def _audit(release: Release, confidential: float = 11.0, group: int = 0, params: RoundParams = PARAMS) -> object:
    digest = bytes([len(release.rows) % 256]) * 32
    return audit_release(release, digest, qi=(1.2, 0.9), confidential=(confidential,), group=group,
                         params=params, caches=SharedCaches())


def test_an_honest_release_is_accepted() -> None:
    verdict = _audit(_release(GOOD, (2, 3)))
    assert verdict.accept and verdict.reason == "ok" and verdict.included and verdict.k_anonymous  # type: ignore[attr-defined]
    assert len(verdict.variances) == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize(("rows", "sizes", "mine", "reason"), [
    (GOOD, (1, 4), 10.0, "not_k_anonymous"),  # a group below k
    ([[1, 1, 10], [1, 2, 11], [5, 5, 20], [5, 5, 21], [5, 5, 22]], (2, 3), 11.0, "not_k_anonymous"),  # 2 QI vectors
    ([[1, 1, 10], [1, 1, 12], [5, 5, 11], [5, 5, 21], [5, 5, 22]], (2, 3), 11.0, "not_included"),  # mine elsewhere
])
def test_bad_releases_are_complaints(rows: list[list[float]], sizes: tuple[int, ...], mine: float,
                                     reason: str) -> None:
    verdict = _audit(_release(rows, sizes), confidential=mine)
    assert not verdict.accept and verdict.reason == reason  # type: ignore[attr-defined]


def test_malformed_releases_are_complaints_not_crashes() -> None:
    two_columns = _release([[1, 1], [1, 1]], (2,), columns=2)
    assert _audit(two_columns).reason == "malformed_release"  # type: ignore[attr-defined]
    wrong_sizes = _release(GOOD, (2, 2))
    assert _audit(wrong_sizes).reason == "malformed_release"  # type: ignore[attr-defined]
    ragged = Release(ROUND, COLLECTOR, ("a", "b", "c"), (0,), (1,), b"\x00" * 20, bytes(32), bytes(32))
    assert _audit(ragged).reason == "malformed_release"  # type: ignore[attr-defined]


def test_a_release_whose_rows_root_does_not_match_its_rows_is_a_complaint() -> None:
    """Protocol v2: the rows root is recomputed from the rows (SPEC §8.3); one row changed is caught."""
    good = _release(GOOD, (2, 3))
    assert _audit(good).reason == "ok"  # type: ignore[attr-defined]
    other = _release([[1, 1, 10], [1, 1, 11], [5, 5, 20], [5, 5, 21], [5, 5, 23]], (2, 3))
    forged = dataclasses.replace(other, rows_root=good.rows_root)
    assert _audit(forged).reason == "rows_root_mismatch"  # type: ignore[attr-defined]


def test_distance_below_the_promise_is_a_complaint() -> None:
    strict = RoundParams(("a", "b"), ("c",), 2, "mdav", 0.0, 1.0, 1.0, bytes(32), 4, 200, 0.05)
    verdict = _audit(_release(GOOD, (2, 3)), params=strict)
    assert verdict.reason == "distance_below_promise" and verdict.permutation_distance < 4  # type: ignore[attr-defined]


def test_batched_audits_equal_audits_one_at_a_time() -> None:
    """Subjects of one process register their records and get d and v from one batch: the very
    values each would have computed alone (on a tie-heavy release, and for a record never expected)."""
    rng = np.random.default_rng(11)
    n_groups, size = 40, 3
    qi = np.repeat(np.round(rng.normal(size=(n_groups, 2)), 1), size, axis=0)
    conf = np.round(rng.normal(size=(n_groups * size, 1)) * 3)  # many ties
    release = _release(np.hstack([qi, conf]).tolist(), (size,) * n_groups)
    records = [(float(qi[i, 0]) + 0.05, float(qi[i, 1]), float(conf[i, 0])) for i in range(0, n_groups * size, 7)]
    digest = bytes(range(32))
    shared = SharedCaches()
    for record in records:
        shared.expect(record)
    for i, record in enumerate(records):
        group = (i * 7) // size
        alone = audit_release(release, digest, qi=record[:2], confidential=record[2:], group=group,
                              params=PARAMS, caches=SharedCaches())
        batched = audit_release(release, digest, qi=record[:2], confidential=record[2:], group=group,
                                params=PARAMS, caches=shared)
        assert batched == alone
    stranger = audit_release(release, digest, qi=(9.0, -9.0), confidential=(1.0,), group=0, params=PARAMS,
                             caches=shared)
    assert stranger == audit_release(release, digest, qi=(9.0, -9.0), confidential=(1.0,), group=0,
                                     params=PARAMS, caches=SharedCaches())


def test_the_group_shape_checked_against_the_roster_is_computed_once_per_release() -> None:
    """`SharedCaches.group_shape`: the subjects of one process scan the release's group ids once
    (at 10^5 subjects, once per subject was 50 s of a worker's event loop)."""
    release = _release(GOOD, (2, 3))
    caches, digest = SharedCaches(), bytes(range(32))
    shape = caches.group_shape(release, digest)
    assert (shape.rows, shape.distinct, shape.max_group) == (5, True, 1)
    assert caches.group_shape(release, digest) is shape
    # The roster the subject saw: 5 subjects in 2 groups fits; fewer subjects or groups does not.
    assert shape.fits(5, 2) and not shape.fits(4, 2) and not shape.fits(5, 1)
    twice = dataclasses.replace(release, group_ids=(1, 1))
    assert not caches.group_shape(twice, bytes(32)).fits(5, 2)
    empty = dataclasses.replace(release, group_ids=(), group_sizes=())
    assert caches.group_shape(empty, bytes([1]) * 32).fits(0, 0)
