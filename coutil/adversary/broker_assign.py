"""A deviating broker that answers a merge's target members with their own pre-merge assign (SPEC §3, "broker
operator"; found by an attacker of the fetch path).

- ``answer-old-assign``: after a merge, a member of the target group (not one moved in) gets an assign of her group
  with more members, and the merged run's shuffle_start names members her assign did not; she asks for her assign
  (SPEC §4 share.1 (c)). The broker holds every copy of the new assign to her (the collector's and its answers to her
  fetch) for ``hold`` seconds, less than a step, and meanwhile, ``after`` seconds past the merge, delivers her own
  pre-merge assign again on her inbox: the assign she holds, later than a re-send interval after her fetch, which
  the rule took for the collector's answer. It signs nothing: it only delays a message and replays one it carried.

Kept apart from `coutil.adversary.broker` (module size); registered with the other broker strategies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from coutil.adversary.broker import BrokerStrategy, Copy, Injection, payload_kind
from coutil.errors import RemoteProtocolError
from coutil.protocol import codec, topics
from coutil.protocol.messages import Assign

__all__ = ["AnswerOldAssign"]


class AnswerOldAssign(BrokerStrategy):
    """Holds a merge's new assign from the target group's members and replays their old one (module docstring)."""

    NAME = "answer-old-assign"
    PARAMS: ClassVar[dict[str, object]] = {"hold": 4.0, "after": 2.5}

    def setup(self) -> None:
        #: subject -> her latest assign as carried (group, members, payload).
        self._assigns: dict[bytes, tuple[int, tuple[bytes, ...], bytes]] = {}
        #: subject sid -> (the new assign's payload, held until).
        self._held: dict[str, tuple[bytes, float]] = {}
        self._done: set[bytes] = set()

    def on_publish(self, now: float, sender: str, topic: str, payload: bytes,
                   retain: bool) -> tuple[bool, list[Injection]]:
        if payload_kind(topic, payload) != "assign":
            return True, []
        try:
            message = codec.decode(payload).message
        except RemoteProtocolError:
            return True, []
        if not isinstance(message, Assign) or message.round_id != self.round_id:
            return True, []
        key = message.subject
        earlier = self._assigns.get(key)
        out: list[Injection] = []
        if earlier is not None and earlier[2] != payload and earlier[0] == message.group \
                and set(earlier[1]) < set(message.members) and key not in self._done:
            # A target member of a merge: her new assign held, her old one again once she asked for hers.
            self._done.add(key)
            self._held[topics.sid_of(key)] = (payload, now + self.param_float("hold"))
            inbox = topics.inbox(message.round_id, key)
            out.append(Injection(self.param_float("after"), inbox, earlier[2]))
            self._made(inbox, earlier[2])
            self.actions["injected"] += 1
        if earlier is None or earlier[2] != payload:
            self._assigns[key] = (message.group, message.members, payload)
        return True, out

    def on_deliver(self, now: float, sender: str, receiver: str, topic: str, payload: bytes) -> Sequence[Copy] | None:
        held = self._held.get(receiver.split("-", maxsplit=1)[0])
        if held is None or payload != held[0] or now >= held[1]:
            return None
        self.actions["delayed"] += 1
        self.deviated = True
        return [Copy(delay=held[1] - now)]
