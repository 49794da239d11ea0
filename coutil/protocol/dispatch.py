"""Typed transition tables: state -> message class -> handler (protocol/SPEC.md §11 draws them).

A node's table (``TRANSITIONS`` in `coutil.protocol.subject` and `coutil.protocol.collector`) is the
single source for its dispatch and for the spec's state diagrams. A handler is an unbound method
taking the concrete message class it is listed under; `on` pairs the two, so that the table is
checked by mypy entry by entry, and the node looks its handler up by ``type(message)``. The entry
calls the node's method *of that name* (bound, looked up on the node), so a subclass overriding a
handler is dispatched to its override.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeAlias, TypeVar

from coutil.protocol.messages import (
    Announce,
    Assign,
    Batch,
    Blame,
    Fetch,
    GroupDone,
    Message,
    Register,
    RegisterAck,
    Release,
    Reveal,
    RevealOpen,
    Roster,
    RunKeys,
    ShuffleStart,
    Submit,
    Verdict,
    VerdictAck,
    Vote,
)
from coutil.protocol.node import Outgoing

NodeT = TypeVar("NodeT")
ContextT = TypeVar("ContextT")
#: One message class (constrained, not bound to the union: ``type[M]`` is then one of the classes,
#: a valid key of a ``dict[type[Message], ...]``).
M = TypeVar("M", Announce, Register, RegisterAck, Roster, Assign, ShuffleStart, RunKeys, Submit, Batch, Vote,
            RevealOpen, Reveal, Blame, GroupDone, Release, Fetch, Verdict, VerdictAck)

#: (node, message, context, now) -> outgoing; the context is what the node's receive decoded
#: besides the message (the subject: the payload digest; the collector: the whole `codec.Decoded`).
Handler: TypeAlias = Callable[[NodeT, Message, ContextT, float], list[Outgoing]]


def on(
    cls: type[M], handler: Callable[[NodeT, M, ContextT, float], list[Outgoing]]
) -> tuple[type[Message], Handler[NodeT, ContextT]]:
    """A table entry: messages of class ``cls`` go to ``handler``, which takes exactly that class."""

    name = handler.__name__

    def dispatch(node: NodeT, message: Message, context: ContextT, now: float) -> list[Outgoing]:
        # The one check that makes the table typed: nodes look handlers up by type(message), so
        # it always holds; it replaces a narrowing assert in every handler.
        if not isinstance(message, cls):
            raise TypeError(f"{message.TAG} routed to the handler of {cls.TAG}")
        # Through the node's bound method of that name, not the function listed: a subclass that
        # overrides a handler (coutil.adversary's deviations) is dispatched to its override.
        bound: Callable[[M, ContextT, float], list[Outgoing]] = getattr(node, name)
        return bound(message, context, now)

    return cls, dispatch


def table(*entries: tuple[type[Message], Handler[NodeT, ContextT]]) -> dict[type[Message], Handler[NodeT, ContextT]]:
    """One state's row: message class -> handler, in the order given (the spec lists them so)."""
    row = dict(entries)
    if len(row) != len(entries):
        raise ValueError("a message class listed twice in one state")
    return row
