"""A multiplexed connection's subscriptions, without a broker: filters its nodes dropped are left in place."""

from __future__ import annotations

from coutil.net.connection import Connection, HostedNode
from tests.net.helpers import IdleNode


class _Quiet(IdleNode):
    """A node that does nothing (only its routes matter here)."""

    client_id = "quiet"


def test_a_multiplexed_connection_leaves_dropped_filters_subscribed_and_reuses_them() -> None:
    """mosquitto pays per subscription of the client on every UNSUBSCRIBE: a multiplexed connection
    keeps a filter its nodes dropped (routing what still comes to nobody), a single node's
    connection unsubscribes it."""
    for multiplexed in (True, False):
        first, second = HostedNode(0, _Quiet(), "a"), HostedNode(1, _Quiet(), "b")
        connection = Connection("c", [first, second], multiplexed=multiplexed)
        new, gone, shared = connection.route(first, frozenset({"t/x"}))
        assert (new, gone, shared) == (["t/x"], [], [])
        new, gone, shared = connection.route(first, frozenset())
        assert (new, gone, shared) == ([], [] if multiplexed else ["t/x"], [])
        assert connection.targets("t/x") == set()  # routed to nobody
        # Wanted again (by another node): already subscribed at the broker, or subscribed anew.
        new, gone, shared = connection.route(second, frozenset({"t/x"}))
        assert (new, gone, shared) == (([], [], ["t/x"]) if multiplexed else (["t/x"], [], []))
        assert connection.targets("t/x") == {second}
        connection.reset()  # a new session: the broker forgot everything
        assert connection.route(first, frozenset({"t/x"}))[0] == ["t/x"]


class _Joining(IdleNode):
    """A node whose subscriptions the test sets (as a subject's grow when she learns her group)."""

    client_id = "joining"

    def __init__(self) -> None:
        self.wanted: frozenset[str] = frozenset()

    def subscriptions(self) -> frozenset[str]:
        return self.wanted


def test_a_node_is_routed_as_soon_as_it_subscribes_and_the_broker_is_asked_once() -> None:
    """`Connection.follow` (called by the driver after every node call) routes at once: a message
    the connection receives next on that topic reaches the node, even before the SUBSCRIBE left; a
    second node joining a filter the connection already has costs no SUBSCRIBE and is handed the
    bulletin it missed. Routing only when the flusher sends the SUBSCRIBE (as before) left a member
    without a fellow's run_keys that arrived for another member of the same connection meanwhile."""
    first, second = _Joining(), _Joining()
    a, b = HostedNode(0, first, "a"), HostedNode(1, second, "b")
    connection = Connection("c", [a, b], multiplexed=True)
    group, roster = "coutil/v2/r/s/x/group", "coutil/v2/r/c/roster"
    connection.bulletins[roster] = b"roster"
    first.wanted = frozenset({group, roster})
    connection.follow(a)
    assert connection.targets(group) == {a}
    assert sorted(connection.to_subscribe) == [roster, group] and connection.late == []
    second.wanted = frozenset({group, roster})
    connection.follow(b)
    assert connection.targets(group) == {a, b}
    assert sorted(connection.to_subscribe) == [roster, group]  # nothing more for the broker
    assert connection.late == [(b, roster)]
    connection.follow(b)  # nothing changed: nothing to do
    assert sorted(connection.to_subscribe) == [roster, group] and connection.late == [(b, roster)]
    connection.reset()  # a new session: routed again, and subscribed again at the broker
    assert connection.targets(group) == {a, b}
    assert sorted(connection.to_subscribe) == [roster, group] and connection.late == [(b, roster)]
