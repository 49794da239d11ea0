"""One shuffle run of a subject's group as she sees it (`SubjectRun`), and the rule for a member's message of a step.

`SubjectCore` (`coutil.protocol.subject_core`) drives the run; this module holds what it remembers of it: the
members' keys, submissions, batches, votes and blames she took, her own keys, onion, permutation, vote and reveal,
and the exact envelopes her blame would carry (SPEC §8.4).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import TypeVar

from coutil.errors import RemoteProtocolError
from coutil.protocol import crypto
from coutil.protocol.messages import Blame, Vote
from coutil.protocol.node import Outgoing
from coutil.protocol.shuffle import batch_digest

__all__ = ["SubjectRun", "keep_first"]

_K = TypeVar("_K")
_V = TypeVar("_V")


def keep_first(store: MutableMapping[_K, _V], key: _K, value: _V, duplicate: str, equivocation: str) -> None:
    """A member's message for a step of the run: the first copy is kept; the same again is IGNORE
    ``duplicate``, a different one REJECT ``equivocation`` (SPEC §7.2); each with its detail."""
    previous = store.get(key)
    if previous is None:
        store[key] = value
        return
    if previous != value:
        raise RemoteProtocolError("equivocation", equivocation)
    raise RemoteProtocolError("duplicate", duplicate, ignore=True)


@dataclass
class SubjectRun:
    """One shuffle run of the subject's group, as she sees it."""

    number: int
    members: tuple[bytes, ...]
    outer: crypto.KxKey
    inner: crypto.KxKey
    #: Her view of the run (SPEC §8.4), compared with every member's run_keys and vote.
    members_digest: bytes = b""
    keys: dict[bytes, tuple[bytes, bytes]] = field(default_factory=dict)  # member -> (outer, inner)
    submissions: dict[bytes, bytes] = field(default_factory=dict)
    batches: dict[int, tuple[bytes, ...]] = field(default_factory=dict)
    votes: dict[bytes, Vote] = field(default_factory=dict)
    my_sealed: bytes | None = None
    #: Opens the commitment to ``my_sealed`` sent with her submission (revealed only in a blame).
    my_salt: bytes = bytes(32)
    #: Blames received (she blames on a no-go vote, never on a blame: she keeps going).
    blames: dict[bytes, Blame] = field(default_factory=dict)
    my_permutation: tuple[int, ...] = ()
    my_vote: bool | None = None
    final_digest: bytes | None = None
    reveal_open: bool = False
    #: The final batch a reveal_open that came before hers named (compared once she has it).
    reveal_open_digest: bytes | None = None
    #: Her submission and her batch as published (re-sent with her blame).
    my_submit: Outgoing | None = None
    my_batch: Outgoing | None = None
    #: The exact envelopes of the first no-go vote of the run she took (hers, if she voted no-go) and of the
    #: messages she took, by (step, sender): her input (step 0: the submissions she mixed as mixer 1, hers
    #: included; else the batch of step - 1) and the final batch. Her blame carries them (SPEC §8.4).
    no_go_vote: bytes | None = None
    taken: dict[tuple[int, bytes], bytes] = field(default_factory=dict)
    #: Another final batch its mixer signed than the one she took (relayed by the collector, which holds it):
    #: with hers, the proof of the final mixer's equivocation her blame carries in place of a no-go vote.
    second_final: bytes | None = None
    #: The final mixer's vote as received: one naming another final batch than hers, which she took, proves her
    #: equivocation with it (an honest final mixer votes on her own batch); her blame carries it (SPEC §8.4).
    final_mixer_vote: bytes | None = None
    revealed: bool = False
    blamed: bool = False
    #: The run's keys as she used them (`keys_digest`), once she holds every member's.
    keys_digest: bytes | None = None

    def taken_envelopes(self) -> tuple[bytes, ...]:
        """What her blame carries as ``taken``: submissions first (in mixing order), then batches by step."""
        taken = tuple(self.taken[key] for key in sorted(self.taken))
        return taken if self.second_final is None else (*taken, self.second_final)

    def final_mixer_contradicted(self) -> bool:
        """The final batch she took and its mixer's vote name different final batches: two things an honest final
        mixer never signs together (a broker showed the collector another final batch of hers, and kept the relay
        of it from the members, found by an attacker)."""
        if self.final_mixer_vote is None:
            return False
        mixer = self.members[-1]
        final, vote = self.batches.get(len(self.members)), self.votes.get(mixer)
        if final is None or vote is None or (len(self.members), mixer) not in self.taken:
            return False
        # (Her own vote's digest once she voted: no hash per message on the hot path.)
        return vote.final_digest != (self.final_digest if self.final_digest is not None else batch_digest(final))
