"""SafePub: truthful microdata with (epsilon, delta)-differential privacy.

The mechanism (Bild, Kuhn, Prasser, PoPETs 2018; ARX's differential privacy), built on (k, beta)-SDGS of Li,
Qardaji and Su (ASIACCS 2012):

1. **Sampling.** Each record is kept with probability ``beta`` (Bernoulli, independently).
2. **Search.** A generalization scheme (one level per quasi-identifier) is chosen by a greedy walk down the
   lattice of levels, starting at the top (everything generalized): at each of ``steps`` steps the
   predecessors of the current pivot (one attribute one level lower) join the candidate set, the pivot
   leaves it, and the next pivot is drawn with the exponential mechanism, probability proportional to
   ``exp(epsilon_draw * score / 2)``. Scores are divided by their sensitivity (as in ARX), so each draw is
   ``epsilon_draw``-differentially private.
3. **Release.** The sample is generalized with the chosen scheme and every class of fewer than ``k``
   records is suppressed (removed from the output).

Budget: ``epsilon = epsilon_anonymization + epsilon_search``. ``beta`` and ``k`` come from
``(epsilon_anonymization, delta)`` (`coutil.sdc.dp`); ``epsilon_search`` (default 0.1) is split evenly over
``steps + 1`` draws: the walk's ``steps`` and one final draw that picks the released scheme among the visited
pivots. **Deviation from ARX**: ARX releases the visited pivot with the best *exact* score; that choice reads
the data without noise and is not one of the draws the budget accounts for, so here the final choice is one
more exponential-mechanism draw.

Score functions (higher is better; ``n`` = input records, ``d`` = quasi-identifiers; a record is
*suppressed* when sampled out or in a class below k), as ARX's ``getScore`` of the corresponding metrics,
with their sensitivities:

- ``discernibility``: ``-(sum over released classes |E|^2 + n x suppressed) / (n (k^2 / (k - 1) + 1))``
  (``/ 5n`` for k = 1).
- ``granularity`` (ARX's "loss"): ``-(sum over attributes of suppressed + sum over released records of the
  share of the domain their generalized value covers) / (d (k - 1))`` (no ``k - 1`` for k = 1).
- ``entropy`` (SafePub's non-uniform entropy surrogate): ``-(sum over attributes of n x (suppressed cells
  and cells generalized to the single top value) + sum over the other values of their count^2)
  / (n d (k^2 / (k - 1) + 1))`` (``/ 5`` for k = 1).
- ``intensity`` (generalization intensity, ARX's "precision"): ``-(sum over attributes of released x
  level / height + suppressed) / (d (k - 1))``.

The input size ``n`` is treated as public, as ARX's scores do (they use it), and the manifest's counts
reveal it. Hierarchies must be data-independent (`coutil.sdc.hierarchy`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from coutil.errors import InputError
from coutil.sdc import dp
from coutil.sdc.hierarchy import EncodedColumn, Hierarchy

IntArray = NDArray[np.int64]
Levels = tuple[int, ...]

SCORES = ("discernibility", "granularity", "entropy", "intensity")
MECHANISM = "SafePub: (k, beta)-SDGS with a differentially private greedy search (Bild, Kuhn, Prasser 2018)"
MAX_STEPS = 100_000


@dataclass(frozen=True)
class SafePubSettings:
    """The parameters of one SafePub release."""

    epsilon: float
    delta: float
    score: str = "discernibility"
    search_budget: float = 0.1
    steps: int = 300

    def check(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise InputError(f"bad epsilon {self.epsilon!r}: expected a finite number > 0")
        if not (math.isfinite(self.delta) and 0 < self.delta < 1):
            raise InputError(f"bad delta {self.delta!r}: expected a number with 0 < delta < 1")
        if self.score not in SCORES:
            raise InputError(f"bad score {self.score!r}: expected one of {', '.join(SCORES)}")
        if not (math.isfinite(self.search_budget) and 0 < self.search_budget < self.epsilon):
            raise InputError(
                f"bad search budget {self.search_budget!r}: expected a number > 0 and below epsilon {self.epsilon!r}"
            )
        if isinstance(self.steps, bool) or not 1 <= self.steps <= MAX_STEPS:
            raise InputError(f"bad steps {self.steps!r}: expected an integer between 1 and {MAX_STEPS}")


@dataclass(frozen=True)
class SafePubRelease:
    """The output: the released rows (input header, generalized QIs) and the manifest."""

    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    manifest: dict[str, Any]
    levels: Levels
    #: Which input rows were drawn by sampling, and which were released (sampled and in a class of >= k).
    sampled: NDArray[np.bool_]
    released: NDArray[np.bool_]
    parameters: dp.DPParameters


def make_rng(seed: int | None) -> tuple[np.random.Generator, dict[str, Any]]:
    """A seeded generator (reproducible, for tests and experiments) or one seeded from `secrets` (128 bits)."""
    if seed is None:
        return np.random.default_rng(secrets.randbits(128)), {
            "source": "secrets.randbits(128) seeding numpy PCG64 (not reproducible)",
            "seeded": False,
        }
    if isinstance(seed, bool) or seed < 0:
        raise InputError(f"bad seed {seed!r}: expected a non-negative integer")
    return np.random.default_rng(seed), {
        "source": f"numpy PCG64 seeded with {seed} (reproducible: for tests and experiments, not for a real release)",
        "seeded": True,
        "seed": seed,
    }


def exponential_mechanism(scores: Sequence[float], epsilon: float, rng: np.random.Generator) -> int:
    """Index drawn with probability proportional to exp(epsilon x score / 2) (scores already / sensitivity)."""
    x = 0.5 * epsilon * np.asarray(scores, dtype=np.float64)
    w = np.exp(x - x.max())
    cdf = np.cumsum(w)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(w) - 1))


class _Scorer:
    """Classes and scores of the sample under a generalization scheme (cached per scheme)."""

    def __init__(self, columns: Sequence[EncodedColumn], sampled: NDArray[np.bool_], n: int, k: int, score: str):
        self.columns = columns
        self.rows = np.nonzero(sampled)[0]
        self.n, self.k, self.score_name = n, k, score
        self.d = len(columns)
        self.sampled_out = n - len(self.rows)
        self.factor = 5.0 if k == 1 else k * k / (k - 1) + 1.0
        self.cache: dict[Levels, float] = {}

    def classes(self, levels: Levels) -> tuple[IntArray, IntArray]:
        """Class index of each sampled record and the class sizes."""
        key = np.zeros(len(self.rows), dtype=np.int64)
        radix_total = 1
        for col, level in zip(self.columns, levels, strict=True):
            radix = len(col.labels[level])
            if radix_total * radix >= 2**62:
                key = np.unique(key, return_inverse=True)[1].astype(np.int64).reshape(-1)
                radix_total = int(key.max()) + 1 if key.size else 1
            key = key * radix + col.codes[level][self.rows]
            radix_total *= radix
        _, inverse, sizes = np.unique(key, return_inverse=True, return_counts=True)
        return inverse.astype(np.int64).reshape(-1), sizes.astype(np.int64)

    def kept_mask(self, levels: Levels) -> NDArray[np.bool_]:
        inverse, sizes = self.classes(levels)
        return np.asarray(sizes[inverse] >= self.k, dtype=np.bool_)

    def score(self, levels: Levels) -> float:
        cached = self.cache.get(levels)
        if cached is None:
            cached = self.cache[levels] = self._score(levels)
        return cached

    def _score(self, levels: Levels) -> float:
        inverse, sizes = self.classes(levels)
        kept = sizes[inverse] >= self.k
        suppressed = self.sampled_out + int((~kept).sum())
        n, d, k = float(self.n), float(self.d), self.k
        name = self.score_name
        if name == "discernibility":
            big = sizes[sizes >= k].astype(np.float64)
            return -(float(np.sum(big * big)) + n * suppressed) / (n * self.factor)
        kept_rows = self.rows[kept]
        total = 0.0
        for col, level in zip(self.columns, levels, strict=True):
            codes = col.codes[level][kept_rows]
            if name == "granularity":
                total += suppressed + float(col.shares[level][codes].sum())
            elif name == "intensity":
                total += len(kept_rows) * (level / col.height if col.height else 0.0) + suppressed
            else:  # entropy
                root = col.root_code() if level == col.height else -1
                at_root = int((codes == root).sum()) if root >= 0 else 0
                counts = np.bincount(codes[codes != root] if root >= 0 else codes).astype(np.float64)
                total += n * (suppressed + at_root) + float(np.sum(counts * counts))
        if name == "entropy":
            return -total / (n * d) / self.factor
        return -total / d / (k - 1 if k > 1 else 1)


def _predecessors(levels: Levels) -> list[Levels]:
    return [(*levels[:i], levels[i] - 1, *levels[i + 1 :]) for i in range(len(levels)) if levels[i] > 0]


def greedy_search(
    scorer: _Scorer, top: Levels, steps: int, epsilon_draw: float, rng: np.random.Generator
) -> tuple[Levels, list[Levels], int]:
    """ARX's DataDependentEDDPAlgorithm walk, then one more draw among the visited pivots.

    As in ARX, a predecessor joins the candidates unless it is one already, so a former pivot can come back.

    Returns the chosen scheme, the pivots visited (in order, the top first) and the number of draws made.
    """
    pivot = top
    candidates: dict[Levels, float] = {top: scorer.score(top)}
    visited = [top]
    draws = 0
    for _ in range(steps):
        for p in _predecessors(pivot):
            if p not in candidates:
                candidates[p] = scorer.score(p)
        del candidates[pivot]
        if not candidates:
            break
        options = list(candidates)
        pivot = options[exponential_mechanism([candidates[o] for o in options], epsilon_draw, rng)]
        draws += 1
        visited.append(pivot)
    distinct = list(dict.fromkeys(visited))
    chosen = distinct[exponential_mechanism([scorer.score(v) for v in distinct], epsilon_draw, rng)]
    return chosen, visited, draws + 1


def safepub(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    qi: Sequence[str],
    hierarchies: Mapping[str, Hierarchy],
    settings: SafePubSettings,
    *,
    seed: int | None = None,
    source: str = "<input>",
) -> SafePubRelease:
    """Run SafePub on a table of text cells; every QI needs a hierarchy. See the module docstring."""
    settings.check()
    header = tuple(header)
    if not qi:
        raise InputError("no quasi-identifiers: give at least one QI column")
    if len(set(qi)) != len(qi):
        raise InputError(f"a quasi-identifier is listed twice: {', '.join(qi)}")
    for name in qi:
        if name not in header:
            raise InputError(f"{source}: unknown column {name!r}; the columns are {', '.join(header)}")
        if name not in hierarchies:
            raise InputError(f"no hierarchy for the quasi-identifier {name!r} (give --hierarchy {name}=FILE)")
    extra = sorted(set(hierarchies) - set(qi))
    if extra:
        raise InputError(f"hierarchy given for {', '.join(map(repr, extra))}, which is not a quasi-identifier")
    n = len(rows)
    if n == 0:
        raise InputError(f"{source}: no records")
    rng, randomness = make_rng(seed)
    epsilon_anon = settings.epsilon - settings.search_budget
    params = dp.parameters_for(epsilon_anon, settings.delta)

    index = [header.index(name) for name in qi]
    columns = [hierarchies[name].encode([row[j] for row in rows]) for name, j in zip(qi, index, strict=True)]
    sampled = rng.random(n) < params.beta
    scorer = _Scorer(columns, sampled, n, params.k, settings.score)
    top = tuple(c.height for c in columns)
    epsilon_draw = settings.search_budget / (settings.steps + 1)
    chosen, visited, draws = greedy_search(scorer, top, settings.steps, epsilon_draw, rng)

    kept_in_sample = scorer.kept_mask(chosen)
    released = np.zeros(n, dtype=np.bool_)
    released[scorer.rows[kept_in_sample]] = True
    out_rows: list[tuple[str, ...]] = []
    for i in np.nonzero(released)[0].tolist():
        cells = list(rows[i])
        for col, level, j in zip(columns, chosen, index, strict=True):
            cells[j] = col.labels[level][int(col.codes[level][i])]
        out_rows.append(tuple(cells))

    n_sampled = int(sampled.sum())
    manifest: dict[str, Any] = {
        "mechanism": MECHANISM,
        "privacy": {
            "model": "(epsilon, delta)-differential privacy",
            "epsilon": settings.epsilon,
            "delta": params.delta,
            "delta_target": settings.delta,
        },
        "budget": {
            "epsilon_anonymization": epsilon_anon,
            "epsilon_search": settings.search_budget,
            "steps": settings.steps,
            "draws": draws,
            "epsilon_per_draw": epsilon_draw,
            "final_choice": "exponential mechanism among the visited pivots (ARX keeps the best exact score)",
        },
        "beta": params.beta,
        "k": params.k,
        "k_arx": params.k_arx,
        "score": settings.score,
        "quasi_identifiers": list(qi),
        "hierarchies": [hierarchies[name].describe() for name in qi],
        "levels": {name: int(level) for name, level in zip(qi, chosen, strict=True)},
        "heights": {name: c.height for name, c in zip(qi, columns, strict=True)},
        "pivots_visited": len(visited),
        "records": {
            "input": n,
            "sampled_out": n - n_sampled,
            "suppressed": n_sampled - int(released.sum()),
            "released": int(released.sum()),
        },
        "randomness": randomness,
        "assumptions": [
            "the input size n is public (the score functions use it, as ARX's do, and these counts reveal it)",
            "the hierarchies are public and chosen without looking at the data",
            "each record is one person; the sampling is the mechanism's own, not the survey's non-response",
        ],
    }
    return SafePubRelease(header, out_rows, manifest, chosen, sampled, released, params)
