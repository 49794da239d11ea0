"""A deviating collector that explains away the victim's refusal of a run outside her group (SPEC §3, found by an
attacker of the auditor's `_covered` rule, `coutil.round.verify`).

- ``cover-run``: the victim's group (one of more than k members, as ``erase-complaints`` picks it) starts its first
  run with every member and the k - 1 registrations nearest to her outside it (``isolate-victim`` with
  ``via = "run"``, her group kept). Her assign does not cover it: she fetches hers and waits, as do her fellows.
  At the deadline the next run keeps her fellows, excludes her `silent` (no sooner than the deadline) and states
  the outsiders `merged` (a statement nothing else checks in a run that goes on); her fellows take it, she refuses
  (`run_not_in_group`). Then it signs her an assign it never delivers (to a topic nobody reads; the transcript
  keeps a subject's latest assign) whose members cover that run: an excluded member's assign only has to be
  well-formed, and the auditor read her complaint as a merge's assign a broker held past the step
  (`answer-old-assign`): `coutil verify` passed the round (3 of 3 seeds) although it ran her with members of
  other groups. Now the run her complaint is explained by must be one of members whose assigns all name her
  group (the assigns `roster` and `grouping` hold to the record holders and to MDAV's merges), and it fails.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from coutil.adversary.collector import IsolateVictim
from coutil.protocol import topics
from coutil.protocol.collector_groups import GroupState
from coutil.protocol.events import MemberExcluded
from coutil.protocol.messages import Assign
from coutil.protocol.node import Outgoing

__all__ = ["CoverRun"]


class CoverRun(IsolateVictim):
    """Runs the victim with outsiders beside her group, then covers her refusal with an assign it never sent."""

    NAME = "cover-run"
    PARAMS: ClassVar[dict[str, object]] = {"victim": 0, "members": "honest", "via": "run"}
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {"members": ("honest",), "via": ("run",)}

    _label: int | None = None
    _outsiders: tuple[bytes, ...] = ()
    _isolating: tuple[bytes, ...] = ()

    def _start_run(self, group: GroupState, excluded: tuple[tuple[bytes, str], ...], now: float) -> list[Outgoing]:
        if self.deviated or group.run != -1 or self._qi_matrix is None:
            return super(IsolateVictim, self)._start_run(group, excluded, now)
        if self._label is None:
            self._label = self._victim_above_k()
        if group.label != self._label or self.victim_key is None:
            return super(IsolateVictim, self)._start_run(group, excluded, now)
        victim = self._order.index(self.victim_key)
        labels = np.array([self._group_of[k] for k in self._order])
        self._outsiders = tuple(self._order[i] for i in self._chosen(self._qi_matrix, labels, victim))
        group.members = self._isolating = tuple(sorted(group.members + self._outsiders))
        self.deviated = True
        return super(IsolateVictim, self)._start_run(group, excluded, now)

    def _group_timeout(self, group: GroupState, now: float) -> list[Outgoing]:
        victim = self.victim_key
        if group.label != self._label or group.run != 0 or not self._outsiders or victim is None:
            return super()._group_timeout(group, now)
        self._excluded[victim] = "silent"
        self._resend.cancel(("assign", victim), acknowledged=False)
        self._event(MemberExcluded(now, group.label, "silent", topics.sid_of(victim)))
        group.set_members(tuple(m for m in group.members if m != victim and m not in self._outsiders),
                          self._index_of)
        out = self._start_run(group, ((victim, "silent"), *((key, "merged") for key in self._outsiders)), now)
        # Her assign, covering the run she refused, signed and never delivered: the transcript's latest of hers.
        index = self._index_of(victim)
        assert self._tree is not None
        cover = Assign(self.round_id, self.public_key, victim, index, self._tree.proof(index), self._tree.root,
                       group.label, self._isolating, tuple(float(v) for v in self._centroid_of(group)),
                       self._fellows(victim, self._isolating))
        out.append(Outgoing(topics.inbox(self.round_id, bytes(32)), self._sign(cover)))
        self._outsiders = ()
        return out
