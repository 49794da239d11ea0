"""Does (d, v)-permuted privacy hold for this record, for these records, for the data set?

Two forms, both of Domingo-Ferrer & Muralidhar:

- **distance form** (the paper's Definitions 1-2): a scalar d. Condition 1: the permutation distance of
  x is at least d (no release record lies within d - 1 ranks of y* in every attribute). Condition 2:
  for every attribute j, the diversity of the window S^j(d) meets v^j.
- **mapping form** (the (d, v, f) form of Domingo-Ferrer's slides): a vector d = (d^1..d^m) and a
  record mapping f. Condition 1, per attribute: |rank(f(x)_j) - rank(y*_j)| >= d^j. Condition 2: the
  diversity of S^j(d^j) meets v^j. f is the data protector's true mapping, or, for a subject who does
  not know it, the closest release record (lowest row among ties), the slides' "approximation".

The diversity criterion is the paper's population variance or one of the alternatives of
`coutil.audit.diversity` (distinct or entropy l-diversity, t-closeness). A record fails on named
attributes: those whose diversity misses v^j and, in the mapping form, those whose rank deviation is
below d^j. In the distance form a too short permutation distance is a failure of the whole record
(the closest release record is within d - 1 ranks in every attribute at once), reported apart.
The data set satisfies the check when every original record does (Definition 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from coutil.audit.diversity import DiversityCriterion, meets, validate_thresholds, window_diversity, worst
from coutil.audit.permutation import permutation_distances
from coutil.audit.ranks import FloatMatrix, IndexArray, IntMatrix, MatchLists, RankIndex
from coutil.errors import InputError

BoolMatrix = NDArray[np.bool_]
CheckForm = Literal["distance", "mapping"]


@dataclass(frozen=True)
class PermutedPrivacyCheck:
    """Outcome of a (d, v)- or (d, v, f)-permuted privacy check on r records (row i = ``records[i]``)."""

    names: tuple[str, ...]
    criterion: DiversityCriterion
    form: CheckForm
    #: Per attribute, d^j (all equal to d in the distance form).
    required_distance: NDArray[np.int64]
    #: Per attribute, v^j (a variance, an l, or a t for t-closeness).
    thresholds: NDArray[np.float64]
    #: 0-based rows of the original data set that were checked.
    records: IndexArray
    #: Permutation distance of each record (Algorithm 2).
    distances: NDArray[np.int64]
    #: Mapping form: f(x), a 0-based release row per record, and the rank deviations (r x m).
    mapping: IndexArray | None
    deviations: IntMatrix | None
    #: Condition 1 per record, and (mapping form) per attribute; all True per attribute otherwise.
    distance_holds: NDArray[np.bool_]
    deviation_holds: BoolMatrix
    #: Condition 2: the criterion's measure of S^j(d^j) (r x m) and whether it meets v^j.
    diversity: FloatMatrix
    diversity_holds: BoolMatrix

    @property
    def record_holds(self) -> NDArray[np.bool_]:
        """Per checked record, whether both conditions hold."""
        return np.asarray(self.distance_holds & self.diversity_holds.all(axis=1), dtype=np.bool_)

    @property
    def holds(self) -> bool:
        """Whether the check holds for every checked record (for all of X: the data set, Definition 2)."""
        return bool(np.all(self.record_holds))

    def failing_records(self) -> IndexArray:
        """0-based original rows (from ``records``) for which the check fails."""
        return np.asarray(self.records[~self.record_holds], dtype=np.intp)

    def failing_attributes(self, record: int | None = None) -> list[str]:
        """Names of the attributes failing for one original row (0-based), or for any checked record."""
        bad = ~self.deviation_holds | ~self.diversity_holds
        if record is not None:
            where = np.flatnonzero(self.records == record)
            if where.size == 0:
                raise InputError(f"record {record} was not checked")
            bad = bad[where]
        failing: list[bool] = np.asarray(bad.any(axis=0)).tolist()
        return [name for name, fails in zip(self.names, failing, strict=True) if fails]

    def worst_diversity(self) -> NDArray[np.float64]:
        """Per attribute, the least safe measure over the checked records."""
        return worst(self.criterion, self.diversity)

    def problems(self) -> list[str]:
        """Why the check fails, one phrase per cause (empty when it holds)."""
        out = []
        short = int(np.count_nonzero(~self.distance_holds))
        if self.form == "distance" and short:
            out.append(f"permutation distance below d = {int(self.required_distance[0])} for {short} record(s)")
        for j, name in enumerate(self.names):
            deviation = int(np.count_nonzero(~self.deviation_holds[:, j]))
            if deviation:
                out.append(
                    f"rank deviation of f(x) below d = {int(self.required_distance[j])} in {name} "
                    f"for {deviation} record(s)"
                )
            diverse = int(np.count_nonzero(~self.diversity_holds[:, j]))
            if diverse:
                relation = {"variance": "below v", "t-closeness": "above t"}.get(self.criterion, "below l")
                out.append(
                    f"{self.criterion} {relation} = {float(self.thresholds[j]):g} in {name} for {diverse} record(s)"
                )
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (1-based record numbers), as printed by ``coutil audit ... --json``."""
        d: int | list[int] = (
            int(self.required_distance[0]) if self.form == "distance" else self.required_distance.tolist()
        )
        return {
            "criterion": self.criterion,
            "form": self.form,
            "d": d,
            "v": self.thresholds.tolist(),
            "holds": self.holds,
            "distance_holds": bool(np.all(self.distance_holds)),
            "failing_attributes": self.failing_attributes(),
            "failing_records": (self.failing_records() + 1).tolist(),
            "worst_at_d": self.worst_diversity().tolist(),
        }


def _required_distance(d: int | Sequence[int] | NDArray[np.integer[Any]], m: int) -> tuple[NDArray[np.int64], bool]:
    """(d^j per attribute, whether d was given as a vector)."""
    array = np.asarray(d)
    if array.ndim == 0:
        values = np.full(m, int(array), dtype=np.int64)
        vector = False
    elif array.ndim == 1 and array.size == m:
        values = array.astype(np.int64)
        vector = True
    else:
        raise InputError(f"d must be one distance or one per attribute ({m}), got {array.size} values")
    if not np.issubdtype(array.dtype, np.integer) or np.any(values < 0):
        raise InputError(f"d must be non-negative integers, got {array.tolist()}")
    return values, vector


def check_records(
    index: RankIndex,
    star_lo: ArrayLike,
    star_hi: ArrayLike,
    distances: ArrayLike,
    d: int | Sequence[int] | NDArray[np.integer[Any]],
    v: ArrayLike,
    *,
    criterion: DiversityCriterion = "variance",
    mapping: ArrayLike | None = None,
    names: Sequence[str] | None = None,
    records: ArrayLike | None = None,
) -> PermutedPrivacyCheck:
    """The check from already computed star intervals and permutation distances (r records).

    ``mapping`` (0-based release rows, one per record) selects the mapping form; so does a vector d,
    which then needs a mapping. ``records`` numbers the rows for reporting (default 0..r-1).
    """
    lo = np.asarray(star_lo, dtype=np.int64)
    hi = np.asarray(star_hi, dtype=np.int64)
    r, m = lo.shape
    distance = np.asarray(distances, dtype=np.int64).reshape(-1)
    if distance.size != r:
        raise InputError(f"one permutation distance per record is needed ({r}), got {distance.size}")
    required, vector = _required_distance(d, m)
    thresholds = validate_thresholds(criterion, v, m)
    attribute_names = tuple(names) if names is not None else tuple(f"attribute {j + 1}" for j in range(m))
    if len(attribute_names) != m:
        raise InputError(f"{len(attribute_names)} attribute names for {m} attributes")
    rows = np.arange(r, dtype=np.intp) if records is None else np.asarray(records, dtype=np.intp).reshape(-1)
    if rows.size != r:
        raise InputError(f"{rows.size} record numbers for {r} records")
    if mapping is None and vector:
        raise InputError("a vector d (one distance per attribute) needs a record mapping f")
    if mapping is None:
        window_d: NDArray[np.int64] = np.broadcast_to(required, (r, m))
        distance_holds = distance >= required[0]
        deviation_holds = np.ones((r, m), dtype=np.bool_)
        mapped: IndexArray | None = None
        deviations: IntMatrix | None = None
    else:
        mapped = np.asarray(mapping).reshape(-1)
        deviations = index.rank_deviations(lo, hi, mapped)
        mapped = mapped.astype(np.intp)
        window_d = np.broadcast_to(required, (r, m))
        deviation_holds = deviations >= required
        distance_holds = deviation_holds.all(axis=1)
    diversity = window_diversity(index, lo, hi, window_d, criterion)
    return PermutedPrivacyCheck(
        names=attribute_names,
        criterion=criterion,
        form="distance" if mapping is None else "mapping",
        required_distance=required,
        thresholds=thresholds,
        records=rows,
        distances=distance,
        mapping=mapped,
        deviations=deviations,
        distance_holds=np.asarray(distance_holds, dtype=np.bool_),
        deviation_holds=np.asarray(deviation_holds, dtype=np.bool_),
        diversity=diversity,
        diversity_holds=meets(criterion, diversity, thresholds),
    )


def first_closest(matches: MatchLists) -> IndexArray:
    """f(x) = the lowest of the closest release rows of each record (the subject's approximation)."""
    return np.asarray(matches.flat[matches.offsets[:-1]], dtype=np.intp)


def check_permuted_privacy(
    original: ArrayLike,
    release: ArrayLike,
    d: int | Sequence[int] | NDArray[np.integer[Any]],
    v: ArrayLike,
    *,
    criterion: DiversityCriterion = "variance",
    mapping: ArrayLike | Literal["closest", "identity"] | None = None,
    names: Sequence[str] | None = None,
    index: RankIndex | None = None,
) -> PermutedPrivacyCheck:
    """(d, v)-permuted privacy of every record of ``original`` (r x m) in ``release`` (n x m).

    ``d`` a scalar and no ``mapping``: the paper's distance form. ``mapping`` ``"identity"`` (row i of
    the release is the masked record i), ``"closest"`` or 0-based release rows, or a vector ``d``
    (which defaults the mapping to ``"closest"``): the (d, v, f) mapping form. ``v`` has one threshold
    per attribute for ``criterion``. Holds for the data set when it holds for every record of X.
    """
    rank_index = RankIndex.build(release) if index is None else index
    found = permutation_distances(original, release, index=rank_index)
    r = found.distance.shape[0]
    rows: ArrayLike | None
    if isinstance(mapping, str):
        if mapping == "closest":
            rows = first_closest(found.closest)
        elif mapping == "identity":
            if r != rank_index.n:
                raise InputError(f"the identity mapping needs as many release rows as records ({rank_index.n} vs {r})")
            rows = np.arange(r, dtype=np.intp)
        else:
            raise InputError(f"unknown record mapping {mapping!r}: expected 'closest', 'identity' or rows")
    elif mapping is None and np.ndim(d) == 1:
        rows = first_closest(found.closest)
    else:
        rows = mapping
    return check_records(
        rank_index,
        found.star_lo,
        found.star_hi,
        found.distance,
        d,
        v,
        criterion=criterion,
        mapping=rows,
        names=names,
    )
