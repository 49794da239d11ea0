"""Privacy checks on a release: k-anonymity, l-diversity and t-closeness.

Records with identical quasi-identifier (QI) vectors form an *equivalence class*.

- **k-anonymity**: k is the size of the smallest class; against a required k, a class is violating
  when it has fewer than k records.
- **l-diversity**, per confidential attribute: *distinct* l of a class is its number of distinct
  values, *entropy* l is ``exp(H)`` with H the (natural-log) Shannon entropy of the class's value
  distribution; the release's l is the minimum over classes. A required l is checked against the
  distinct l (the weaker, most common notion) and, separately, a required *entropy* l against the
  entropy l (with a relative tolerance of 1e-9, since ``exp(ln 3)`` is not exactly 3 in floats).
- **t-closeness** (Li, Li & Venkatasubramanian 2007), per numeric confidential attribute: the earth
  mover's distance between a class's distribution and the whole table's, with the *ordered
  distance* over the m sorted distinct values of the table, ``|i - j| / (m - 1)``. It has the closed
  form ``EMD(P, Q) = (1 / (m - 1)) * sum_{i=1}^{m} |sum_{j<=i} (p_j - q_j)|``. The release's t is the
  maximum over classes. Here it is computed exactly in O(n log n) with prefix sums instead of a
  dense class x value table, so it works on continuous attributes with many distinct values.

QIs and confidential attributes are arrays, `Dataset`s or pandas DataFrames / Series. Classes and
l-diversity only compare values for equality, so text values (e.g. a generalized '30-39', a disease)
are accepted there; t-closeness needs an order: numbers or an ordered categorical (as ranks).

`class_reports` (or ``check_privacy(..., per_class=True)``) gives the same figures for every class:
its size, and the distinct l, entropy l and t of each confidential attribute.

Every result is a frozen dataclass with ``to_dict()``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc.dataset import Dataset

FloatMatrix = NDArray[np.float64]
IntArray = NDArray[np.intp]

#: Slack on the t threshold so that a class exactly at t (on paper) is not failed by float rounding.
T_TOLERANCE = 1e-12
#: Relative slack on the entropy l threshold: exp(ln 3) is 2.9999999999999996, which must count as 3.
ENTROPY_L_TOLERANCE = 1e-9


def _attribute(values: Any, what: str, *, ordered: bool) -> NDArray[np.float64]:
    """One attribute as float64: numbers as given, ordered pandas categoricals as ranks 1..c, and, where
    no order is needed (classes, l-diversity), any other values (text) as codes of their distinct values."""
    dtype: Any = getattr(values, "dtype", None)
    if getattr(dtype, "name", "") == "category":  # a pandas categorical (pandas itself is optional)
        ranks = np.asarray(values.cat.codes, dtype=np.float64).reshape(-1) + 1.0
        if np.any(ranks < 1):
            raise InputError(f"{what} contains missing values")
        if ordered and not dtype.ordered:
            raise InputError(f"{what} is an unordered categorical: t-closeness needs numbers or ordered categories")
        return ranks
    try:
        return np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        if ordered:
            raise InputError(f"{what} is not numeric: t-closeness needs numbers or ordered categories") from None
    cells = np.asarray(values, dtype=object).reshape(-1)
    if any(c is None or (isinstance(c, float) and math.isnan(c)) for c in cells):
        raise InputError(f"{what} contains missing values")
    _, text_codes = np.unique(cells.astype(str), return_inverse=True)
    return np.asarray(text_codes, dtype=np.float64).reshape(-1)


def _column(values: Any, n: int | None, what: str, *, ordered: bool = True) -> NDArray[np.float64]:
    col = _attribute(values, what, ordered=ordered)
    if n is not None and col.shape[0] != n:
        raise InputError(f"{what} has {col.shape[0]} values for {n} records")
    if not np.all(np.isfinite(col)):
        raise InputError(f"{what} contains missing or non-finite values")
    return col


def _qi_matrix(qi_values: Any) -> FloatMatrix:
    """The QI columns as numbers; text or categorical QIs (a DataFrame, an object array) become codes."""
    if isinstance(qi_values, Dataset):
        return qi_values.values
    if hasattr(qi_values, "columns") and hasattr(qi_values, "dtypes"):  # a pandas DataFrame
        columns = [_attribute(qi_values[c], f"quasi-identifier {c!r}", ordered=False) for c in qi_values.columns]
        return np.column_stack(columns) if columns else np.empty((len(qi_values), 0))
    try:
        return np.asarray(qi_values, dtype=np.float64)
    except (TypeError, ValueError):
        cells = np.asarray(qi_values, dtype=object)
    if cells.ndim == 1:
        cells = cells.reshape(-1, 1)
    if cells.ndim != 2:
        raise InputError("quasi-identifiers must be a 2-D table (records x attributes)")
    return np.column_stack(
        [_attribute(cells[:, j], f"quasi-identifier {j + 1}", ordered=False) for j in range(cells.shape[1])]
    )


def _is_ordered(values: Any) -> bool:
    """Whether an attribute has an order t-closeness can use: numbers or an ordered categorical."""
    try:
        _attribute(values, "attribute", ordered=True)
    except InputError:
        return False
    return True


def equivalence_classes(qi_values: Any) -> tuple[IntArray, IntArray]:
    """(class label per record, size per class) of the records' QI vectors.

    ``qi_values`` is an ``(n, q)`` array, or a pandas DataFrame whose text or categorical columns are
    compared by equality. Labels are 0..G-1 in the lexicographic order of the distinct QI vectors
    (of their codes, for text QIs).
    """
    qi = _qi_matrix(qi_values)
    if qi.ndim == 1:
        qi = qi.reshape(-1, 1)
    if qi.ndim != 2 or qi.shape[0] == 0 or qi.shape[1] == 0:
        raise InputError("quasi-identifiers must be a non-empty 2-D table (records x attributes)")
    if not np.all(np.isfinite(qi)):
        raise InputError("quasi-identifiers contain missing or non-finite values")
    _, labels, sizes = np.unique(qi, axis=0, return_inverse=True, return_counts=True)
    return np.asarray(labels.reshape(-1), dtype=np.intp), np.asarray(sizes, dtype=np.intp)


# ----------------------------------------------------------------------------------- k-anonymity


@dataclass(frozen=True)
class KAnonymityReport:
    """k-anonymity of a release; the ``violating_*`` fields are 0 when no k was required."""

    n: int
    k: int
    n_classes: int
    required_k: int | None
    violating_classes: int
    violating_records: int

    @property
    def holds(self) -> bool:
        return self.required_k is None or self.k >= self.required_k

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "k": self.k,
            "classes": self.n_classes,
            "required_k": self.required_k,
            "violating_classes": self.violating_classes,
            "violating_records": self.violating_records,
            "holds": self.holds,
        }


def k_anonymity(qi_values: Any, required_k: int | None = None) -> KAnonymityReport:
    """k-anonymity of the QI columns (an ``(n, q)`` matrix, categories as codes)."""
    if required_k is not None and required_k < 1:
        raise InputError(f"bad k {required_k}: expected a positive integer")
    labels, sizes = equivalence_classes(qi_values)
    small = sizes < required_k if required_k is not None else np.zeros(sizes.shape, dtype=bool)
    return KAnonymityReport(
        n=int(labels.shape[0]),
        k=int(sizes.min()),
        n_classes=int(sizes.shape[0]),
        required_k=required_k,
        violating_classes=int(small.sum()),
        violating_records=int(sizes[small].sum()),
    )


# ---------------------------------------------------------------------------------- l-diversity


@dataclass(frozen=True)
class LDiversityReport:
    """l-diversity of one confidential attribute over the equivalence classes."""

    attribute: str
    distinct_l: int
    entropy_l: float
    required_l: float | None
    #: Classes whose distinct l is below the required l (0 when none was required).
    violating_classes: int
    #: Required entropy l (``exp(H)`` of every class at least this), if any.
    required_entropy_l: float | None = None
    #: Classes whose entropy l is below the required entropy l (0 when none was required).
    entropy_violating_classes: int = 0

    @property
    def distinct_holds(self) -> bool:
        return self.required_l is None or self.distinct_l >= self.required_l

    @property
    def entropy_holds(self) -> bool:
        return self.required_entropy_l is None or self.entropy_l >= self.required_entropy_l * (
            1.0 - ENTROPY_L_TOLERANCE
        )

    @property
    def holds(self) -> bool:
        return self.distinct_holds and self.entropy_holds

    def to_dict(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "distinct_l": self.distinct_l,
            "entropy_l": self.entropy_l,
            "required_l": self.required_l,
            "violating_classes": self.violating_classes,
            "required_entropy_l": self.required_entropy_l,
            "entropy_violating_classes": self.entropy_violating_classes,
            "holds": self.holds,
        }


def _class_value_counts(labels: IntArray, codes: IntArray) -> tuple[IntArray, IntArray]:
    """Distinct (class, value code) pairs as keys ``class * m + code``, sorted, and each pair's count."""
    n_values = int(codes.max()) + 1
    pair_keys = labels.astype(np.int64) * n_values + codes.astype(np.int64)
    keys, counts = np.unique(pair_keys, return_counts=True)
    return np.asarray(keys, dtype=np.intp), np.asarray(counts, dtype=np.intp)


def _class_diversity(labels: IntArray, sizes: IntArray, column: FloatMatrix) -> tuple[IntArray, FloatMatrix]:
    """(distinct l, entropy l) of every class: its number of distinct values and exp of their entropy."""
    _, codes = np.unique(column, return_inverse=True)
    codes = np.asarray(codes.reshape(-1), dtype=np.intp)
    n_values = int(codes.max()) + 1
    keys, counts = _class_value_counts(labels, codes)
    pair_class = keys // n_values
    distinct = np.bincount(pair_class, minlength=sizes.shape[0])
    share = counts / sizes[pair_class]
    entropy_l = np.exp(np.bincount(pair_class, weights=-share * np.log(share), minlength=sizes.shape[0]))
    return np.asarray(distinct, dtype=np.intp), np.asarray(entropy_l, dtype=np.float64)


def l_diversity_from_classes(
    labels: IntArray,
    sizes: IntArray,
    values: Any,
    attribute: str = "x",
    required_l: float | None = None,
    required_entropy_l: float | None = None,
) -> LDiversityReport:
    """l-diversity of ``values`` within the classes given by ``labels`` (from `equivalence_classes`).

    ``values`` may be numbers or, since only equality matters here, text (compared as text).
    """
    column = _column(values, labels.shape[0], f"confidential attribute {attribute!r}", ordered=False)
    for name, required in (("l", required_l), ("entropy l", required_entropy_l)):
        if required is not None and not (math.isfinite(required) and required >= 1):
            raise InputError(f"bad {name} {required!r}: expected a number >= 1")
    distinct, entropy_l = _class_diversity(labels, sizes, column)
    violating = int((distinct < required_l).sum()) if required_l is not None else 0
    entropy_violating = (
        int((entropy_l < required_entropy_l * (1.0 - ENTROPY_L_TOLERANCE)).sum())
        if required_entropy_l is not None
        else 0
    )
    return LDiversityReport(
        attribute=attribute,
        distinct_l=int(distinct.min()),
        entropy_l=float(entropy_l.min()),
        required_l=required_l,
        violating_classes=violating,
        required_entropy_l=required_entropy_l,
        entropy_violating_classes=entropy_violating,
    )


def l_diversity(
    qi_values: Any,
    values: Any,
    attribute: str = "x",
    required_l: float | None = None,
    required_entropy_l: float | None = None,
) -> LDiversityReport:
    """l-diversity of one confidential attribute given the QI columns."""
    labels, sizes = equivalence_classes(qi_values)
    return l_diversity_from_classes(labels, sizes, values, attribute, required_l, required_entropy_l)


# ---------------------------------------------------------------------------------- t-closeness


@dataclass(frozen=True)
class TClosenessReport:
    """t-closeness of one numeric confidential attribute (ordered-distance EMD, max over classes)."""

    attribute: str
    t: float
    #: Label (0-based, see `equivalence_classes`) of a class reaching the maximum distance.
    worst_class: int
    required_t: float | None
    #: Classes whose distance exceeds the required t (0 when none was required).
    violating_classes: int

    @property
    def holds(self) -> bool:
        return self.required_t is None or self.t <= self.required_t + T_TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {
            "attribute": self.attribute,
            "t": self.t,
            "worst_class": self.worst_class,
            "required_t": self.required_t,
            "violating_classes": self.violating_classes,
            "holds": self.holds,
        }


def ordered_emd(class_values: Any, table_values: Any) -> float:
    """Ordered-distance EMD between one class's values and the whole table's (reference version).

    Dense and direct: the distinct values of the table define the ground distance
    ``|i - j| / (m - 1)``. Used by the tests and for small inputs; `class_emd` is the fast one.
    """
    table = _column(table_values, None, "table values")
    group = _column(class_values, None, "class values")
    support = np.unique(table)
    m = support.shape[0]
    if m < 2:
        return 0.0
    positions = np.searchsorted(support, group)
    if np.any(positions >= m) or np.any(support[np.minimum(positions, m - 1)] != group):
        raise InputError("the class has values that are not in the table")
    p = np.bincount(positions, minlength=m) / group.shape[0]
    q = np.bincount(np.searchsorted(support, table), minlength=m) / table.shape[0]
    return float(np.abs(np.cumsum(p - q)).sum() / (m - 1))


def class_emd(labels: IntArray, sizes: IntArray, values: Any) -> NDArray[np.float64]:
    """Ordered-distance EMD of every class to the whole table, exactly, in O(n log n).

    With F the table's cumulative distribution over the m sorted distinct values and F_c the
    class's, ``EMD_c = sum_{i<m} |F_c(i) - F(i)| / (m - 1)``. F_c is a step function that only
    changes at the class's own values, so the sum splits into intervals on which F_c is a
    constant s; on each, F (non-decreasing) is below s up to a point found by binary search, and
    both parts are differences of prefix sums of F.
    """
    column = _column(values, labels.shape[0], "confidential attribute")
    n = column.shape[0]
    _, codes = np.unique(column, return_inverse=True)
    codes = np.asarray(codes.reshape(-1), dtype=np.intp)
    m = int(codes.max()) + 1
    n_classes = sizes.shape[0]
    if m < 2:
        return np.zeros(n_classes, dtype=np.float64)
    table_cdf = np.cumsum(np.bincount(codes, minlength=m)) / n
    prefix = np.concatenate(([0.0], np.cumsum(table_cdf)))  # prefix[i] = sum_{t<i} F(t)

    keys, counts = _class_value_counts(labels, codes)
    pair_class = keys // m
    pair_code = keys % m
    # Cumulative class share after each of its distinct values (pairs are sorted by class, value).
    cumulative = np.cumsum(counts)
    class_start = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    level = (cumulative - class_start[pair_class]) / sizes[pair_class]
    # Interval [pair_code, next code of the same class) has F_c = level; the class's last interval
    # runs to m - 1 (excluded: both CDFs are 1 there). Each class also has [0, first code) at 0.
    next_code = np.empty_like(pair_code)
    next_code[:-1] = pair_code[1:]
    last_of_class = np.ones(pair_code.shape[0], dtype=bool)
    last_of_class[:-1] = pair_class[1:] != pair_class[:-1]
    next_code[last_of_class] = m - 1
    first_of_class = np.ones(pair_code.shape[0], dtype=bool)
    first_of_class[1:] = last_of_class[:-1]

    starts = np.concatenate((pair_code, np.zeros(n_classes, dtype=np.intp)))
    ends = np.concatenate((next_code, pair_code[first_of_class]))
    levels = np.concatenate((level, np.zeros(n_classes)))
    owners = np.concatenate((pair_class, pair_class[first_of_class]))
    ends = np.maximum(ends, starts)  # the last value's interval is empty when it is the maximum

    split = np.clip(np.searchsorted(table_cdf, levels, side="left"), starts, ends)
    below = levels * (split - starts) - (prefix[split] - prefix[starts])
    above = (prefix[ends] - prefix[split]) - levels * (ends - split)
    total = np.bincount(owners, weights=below + above, minlength=n_classes)
    # Prefix-sum cancellation leaves ~1e-17 where the distributions are equal: report exactly 0.
    total[total < 1e-12] = 0.0
    return np.asarray(total / (m - 1), dtype=np.float64)


def t_closeness_from_classes(
    labels: IntArray, sizes: IntArray, values: Any, attribute: str = "x", required_t: float | None = None
) -> TClosenessReport:
    """t-closeness of ``values`` within the classes given by ``labels``."""
    if required_t is not None and not (math.isfinite(required_t) and 0 <= required_t <= 1):
        raise InputError(f"bad t {required_t!r}: expected a number between 0 and 1")
    distances = class_emd(labels, sizes, values)
    worst = int(np.argmax(distances))
    violating = int((distances > required_t + T_TOLERANCE).sum()) if required_t is not None else 0
    return TClosenessReport(
        attribute=attribute,
        t=float(distances[worst]),
        worst_class=worst,
        required_t=required_t,
        violating_classes=violating,
    )


def t_closeness(
    qi_values: Any, values: Any, attribute: str = "x", required_t: float | None = None
) -> TClosenessReport:
    """t-closeness of one numeric confidential attribute given the QI columns."""
    labels, sizes = equivalence_classes(qi_values)
    return t_closeness_from_classes(labels, sizes, values, attribute, required_t)


# ---------------------------------------------------------------------------------- per class


@dataclass(frozen=True)
class ClassAttributeReport:
    """One confidential attribute within one equivalence class."""

    attribute: str
    #: Number of distinct values in the class.
    distinct_l: int
    #: ``exp(H)``, H the natural-log Shannon entropy of the class's values.
    entropy_l: float
    #: Ordered-distance EMD between the class's and the whole table's distribution; None when the
    #: attribute has no order (text), where t-closeness is not defined.
    t: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"attribute": self.attribute, "distinct_l": self.distinct_l, "entropy_l": self.entropy_l, "t": self.t}


@dataclass(frozen=True)
class ClassReport:
    """One equivalence class: its size and the l-diversity and t-closeness of each confidential attribute."""

    #: The class label of `equivalence_classes` (0-based, lexicographic order of the QI vectors).
    index: int
    size: int
    #: 0-based position of the class's first record in the input (where to read its QI values).
    first_record: int
    attributes: tuple[ClassAttributeReport, ...]
    #: Whether this class meets every required threshold (True when none was required).
    holds: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "class": self.index,
            "size": self.size,
            "first_record": self.first_record,
            "confidential": [a.to_dict() for a in self.attributes],
            "holds": self.holds,
        }


def class_reports(
    labels: IntArray,
    sizes: IntArray,
    confidential: Sequence[tuple[str, Any]],
    numeric: Sequence[bool],
    *,
    required_k: int | None = None,
    required_l: float | None = None,
    required_t: float | None = None,
    required_entropy_l: float | None = None,
) -> tuple[ClassReport, ...]:
    """Per class (labels from `equivalence_classes`): size, and distinct l, entropy l and t of every
    confidential attribute (t only where ``numeric`` says the attribute has an order).

    A class holds when its size is at least ``required_k`` and each attribute meets the required
    thresholds, with the same float tolerances as the release-level checks.
    """
    n = labels.shape[0]
    if len(numeric) != len(confidential):
        raise InputError("one 'numeric' flag per confidential attribute is needed")
    holds = sizes >= required_k if required_k is not None else np.ones(sizes.shape[0], dtype=bool)
    per_attribute: list[tuple[str, IntArray, FloatMatrix, FloatMatrix | None]] = []
    for (name, values), is_numeric in zip(confidential, numeric, strict=True):
        column = _column(values, n, f"confidential attribute {name!r}", ordered=False)
        distinct, entropy_l = _class_diversity(labels, sizes, column)
        distances = class_emd(labels, sizes, values) if is_numeric else None
        if required_l is not None:
            holds &= distinct >= required_l
        if required_entropy_l is not None:
            holds &= entropy_l >= required_entropy_l * (1.0 - ENTROPY_L_TOLERANCE)
        if required_t is not None and distances is not None:
            holds &= distances <= required_t + T_TOLERANCE
        per_attribute.append((name, distinct, entropy_l, distances))
    # Every label 0..G-1 occurs, so the first occurrences are indexed by label.
    _, first = np.unique(labels, return_index=True)
    return tuple(
        ClassReport(
            index=c,
            size=int(sizes[c]),
            first_record=int(first[c]),
            attributes=tuple(
                ClassAttributeReport(name, int(distinct[c]), float(entropy_l[c]), None if t is None else float(t[c]))
                for name, distinct, entropy_l, t in per_attribute
            ),
            holds=bool(holds[c]),
        )
        for c in range(sizes.shape[0])
    )


# ---------------------------------------------------------------------------------- all checks


@dataclass(frozen=True)
class PrivacyReport:
    """All the checks of a release: k-anonymity, and l-diversity / t-closeness per attribute."""

    qi: tuple[str, ...]
    k_anonymity: KAnonymityReport
    l_diversity: tuple[LDiversityReport, ...]
    t_closeness: tuple[TClosenessReport, ...]
    #: Per-class details, when asked for (``check_privacy(..., per_class=True)``).
    classes: tuple[ClassReport, ...] | None = None

    @property
    def holds(self) -> bool:
        return (
            self.k_anonymity.holds
            and all(r.holds for r in self.l_diversity)
            and all(r.holds for r in self.t_closeness)
        )

    def failures(self) -> list[str]:
        """One short phrase per check that does not hold (empty when all hold)."""
        problems: list[str] = []
        ka = self.k_anonymity
        if not ka.holds:
            problems.append(
                f"k-anonymity: k = {ka.k} < {ka.required_k} ({ka.violating_classes} classes, "
                f"{ka.violating_records} records below)"
            )
        problems += [
            f"l-diversity of {r.attribute}: l = {r.distinct_l} < {r.required_l:g}"
            for r in self.l_diversity
            if not r.distinct_holds and r.required_l is not None
        ]
        problems += [
            f"entropy l-diversity of {r.attribute}: entropy l = {r.entropy_l:.4f} < {r.required_entropy_l:g}"
            for r in self.l_diversity
            if not r.entropy_holds and r.required_entropy_l is not None
        ]
        problems += [
            f"t-closeness of {r.attribute}: t = {r.t:.4f} > {r.required_t:g}"
            for r in self.t_closeness
            if not r.holds and r.required_t is not None
        ]
        return problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "qi": list(self.qi),
            "k_anonymity": self.k_anonymity.to_dict(),
            "l_diversity": [r.to_dict() for r in self.l_diversity],
            "t_closeness": [r.to_dict() for r in self.t_closeness],
            "holds": self.holds,
            **({} if self.classes is None else {"classes": [c.to_dict() for c in self.classes]}),
        }


def check_privacy(
    qi_values: Any,
    qi_names: Sequence[str],
    confidential: Sequence[tuple[str, Any]] = (),
    *,
    required_k: int | None = None,
    required_l: float | None = None,
    required_t: float | None = None,
    numeric: Sequence[bool] | None = None,
    required_entropy_l: float | None = None,
    per_class: bool = False,
) -> PrivacyReport:
    """k-anonymity of the QIs, and l-diversity and t-closeness of each ``(name, values)`` attribute.

    ``numeric[i]`` False marks a confidential attribute whose values are only category codes: it
    gets l-diversity but no t-closeness (which needs an order). Default: an attribute is numeric when
    its values are numbers or an ordered pandas categorical; text gets l-diversity only.
    ``per_class`` adds the figures of every equivalence class (`class_reports`).
    """
    labels, sizes = equivalence_classes(qi_values)
    k_report = k_anonymity(qi_values, required_k)
    flags = [_is_ordered(values) for _, values in confidential] if numeric is None else list(numeric)
    if len(flags) != len(confidential):
        raise InputError("one 'numeric' flag per confidential attribute is needed")
    l_reports = tuple(
        l_diversity_from_classes(labels, sizes, values, name, required_l, required_entropy_l)
        for name, values in confidential
    )
    t_reports = tuple(
        t_closeness_from_classes(labels, sizes, values, name, required_t)
        for (name, values), is_numeric in zip(confidential, flags, strict=True)
        if is_numeric
    )
    classes = (
        class_reports(
            labels,
            sizes,
            confidential,
            flags,
            required_k=required_k,
            required_l=required_l,
            required_t=required_t,
            required_entropy_l=required_entropy_l,
        )
        if per_class
        else None
    )
    return PrivacyReport(tuple(qi_names), k_report, l_reports, t_reports, classes)
