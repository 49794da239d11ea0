"""The auditor's check of a release's privacy label (manifest.json ``privacy``, SPEC §9.1).

The collector writes the label; data users read it to know whether a release is (epsilon, delta)-differentially
private. Nothing signed the label, so a collector could claim the guarantee for a round in which the theorem does
not hold (an MDAV round, a member excluded `silent`, a class merged, a k too small for the claimed delta), and
data users would believe it. The auditor recomputes the label from the signed round with the collector's own
function (`round_privacy_label`): the announce's parameters, the signed release's group sizes, the signed
exclusions. One condition cannot be checked by anyone but each subject: that she drew her participation with the
announced beta on her own device (SPEC §9.1); the check says so.
"""

from __future__ import annotations

import math

from coutil.round.privacy_label import round_privacy_label
from coutil.round.verify_roster import Check, VerifiedRound, need

#: The label's values that must equal the recomputed ones when the guarantee is claimed.
CLAIMED_VALUES = ("mechanism", "epsilon", "delta", "k", "beta")


def _same(claimed: object, recomputed: object) -> bool:
    if isinstance(claimed, bool) or isinstance(recomputed, bool):
        return claimed is recomputed
    if isinstance(claimed, (int, float)) and isinstance(recomputed, (int, float)):
        return math.isclose(float(claimed), float(recomputed), rel_tol=1e-12, abs_tol=0.0)
    if isinstance(claimed, dict) and isinstance(recomputed, dict):
        return claimed.keys() == recomputed.keys() and all(_same(claimed[k], recomputed[k]) for k in recomputed)
    return claimed == recomputed


def check_privacy_label(r: VerifiedRound, check: Check, claimed: object) -> None:
    """``claimed``: manifest.json's ``privacy`` entry (None: the file claims no label)."""
    if claimed is None:
        check.skip("manifest.json claims no privacy label")
        return
    if not isinstance(claimed, dict):
        check.fail(f"manifest.json: privacy is a JSON {type(claimed).__name__}, not an object")
        return
    if not need(r, check):
        return
    assert r.announce is not None
    t = r.transcript
    label = round_privacy_label(dict(r.announce.params.manifest),
                                r.release.group_sizes if r.release is not None else (),
                                t.exclusions.values(), r.release is not None)
    said = claimed.get("differential_privacy")
    if not isinstance(said, bool):
        # "true", 1, "yes": a data user may read a claim into it, which no check then held to the round (found by
        # an attacker of this check: such a label, with any epsilon and delta beside it, passed as "no claim").
        check.fail(f"manifest.json: privacy's differential_privacy is {str(said)[:64]}, neither true nor false")
        return
    if not _same(claimed.get("mechanism"), label["mechanism"]):
        check.fail(f"manifest.json claims mechanism = {str(claimed.get('mechanism'))[:64]}, the signed round gives "
                   f"{label['mechanism']}")
        return
    if not said:
        check.notes.append("manifest.json claims no differential privacy"
                           + ("; the signed round would support it" if label["differential_privacy"] else ""))
        return
    if not label["differential_privacy"]:
        conditions = label.get("conditions")
        failing = [name for name, held in conditions.items() if not held] if isinstance(conditions, dict) else []
        check.fail("manifest.json claims (epsilon, delta)-differential privacy, which the signed round does not "
                   "support: " + (", ".join(failing) if failing else str(label.get("why", ""))))
        return
    for key in CLAIMED_VALUES:
        if not _same(claimed.get(key), label[key]):
            check.fail(f"manifest.json claims {key} = {str(claimed.get(key))[:64]}, the signed round gives "
                       f"{label[key]}")
    # The rest of a claimed label too (delta_achieved, conditions, suppressed): a data user reads all of it, and the
    # guarantee holds, so the collector's label is exactly the recomputed one (found by an attacker of this check:
    # a delta_achieved of 1e-30, conditions of its own, keys of its own passed beside a true claim).
    others = [key for key in sorted(set(claimed) | set(label), key=str)
              if key not in CLAIMED_VALUES and not _same(claimed.get(key), label.get(key))]
    if others:
        names = ", ".join(str(key)[:64] for key in others[:8])
        check.fail(f"manifest.json's label is not the signed round's in {names}"
                   + (f" (and {len(others) - 8} more)" if len(others) > 8 else "")
                   + "".join(f"; {key}: claims {str(claimed.get(key))[:64]}, the signed round gives "
                             f"{str(label.get(key))[:120]}" for key in others[:3]))
    if check.status == "pass" and not (t.shuffle_starts_included and t.registrations_included):
        # Which members were excluded, and why, is the collector's unsigned summary without the shuffle_starts; which
        # classes were below k, unknown without the registrations: the label's conditions would rest on its word.
        check.skip("the label's conditions rest on the signed exclusion statements and the recomputed classes: the "
                   "transcript lacks " + " and ".join(
                       what for what, held in (("the shuffle_starts", t.shuffle_starts_included),
                                               ("the registrations", t.registrations_included)) if not held)
                   + ", so the (epsilon, delta) claim was not verified")
        return
    if check.status == "pass":
        check.notes.append(f"the ({label['epsilon']}, {label['delta']})-differential privacy label holds on the signed "
                           "round (announced bins, k and beta; released groups; exclusions); that each subject drew "
                           "her participation with beta is on her device, checked by nobody else")
