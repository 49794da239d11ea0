"""The documented result objects of ``coutil audit``, built from arrays (also usable from Python).

`protector_report` is the data protector's audit of every original record (Table 4 of Domingo-Ferrer
& Muralidhar); `subject_report` is one subject's audit of her own record: her verdict (computed by
`coutil.audit.subject`, the very function of her in-round audit) and the plausibility of her match
among random records (end of Section 5.2). Both return the JSON object printed by ``--json`` and,
when thresholds were given, the `PermutedPrivacyCheck` behind its ``check`` key.

JSON keys (row numbers 1-based): ``records``: objects with ``record``, ``permutation_distance``,
``closest`` (all tied release rows, ascending), ``star_ranks`` (per attribute, the rank of y*_j: the
first rank of its tie block), ``star_rank_intervals`` (per attribute, ``[low, high]``: the ranks
that y*_j occupies, low = high without ties; two blocks when x_j lies halfway), ``variances`` (per
attribute, at the record's own distance), with a non-variance criterion ``diversity``, with a
mapping ``mapping`` and ``distance_vector``, in subject mode ``plausibility``; in subject mode
``verdict`` (`coutil.audit.subject.SubjectAudit.to_dict`); ``dataset`` (protector):
``permutation_distance`` (the minimum) and ``variances`` (per attribute, the minimum over records at
that distance), with a non-variance criterion ``diversity`` (the least safe value over records);
``check`` when asked.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Literal, TypeAlias

import numpy as np
from numpy.typing import NDArray

from coutil.audit.diversity import DiversityCriterion, window_diversity, worst
from coutil.audit.privacy_check import PermutedPrivacyCheck, check_records
from coutil.audit.ranks import IndexArray, Nearest, RankIndex
from coutil.audit.subject import AuditParams, SubjectAudit
from coutil.errors import InputError

MappingName = Literal["closest", "identity"]
#: A record mapping f: by name, or f(x_i) as 0-based release rows, one per original record.
MappingSpec: TypeAlias = MappingName | Sequence[int] | NDArray[np.integer[Any]]
Distance = int | list[int]


def _closest_lists(found: Nearest, chosen: Sequence[int]) -> list[list[int]]:
    """1-based closest rows of the chosen records; one conversion of the flat (CSR) array."""
    flat = (np.asarray(found.matches.flat, dtype=np.int64) + 1).tolist()
    offsets = np.asarray(found.matches.offsets, dtype=np.int64).tolist()
    if len(chosen) == len(found.matches):
        return [flat[a:b] for a, b in pairwise(offsets)]
    return [flat[offsets[i] : offsets[i + 1]] for i in chosen]


def _record_objects(
    numbers: Sequence[int], distances: Any, closest: list[list[int]], star_lo: Any, star_hi: Any, variances: Any
) -> list[dict[str, Any]]:
    # Bulk .tolist() conversions: a million records would spend most of the audit in per-item casts.
    intervals = np.stack([np.asarray(star_lo, dtype=np.int64), np.asarray(star_hi, dtype=np.int64)], axis=-1)
    return [
        {
            "record": int(number),
            "permutation_distance": distance,
            "closest": rows,
            "star_ranks": star,
            "star_rank_intervals": interval,
            "variances": variance,
        }
        for number, distance, rows, star, interval, variance in zip(
            numbers,
            np.asarray(distances, dtype=np.int64).tolist(),
            closest,
            np.asarray(star_lo, dtype=np.int64).tolist(),
            intervals.tolist(),
            np.asarray(variances, dtype=np.float64).tolist(),
            strict=True,
        )
    ]


def _mapping_rows(
    mapping: MappingSpec | None, found: Nearest, chosen: Sequence[int], n_release: int
) -> IndexArray | None:
    """f(x) of each chosen record as 0-based release rows: its lowest closest row, its own row, or
    the given row of a known mapping (one per original record)."""
    if mapping is None:
        return None
    if not isinstance(mapping, str):
        rows = np.asarray(mapping)
        if rows.shape != (len(found.matches),) or not np.issubdtype(rows.dtype, np.integer):
            raise InputError(
                f"the record mapping must give one integer release row per original record "
                f"({len(found.matches)}), got shape {rows.shape}"
            )
        if rows.size and (rows.min() < 0 or rows.max() >= n_release):
            raise InputError(f"the record mapping points outside the release rows 1..{n_release}")
        return np.asarray(rows[list(chosen)], dtype=np.intp)
    if mapping == "identity":
        if max(chosen, default=-1) >= n_release:
            raise InputError(f"the identity mapping pairs record i with release row i, but the release has {n_release}")
        return np.asarray(chosen, dtype=np.intp)
    if mapping != "closest":
        raise InputError(f"unknown record mapping {mapping!r}: expected 'closest' or 'identity'")
    firsts = np.asarray(found.matches.flat[found.matches.offsets[:-1]], dtype=np.intp)
    return np.asarray(firsts[list(chosen)], dtype=np.intp)


def _add_mapping(records: list[dict[str, Any]], rows: IndexArray, deviations: NDArray[np.int64]) -> None:
    for rec, row, vector in zip(records, rows.tolist(), deviations.tolist(), strict=True):
        rec["mapping"] = int(row) + 1
        rec["distance_vector"] = vector


def _check(
    index: RankIndex,
    star_lo: NDArray[np.int64],
    star_hi: NDArray[np.int64],
    distances: NDArray[np.int64],
    rows: IndexArray | None,
    names: Sequence[str],
    chosen: Sequence[int],
    d: Distance | None,
    v: Sequence[float] | None,
    criterion: DiversityCriterion,
) -> PermutedPrivacyCheck | None:
    """The (d, v[, f]) check over the chosen records when d or v is given.

    Without d: the smallest permutation distance of the records checked (the largest d that condition
    1 allows), or in the mapping form, per attribute, the smallest rank deviation of f(x). Without v:
    0 (for t-closeness, t = 1), so that only the distance is checked.
    """
    if d is None and v is None:
        return None
    m = len(names)
    required: Distance
    if d is not None:
        required = d
    elif rows is not None:
        required = index.rank_deviations(star_lo, star_hi, rows).min(axis=0).tolist()
    else:
        required = int(distances.min())
    if isinstance(required, list) and rows is None:
        raise InputError("a d per attribute is the (d, v, f) form: it needs a record mapping (closest or identity)")
    default = 1.0 if criterion == "t-closeness" else 0.0
    thresholds = [default] * m if v is None else list(v)
    if len(thresholds) != m:
        raise InputError(f"v has {len(thresholds)} values but there are {m} attributes")
    return check_records(
        index, star_lo, star_hi, distances, required, thresholds,
        criterion=criterion, mapping=rows, names=names, records=chosen,
    )  # fmt: skip


def protector_report(
    original: NDArray[np.float64],
    release: NDArray[np.float64],
    names: Sequence[str],
    *,
    record: int | None = None,
    d: Distance | None = None,
    v: Sequence[float] | None = None,
    criterion: DiversityCriterion = "variance",
    mapping: MappingSpec | None = None,
) -> tuple[dict[str, Any], PermutedPrivacyCheck | None]:
    """The data protector's audit: every record of X (or the 0-based ``record``) against Y.

    ``mapping``: ``"closest"``, ``"identity"`` or the known f as 0-based release rows, one per record
    of X. A vector ``d`` without ``mapping`` uses the closest-record mapping.
    """
    if record is not None and not 0 <= record < original.shape[0]:
        raise InputError(f"record {record + 1} is out of range: the original has records 1..{original.shape[0]}")
    if isinstance(d, list) and mapping is None:
        mapping = "closest"
    index = RankIndex.build(release)
    star_lo, star_hi = index.star(original)
    found = index.nearest(star_lo, star_hi, want_ties=True)
    distances = np.asarray(found.distance, dtype=np.int64)
    n = original.shape[0]
    # Data-set level (Table 4, bottom row): the minimum distance, and per attribute the minimum over
    # records of the window variance at that common distance.
    dataset_distance = int(distances.min())
    dataset: dict[str, Any] = {
        "permutation_distance": dataset_distance,
        "variances": index.window_variance(star_lo, star_hi, np.full(n, dataset_distance)).min(axis=0).tolist(),
    }
    chosen = list(range(n)) if record is None else [record]
    lo, hi, own = star_lo[chosen], star_hi[chosen], distances[chosen]
    records = _record_objects(
        [i + 1 for i in chosen], own, _closest_lists(found, chosen), lo, hi, index.window_variance(lo, hi, own)
    )
    if criterion != "variance":
        for rec, values in zip(records, window_diversity(index, lo, hi, own, criterion).tolist(), strict=True):
            rec["diversity"] = values
        at_d = window_diversity(index, star_lo, star_hi, dataset_distance, criterion)
        dataset["diversity"] = worst(criterion, at_d).tolist()
    rows = _mapping_rows(mapping, found, chosen, index.n)
    if rows is not None:
        _add_mapping(records, rows, index.rank_deviations(lo, hi, rows))
    check = _check(index, lo, hi, own, rows, names, chosen, d, v, criterion)
    out: dict[str, Any] = {
        "columns": list(names),
        "diversity_criterion": criterion,
        "records": records,
        "dataset": dataset,
    }
    if check is not None:
        out["check"] = check.to_dict()
    return out, check


def subject_report(
    own_record: Sequence[float],
    release: NDArray[np.float64],
    names: Sequence[str],
    *,
    audit: SubjectAudit,
    params: AuditParams,
    d: Distance | None = None,
    v: Sequence[float] | None = None,
    criterion: DiversityCriterion = "variance",
    mapping: MappingName | None = None,
) -> tuple[dict[str, Any], PermutedPrivacyCheck | None]:
    """One subject's audit of her own record: her verdict ``audit`` (`coutil.audit.subject`, the
    function she runs in a round, with its thresholds ``params``) under ``verdict``, and her record's
    distance, closest rows, star ranks and variances under ``records`` with its ``plausibility``
    (the verdict's p-value, alpha, plausible, random_records).
    """
    if len(own_record) != release.shape[1]:
        raise InputError(f"the record has {len(own_record)} values but the release has {release.shape[1]} attributes")
    if mapping is not None and mapping != "closest":
        raise InputError("only the closest mapping is open to a subject: she does not know her release row")
    if isinstance(d, list) and mapping is None:
        mapping = "closest"
    index = RankIndex.build(release)
    lo, hi = index.star(np.asarray([own_record], dtype=np.float64))
    found = index.nearest(lo, hi, want_ties=True)
    own = np.asarray(found.distance, dtype=np.int64)
    records = _record_objects([1], own, _closest_lists(found, [0]), lo, hi, index.window_variance(lo, hi, own))
    if criterion != "variance":
        records[0]["diversity"] = window_diversity(index, lo, hi, own, criterion)[0].tolist()
    records[0]["plausibility"] = {
        "p_value": audit.p_value,
        "alpha": params.alpha,
        # Plausible deniability: random records match at her distance or closer often enough.
        "plausible": audit.plausible,
        "random_records": params.random_records,
    }
    rows = _mapping_rows(mapping, found, [0], release.shape[0])
    if rows is not None:
        _add_mapping(records, rows, index.rank_deviations(lo, hi, rows))
    check = _check(index, lo, hi, own, rows, names, [0], d, v, criterion)
    out: dict[str, Any] = {
        "columns": list(names),
        "diversity_criterion": criterion,
        "verdict": audit.to_dict(),
        "records": records,
    }
    if check is not None:
        out["check"] = check.to_dict()
    return out, check
