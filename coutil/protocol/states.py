"""The top-level states of the two state machines (protocol/SPEC.md §11).

`enum.StrEnum`: a state compares equal to its name (``node.state == "done"``) and serializes as it
in JSON, so drivers and traces see the same strings as before the states were typed.
"""

from __future__ import annotations

import enum


class SubjectState(enum.StrEnum):
    AWAIT_ANNOUNCE = "await_announce"
    REGISTERING = "registering"
    REGISTERED = "registered"
    SHARING = "sharing"
    AWAIT_RELEASE = "await_release"
    VERDICT_SENT = "verdict_sent"
    DONE = "done"
    EXCLUDED = "excluded"
    INCOMPATIBLE = "incompatible"
    #: A SafePub round's own coin (probability beta, on her device) said she does not take part.
    SAMPLED_OUT = "sampled_out"


class CollectorState(enum.StrEnum):
    #: Built but not started (`CollectorNode.start` announces the round).
    CREATED = "created"
    REGISTRATION = "registration"
    SHARING = "sharing"
    AUDITING = "auditing"
    DONE = "done"
    ABORTED = "aborted"
