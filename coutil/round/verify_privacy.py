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
    if claimed.get("differential_privacy") is not True:
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
    if check.status == "pass":
        check.notes.append(f"the ({label['epsilon']}, {label['delta']})-differential privacy label holds on the signed "
                           "round (announced bins, k and beta; released groups; exclusions); that each subject drew "
                           "her participation with beta is on her device, checked by nobody else")
