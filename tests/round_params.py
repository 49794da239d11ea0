"""Round parameters for tests that sign an announce by hand (a subject node fed messages directly)."""

from __future__ import annotations

from coutil.protocol import crypto
from coutil.protocol.config import TRANSCRIPT_COMMITMENT
from coutil.protocol.messages import RoundParams


def round_params(*, qi: tuple[str, ...] = ("a", "b"), confidential: tuple[str, ...] = ("c",), k: int = 3,
                 register_deadline: float = 100.0, step_timeout: float = 10.0) -> RoundParams:
    """An MDAV round's parameters as an honest collector announces them (its round key fixed, the transcript
    commitment in the manifest)."""
    return RoundParams(
        qi_names=qi, confidential_names=confidential, k=k, method="mdav", register_deadline=register_deadline,
        step_timeout=step_timeout, audit_deadline_after_release=20.0,
        collector_kx=crypto.KxKey(bytes(range(1, 33))).public, min_permutation_distance=0, random_records=50,
        alpha=0.05, manifest=(TRANSCRIPT_COMMITMENT,))
