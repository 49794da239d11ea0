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
