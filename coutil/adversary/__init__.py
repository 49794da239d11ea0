"""Deviations: named strategies a round can give to chosen subjects, the collector and the broker (issue 12).

Each strategy is a subclass of the real node (`coutil.protocol.subject.SubjectNode` or
`coutil.protocol.collector.CollectorNode`) that overrides the smallest hook it can: a handler of the
transition table, `_emit` (what a subject signs), `_mix`, `_form_groups`, `_publish_release`, ...
Everything else is the honest code, so a strategy is a faithful model of one deviating party in an
otherwise honest round. A broker strategy (`coutil.adversary.broker`) is not a node: the in-memory
bus consults it for every publication and delivery (it signs nothing, it only routes).
A round file chooses them in its ``[adversary]`` table (`coutil.adversary.plan`);
`coutil.round.nodes` builds the nodes through the same factory for every driver; after an in-memory
round, `coutil.adversary.outcome` says for every deviating node whether it was detected, by whom,
whether it was excluded, and what it can attribute (the leak, against the simulation's ground truth).

The registry maps names to classes by dotted path, so that reading a round file (`coutil.round.setup`)
does not import the protocol stack unless the file has an ``[adversary]`` table.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Subject strategies: name -> "module:class".
SUBJECT_STRATEGIES: dict[str, str] = {
    "silent": "coutil.adversary.subjects:Silent",
    "leave-after-grouping": "coutil.adversary.subjects:LeaveAfterGrouping",
    "tamper": "coutil.adversary.subjects:Tamper",
    "withhold": "coutil.adversary.subjects:Withhold",
    "copycat": "coutil.adversary.subjects:Copycat",
    "false-complaint": "coutil.adversary.subjects:FalseComplaint",
    "unsolicited-blame": "coutil.adversary.subjects:UnsolicitedBlame",
    "garbage-inner": "coutil.adversary.subjects:GarbageInner",
    "misreport-qi": "coutil.adversary.subjects:MisreportQI",
    "misreport-confidential": "coutil.adversary.subjects:MisreportConfidential",
    "free-rider": "coutil.adversary.subjects:FreeRider",
    "key-split": "coutil.adversary.subjects:KeySplit",
    "equivocate": "coutil.adversary.subjects:Equivocate",
    "direct-no-go": "coutil.adversary.subjects:DirectNoGo",
    "bad-key": "coutil.adversary.subjects:BadKey",
    "keys-ahead": "coutil.adversary.subjects:KeysAhead",
    "hide-submit": "coutil.adversary.subjects:HideSubmit",
    "early-no-go": "coutil.adversary.subjects:EarlyNoGo",
    "resubmit": "coutil.adversary.subjects:Resubmit",
    "two-finals": "coutil.adversary.subjects:TwoFinals",
    "wrong-digest": "coutil.adversary.subjects:WrongDigest",
    "late-no-go": "coutil.adversary.subjects:LateNoGo",
}

#: Collector strategies: name -> "module:class".
COLLECTOR_STRATEGIES: dict[str, str] = {
    "rerun-subtract": "coutil.adversary.collector:RerunSubtract",
    "split-view-roster": "coutil.adversary.collector:SplitViewRoster",
    "split-view-release": "coutil.adversary.collector:SplitViewRelease",
    "drop-subject": "coutil.adversary.collector:DropSubject",
    "lure-run": "coutil.adversary.collector:LureRun",
    "isolate-victim": "coutil.adversary.collector:IsolateVictim",
    "fabricate-members": "coutil.adversary.collector:FabricateMembers",
    "publish-below-k": "coutil.adversary.collector:PublishBelowK",
    "erase-complaints": "coutil.adversary.collector:EraseComplaints",
    "route-merge": "coutil.adversary.collector:RouteMerge",
    "split-assign": "coutil.adversary.private_run:SplitAssign",
    "split-announce": "coutil.adversary.private_run:SplitAnnounce",
    "split-roster": "coutil.adversary.private_run:SplitRoster",
    "split-roster-early": "coutil.adversary.private_run:SplitRosterEarly",
    "cover-run": "coutil.adversary.cover_run:CoverRun",
}


#: Broker strategies (the bus's broker, in-memory rounds only): name -> "module:class".
BROKER_STRATEGIES: dict[str, str] = {
    "replay-runs": "coutil.adversary.broker:ReplayRuns",
    "replay-round": "coutil.adversary.broker:ReplayRound",
    "replay-pre-merge": "coutil.adversary.broker:ReplayPreMerge",
    "drop-victim": "coutil.adversary.broker:DropVictim",
    "duplicate": "coutil.adversary.broker:Duplicate",
    "reorder": "coutil.adversary.broker:Reorder",
    "split-retained": "coutil.adversary.broker:SplitRetained",
    "split-keys": "coutil.adversary.broker:SplitKeys",
    "swap-vote": "coutil.adversary.broker:SwapVote",
    "hide-submits": "coutil.adversary.broker:HideSubmits",
    "hide-first-submit": "coutil.adversary.broker:HideFirstSubmit",
    "split-final": "coutil.adversary.broker:SplitFinal",
    "late-final": "coutil.adversary.broker:LateFinal",
    "split-announce": "coutil.adversary.broker:SplitAnnounce",
    "answer-old-assign": "coutil.adversary.broker_assign:AnswerOldAssign",
}


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def subject_strategy(name: str) -> Any:
    """The class of subject strategy ``name`` (KeyError for an unknown name)."""
    return _load(SUBJECT_STRATEGIES[name])


def collector_strategy(name: str) -> Any:
    """The class of collector strategy ``name`` (KeyError for an unknown name)."""
    return _load(COLLECTOR_STRATEGIES[name])


def broker_strategy(name: str) -> Any:
    """The class of broker strategy ``name`` (KeyError for an unknown name)."""
    return _load(BROKER_STRATEGIES[name])


__all__ = ["BROKER_STRATEGIES", "COLLECTOR_STRATEGIES", "SUBJECT_STRATEGIES", "broker_strategy", "collector_strategy",
           "subject_strategy"]
