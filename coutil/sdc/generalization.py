"""Generalization by fixed, data-independent bins: the classes of a SafePub protocol round.

A scheme gives, for every quasi-identifier, the edges of its bins ``e_0 < e_1 < ... < e_m``: a value in
``[e_i, e_{i+1})`` falls in bin ``i`` (the last bin is closed, ``[e_{m-1}, e_m]``); values outside
``[e_0, e_m]`` are clipped to the first or last bin, so every record has a class. A record's class is its
tuple of bin indices, and a class is released with the bins' midpoints as its QI values: they depend on
the scheme alone, never on the data, as the SafePub theorem requires (a class centroid would not).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError

#: A scheme: (attribute, bin edges) in QI order.
Scheme = tuple[tuple[str, tuple[float, ...]], ...]


def parse_scheme(value: object, qi: Sequence[str], where: str = "safepub_bins") -> Scheme:
    """A scheme from a mapping ``{qi: [edges...]}`` (TOML table) or its JSON text; every QI needs bins."""
    if isinstance(value, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in value):
        value = dict(value)  # already a scheme (a config rebuilt with dataclasses.replace)
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not JSON bins ({exc.msg})") from None
        except ValueError:  # an integer of more than 4,300 digits (CVE-2020-10735)
            raise InputError(f"{where}: not JSON bins (a number too long to read)") from None
        except RecursionError:  # e.g. a signed announce's bins of 60,000 nested arrays (`coutil verify`)
            raise InputError(f"{where}: not JSON bins (nested too deep)") from None
    if not isinstance(value, Mapping):
        raise InputError(f"{where}: expected a table of bin edges per QI, e.g. {{age = [0, 30, 60, 120]}}")
    missing = [name for name in qi if name not in value]
    unknown = sorted(set(value) - set(qi))
    if missing or unknown:
        raise InputError(f"{where}: give bins for exactly the QIs ({', '.join(qi)})"
                         + (f"; missing {', '.join(missing)}" if missing else "")
                         + (f"; not a QI: {', '.join(unknown)}" if unknown else ""))
    scheme = []
    for name in qi:
        edges = value[name]
        read = [_finite(e) for e in edges] if isinstance(edges, (list, tuple)) else []
        floats = tuple(e for e in read if e is not None)
        if len(floats) < 2 or len(floats) != len(read):
            raise InputError(f"{where}: {name} needs at least two finite bin edges")
        if any(b <= a for a, b in itertools.pairwise(floats)):
            raise InputError(f"{where}: the bin edges of {name} must increase")
        scheme.append((str(name), floats))
    return tuple(scheme)


def _finite(edge: object) -> float | None:
    """A bin edge as a finite float; None for anything else (a bool, text, NaN, an infinity, an integer beyond
    the largest float, as JSON text can hold: `float` would raise OverflowError)."""
    if isinstance(edge, bool) or not isinstance(edge, (int, float)):
        return None
    try:
        value = float(edge)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def scheme_text(scheme: Scheme) -> str:
    """The scheme as canonical JSON (what the round's manifest carries)."""
    return json.dumps({name: list(edges) for name, edges in scheme}, separators=(",", ":"))


@dataclass(frozen=True)
class Classes:
    """The classes of some records under a scheme."""

    #: Class label of every record (0 .. n_classes-1, in the order of their bin tuples).
    labels: NDArray[np.int64]
    #: Released QI values of each class: the midpoints of its bins.
    midpoints: NDArray[np.float64]

    @property
    def n_classes(self) -> int:
        return int(self.midpoints.shape[0])

    def sizes(self) -> NDArray[np.int64]:
        return np.bincount(self.labels, minlength=self.n_classes).astype(np.int64)


def bin_index(values: NDArray[np.float64], edges: Sequence[float]) -> NDArray[np.int64]:
    """The bin of every value (clipped to the first and last bin)."""
    inner = np.asarray(edges[1:-1], dtype=np.float64)
    return np.searchsorted(inner, values, side="right").astype(np.int64)


def classes_of(qi: NDArray[np.float64], scheme: Scheme) -> Classes:
    """Every record's class under ``scheme`` (``qi``: one column per scheme attribute, in order)."""
    values = np.asarray(qi, dtype=np.float64)
    if values.ndim != 2 or values.shape[1] != len(scheme):
        raise ValueError("one QI column per scheme attribute")
    if values.shape[0] == 0:
        return Classes(np.zeros(0, dtype=np.int64), np.zeros((0, len(scheme))))
    bins = np.column_stack([bin_index(values[:, j], edges) for j, (_, edges) in enumerate(scheme)])
    keys, labels = np.unique(bins, axis=0, return_inverse=True)
    midpoints = np.array([[(scheme[j][1][b] + scheme[j][1][b + 1]) / 2 for j, b in enumerate(key)] for key in keys],
                         dtype=np.float64)
    return Classes(labels.reshape(-1).astype(np.int64), midpoints)


def split_large_classes(classes: Classes, k: int) -> Classes:
    """Every class of more than ``2k - 1`` records cut into the fewest groups of at most ``2k - 1``, of near-equal
    sizes (the first ones one larger), in record order (a protocol round passes its records in its cut order,
    `safepub_groups`); the other classes kept whole. Labels are renumbered in
    class order, then part order; each part keeps its class's midpoints.

    Why (protocol/SPEC.md §9.1): a class has no upper size, and a group's shuffle is sequential in its members,
    its largest message (a blame) growing with their square, so a large class could not run, nor convict a
    deviator within the 64 MiB every subject applies. MDAV's groups are the same size (k to 2k - 1), and so is
    what the collector learns of them. The cut depends on record order alone (a protocol round's cut order, drawn
    from the roster root, independent of the data), so it is post-processing of the classes: the suppression
    of classes below k, which the theorem is about, is unchanged, and every part of a released class has at
    least k records (a class of s > 2k - 1 cut into p = ceil(s / (2k - 1)) parts has parts of at least
    floor(s / p) >= k)."""
    largest = 2 * k - 1
    sizes = classes.sizes()
    parts = np.maximum(1, -(-sizes // largest))  # ceil, one part for a class at most 2k - 1 (or empty)
    if int(parts.max(initial=1)) == 1:
        return classes
    first_label = np.concatenate(([0], np.cumsum(parts)[:-1]))
    order = np.argsort(classes.labels, kind="stable")
    rank = np.empty_like(order)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank[order] = np.arange(order.shape[0]) - np.repeat(starts, sizes)
    size, count = sizes[classes.labels], parts[classes.labels]
    small, extra = size // count, size % count  # `extra` parts of small + 1 first, then parts of small
    big_span = extra * (small + 1)
    part = np.where(rank < big_span, rank // (small + 1), extra + (rank - big_span) // np.maximum(small, 1))
    labels = (first_label[classes.labels] + part).astype(np.int64)
    midpoints = np.repeat(classes.midpoints, parts, axis=0)
    return Classes(labels, midpoints)


def safepub_groups(qi: NDArray[np.float64], scheme: Scheme, k: int,
                   cut_order: NDArray[np.int64] | None = None) -> Classes:
    """The groups of a SafePub protocol round: the classes of ``scheme``, a class of more than ``2k - 1`` records cut
    by `split_large_classes` in ``cut_order`` (a permutation of the records; None: record order). The collector forms
    them, the auditor recomputes them, both with the round's cut order (`coutil.protocol.collector_release`)."""
    classes = classes_of(qi, scheme)
    if cut_order is None:
        return split_large_classes(classes, k)
    order = np.asarray(cut_order, dtype=np.int64)
    if order.shape != classes.labels.shape or not np.array_equal(np.sort(order), np.arange(order.shape[0])):
        raise ValueError("the cut order is not a permutation of the records")
    cut = split_large_classes(Classes(classes.labels[order], classes.midpoints), k)
    labels = np.empty_like(cut.labels)
    labels[order] = cut.labels
    return Classes(labels, cut.midpoints)
