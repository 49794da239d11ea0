"""What a round's release may claim (protocol/SPEC.md §9.1): (epsilon, delta)-differential privacy only for a
SafePub round in which every condition of the theorem held. One function for the collector, which writes the
label into manifest.json, and for the auditor (`coutil verify`, `coutil.round.verify_privacy`), which recomputes
it from the signed transcript: a label claimed by a collector is worth only what the signed round supports.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from coutil.sdc.dp import delta_for, epsilon_from_beta

MDAV_MECHANISM = "MDAV microaggregation (k-anonymity)"
SAFEPUB_MECHANISM = "SafePub: (k, beta)-SDGS with fixed bins"


def _number(entries: Mapping[str, str], key: str) -> float | None:
    """A manifest entry as a finite float; None when absent or not a number (a signed announce may hold anything)."""
    try:
        value = float(entries[key])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def round_privacy_label(entries: Mapping[str, str], group_sizes: Sequence[int], exclusion_reasons: Iterable[str],
                        completed: bool) -> dict[str, object]:
    """The label of a round with the manifest ``entries`` (the announce's: method, k, safepub_*), the released
    ``group_sizes``, the reasons of its exclusions and whether it completed.

    Conditions (SPEC §9.1, Li, Qardaji and Su's (k, beta)-SDGS as SafePub uses it): the bins were fixed in the
    signed announce, before any registration (a scheme that does not look at the data); each subject drew her own
    participation with the announced beta; every class below k was suppressed, none merged; nobody was left out
    for any other reason (a silent or excluded member changes which records are released in a way the theorem does
    not cover); and beta and k give the claimed (epsilon, delta). An MDAV release is never labelled DP: MDAV is
    data-dependent and is not covered by the theorem.
    """
    if entries.get("method") != "safepub":
        return {"mechanism": MDAV_MECHANISM, "differential_privacy": False,
                "why": "MDAV forms groups from the data themselves: no differential-privacy guarantee"}
    k_value = _number(entries, "k")
    k = int(k_value) if k_value is not None and k_value.is_integer() and k_value >= 1 else None
    beta, epsilon, delta = (_number(entries, key) for key in ("safepub_beta", "safepub_epsilon", "safepub_delta"))
    reasons = Counter(exclusion_reasons)
    conditions: dict[str, bool] = {
        "scheme_fixed_in_the_announce": bool(entries.get("safepub_bins")),
        "subjects_sample_themselves_with_beta": beta is not None and 0.0 < beta <= 1.0,
        "classes_below_k_suppressed": k is not None and all(size >= k for size in group_sizes),
        "no_exclusion_but_suppression": set(reasons) <= {"suppressed_class"},
        "round_completed": completed,
    }
    achieved: float | None = None
    if k is not None and beta is not None and epsilon is not None and delta is not None and epsilon > 0 \
            and 0 < delta < 1 and 0 < beta < 1:
        conditions["beta_within_epsilon"] = epsilon_from_beta(beta) <= epsilon * (1 + 1e-12)
        achieved = delta_for(k, epsilon, beta) if conditions["beta_within_epsilon"] else None
        conditions["k_gives_delta"] = achieved is not None and achieved < delta
    else:
        conditions["claimed_epsilon_and_delta"] = False
    holds = all(conditions.values())
    return {"mechanism": SAFEPUB_MECHANISM, "differential_privacy": holds,
            "epsilon": epsilon, "delta": delta, "delta_achieved": achieved, "beta": beta, "k": k,
            "conditions": conditions, "suppressed": reasons.get("suppressed_class", 0)}
