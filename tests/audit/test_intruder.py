"""Tests of the maximum-knowledge intruder (coutil.audit.intruder) against Tables 5 and 6 of
Domingo-Ferrer & Muralidhar and against direct computations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from coutil.audit import intruder
from coutil.audit.intruder import (
    RandomRecordDistribution,
    empirical_p_values,
    hellinger_distance,
    link_records,
    maximum_knowledge_attack,
)
from coutil.errors import InputError

# Table 5: original record -> records of Z at shortest permutation distance, and that distance.
TABLE5 = {
    1: ([1, 7], 4), 2: ([4], 3), 3: ([10], 3), 4: ([4], 4), 5: ([5], 2),
    6: ([11], 2), 7: ([7], 2), 8: ([17], 5), 9: ([7, 9], 3), 10: ([15], 3),
    11: ([2, 6], 4), 12: ([12], 5), 13: ([20], 3), 14: ([14], 3), 15: ([10], 3),
    16: ([19], 5), 17: ([13], 2), 18: ([12], 5), 19: ([13, 19], 4), 20: ([20], 3),
}  # fmt: skip
# Table 6: distance -> (frequency for the 20 originals, frequency for the 8000 random records).
TABLE6 = {
    0: (0.0000, 0.0025), 1: (0.0000, 0.0586), 2: (0.2000, 0.1899), 3: (0.4000, 0.3014),
    4: (0.2000, 0.2595), 5: (0.2000, 0.1288), 6: (0.0000, 0.0428), 7: (0.0000, 0.0143),
    8: (0.0000, 0.0024), 9: (0.0000, 0.0000), 10: (0.0000, 0.0000),
}  # fmt: skip


def _read(folder: Path, name: str) -> NDArray[np.float64]:
    return np.loadtxt(folder / name, delimiter=",", skiprows=1)


@pytest.fixture
def example(running_example: Path) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    return _read(running_example, "X.csv"), _read(running_example, "Y.csv"), _read(running_example, "Z.csv")


def test_reverse_mapping_and_table5(example: tuple[NDArray[np.float64], ...]) -> None:
    x, y, z = example
    attack = maximum_knowledge_attack(x, y, true_mapping="identity")
    assert np.allclose(attack.reverse_mapped, z)
    for record, (rows, distance) in TABLE5.items():
        assert [int(r) + 1 for r in attack.matches[record - 1]] == rows, record
        assert int(attack.distances[record - 1]) == distance, record


def test_table6_exhaustive_random_records(example: tuple[NDArray[np.float64], ...]) -> None:
    x, y, z = example
    attack = maximum_knowledge_attack(x, y, reverse_mapped=z)
    assert attack.random.exhaustive
    assert attack.random.total == 20**3
    original = attack.original_distribution()
    random = attack.random_distribution()
    for distance, (freq_original, freq_random) in TABLE6.items():
        assert round(original.get(distance, 0.0), 4) == freq_original, distance
        assert round(random.get(distance, 0.0), 4) == freq_random, distance
    assert sum(original.values()) == pytest.approx(1.0)
    assert sum(random.values()) == pytest.approx(1.0)
    # The 20 original (and the 20 permuted) records are among the 8000: 20 of them at distance 0.
    assert int(attack.random.counts[0]) == 20


def test_p_values_hellinger_and_scores(example: tuple[NDArray[np.float64], ...]) -> None:
    x, y, _ = example
    attack = maximum_knowledge_attack(x, y, true_mapping="identity")
    counts = attack.random.counts
    for i, distance in enumerate(attack.distances):
        expected = counts[: int(distance) + 1].sum() / 8000
        assert attack.p_values[i] == pytest.approx(expected)
    # Record 5 links at distance 2: 0.0025 + 0.0586 + 0.1899 of the random records do as well.
    assert attack.p_values[4] == pytest.approx(0.2510, abs=1e-4)
    # Hellinger distance from the rounded Table 6 (rounding moves it by far less than 1e-3).
    p = np.array([v[0] for v in TABLE6.values()])
    q = np.array([v[1] for v in TABLE6.values()])
    assert attack.hellinger == pytest.approx(np.sqrt(1 - np.sum(np.sqrt(p * q))), abs=1e-3)
    # Data protector's score: 6 unique correct (records 4, 5, 7, 12, 14, 20), 3 ties of 2 containing
    # the true record (1, 9, 19), 11 wrong: (6 + 3/2) / 20.
    assert attack.score is not None
    assert attack.score.unique_correct == 6
    assert attack.score.multiple == 4
    assert attack.score.correct_rate == pytest.approx(7.5 / 20)


def test_sampled_random_records_are_seeded_and_close_to_exhaustive(
    example: tuple[NDArray[np.float64], ...],
) -> None:
    x, y, z = example
    exact = maximum_knowledge_attack(x, y, reverse_mapped=z)
    first = maximum_knowledge_attack(x, y, reverse_mapped=z, random=20_000, seed=5)
    again = maximum_knowledge_attack(x, y, reverse_mapped=z, random=20_000, seed=5)
    other = maximum_knowledge_attack(x, y, reverse_mapped=z, random=20_000, seed=6)
    assert not first.random.exhaustive and first.random.total == 20_000 and first.random.seed == 5
    assert np.array_equal(first.random.counts, again.random.counts)
    assert not np.array_equal(first.random.counts, other.random.counts)
    exact_freq = exact.random_distribution()
    for distance, freq in first.random_distribution().items():
        assert freq == pytest.approx(exact_freq.get(distance, 0.0), abs=0.015)
    # A sample never claims probability 0: (1 + count) / (1 + N).
    cumulative = np.cumsum(first.random.counts)
    assert first.p_values[4] == pytest.approx((1 + cumulative[2]) / 20_001)


def test_random_record_limits(
    example: tuple[NDArray[np.float64], ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    x, y, z = example
    with pytest.raises(InputError, match="exhaustive limit"):
        maximum_knowledge_attack(x, y, reverse_mapped=z, random="all", cap=1000)
    monkeypatch.setattr(intruder, "DEFAULT_RANDOM_SAMPLE", 3000)
    auto = maximum_knowledge_attack(x, y, reverse_mapped=z, random="auto", cap=1000, seed=1)
    assert not auto.random.exhaustive and auto.random.total == 3000
    with pytest.raises(InputError, match="random records"):
        maximum_knowledge_attack(x, y, reverse_mapped=z, random=0)
    with pytest.raises(InputError):
        maximum_knowledge_attack(x, y[:, :2])


def test_progress_callback_reaches_total(example: tuple[NDArray[np.float64], ...]) -> None:
    x, y, z = example
    seen: list[tuple[int, int]] = []
    maximum_knowledge_attack(
        x, y, reverse_mapped=z, on_progress=lambda done, total: seen.append((done, total))
    )
    assert seen and seen[-1] == (8000, 8000)


def _brute_force_linkage(x: NDArray[np.float64], z: NDArray[np.float64]) -> tuple[list[list[int]], list[int]]:
    """Permutation distance by rank intervals, all pairs (Z holds exactly the values of X)."""
    s = np.sort(z, axis=0)
    lo_z = np.column_stack([np.searchsorted(s[:, j], z[:, j], "left") for j in range(z.shape[1])])
    hi_z = np.column_stack([np.searchsorted(s[:, j], z[:, j], "right") - 1 for j in range(z.shape[1])])
    lo_x = np.column_stack([np.searchsorted(s[:, j], x[:, j], "left") for j in range(z.shape[1])])
    hi_x = np.column_stack([np.searchsorted(s[:, j], x[:, j], "right") - 1 for j in range(z.shape[1])])
    matches, distances = [], []
    for i in range(x.shape[0]):
        gap = np.maximum(0, np.maximum(lo_z - hi_x[i], lo_x[i] - hi_z)).max(axis=1)
        distances.append(int(gap.min()))
        matches.append([int(r) for r in np.flatnonzero(gap == gap.min())])
    return matches, distances


def test_linkage_with_ties_matches_brute_force() -> None:
    rng = np.random.default_rng(9)
    x = rng.integers(0, 12, size=(150, 3)).astype(np.float64)
    y = x + rng.normal(scale=2.0, size=x.shape)
    attack = maximum_knowledge_attack(x, y, random=2000, seed=3, true_mapping="identity")
    z = attack.reverse_mapped
    # Z is a column-wise permutation of X.
    assert np.array_equal(np.sort(z, axis=0), np.sort(x, axis=0))
    matches, distances = _brute_force_linkage(x, z)
    assert [int(d) for d in attack.distances] == distances
    assert [[int(r) for r in m] for m in attack.matches] == matches
    assert attack.score is not None and 0.0 <= attack.score.correct_rate <= 1.0


def test_small_noise_is_detected_large_noise_is_not() -> None:
    # Section 5.2 / Table 7: with tiny noise the original records link at distances random records
    # almost never reach; with large noise both distributions overlap.
    rng = np.random.default_rng(12)
    x = rng.normal(size=(600, 3))
    small = maximum_knowledge_attack(
        x, x + rng.normal(scale=0.01, size=x.shape), random=20_000, seed=1, true_mapping="identity"
    )
    large = maximum_knowledge_attack(
        x, x + rng.normal(scale=1.5, size=x.shape), random=20_000, seed=1, true_mapping="identity"
    )
    assert small.hellinger > 0.8
    assert large.hellinger < small.hellinger - 0.3
    assert float(np.median(small.p_values)) < 0.01
    assert small.score is not None and large.score is not None
    assert small.score.correct_rate > 0.9 > large.score.correct_rate


def test_identity_release_links_every_record_at_distance_zero() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(80, 2))
    matches, distances, *_ = link_records(x, x)
    assert np.all(distances == 0)
    assert all(list(m) == [i] for i, m in enumerate(matches))


def test_hellinger_and_p_value_helpers() -> None:
    assert hellinger_distance([1, 2, 3], [2, 4, 6]) == pytest.approx(0.0)
    assert hellinger_distance([1, 0], [0, 1]) == pytest.approx(1.0)
    assert hellinger_distance([5], [0, 0, 5]) == pytest.approx(1.0)
    with pytest.raises(InputError):
        hellinger_distance([0, 0], [1, 1])
    dist = RandomRecordDistribution(counts=np.array([1, 3, 6]), total=10, exhaustive=True, seed=None)
    assert list(empirical_p_values([0, 1, 2, 7], dist)) == pytest.approx([0.1, 0.4, 1.0, 1.0])
    sampled = RandomRecordDistribution(counts=np.array([0, 4, 5]), total=9, exhaustive=False, seed=1)
    assert list(empirical_p_values([0, 2], sampled)) == pytest.approx([0.1, 1.0])
