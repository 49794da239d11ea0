"""A multiplexed connection's subscriptions, without a broker: filters its nodes dropped are left in place."""

from __future__ import annotations

from coutil.net.connection import Connection, HostedNode
from coutil.protocol import codec, crypto, topics
from coutil.protocol.messages import RunKeys, Vote
from coutil.protocol.node import SeededRandom
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
    connection.retained[roster] = b"roster"
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


def test_the_later_of_two_pending_operations_on_a_filter_wins() -> None:
    """A node that drops a filter and takes it back before the flusher runs stays subscribed at the
    broker (a SUBSCRIBE, SUBSCRIBE, UNSUBSCRIBE in that order would leave it unsubscribed)."""
    node = _Joining()
    hosted = HostedNode(0, node, "a")
    connection = Connection("c", [hosted], multiplexed=False)
    for wanted in ({"t/x"}, set(), {"t/x"}):
        node.wanted = frozenset(wanted)
        connection.follow(hosted)
    assert list(connection.to_subscribe) == ["t/x"] and list(connection.to_unsubscribe) == []
    node.wanted = frozenset()
    connection.follow(hosted)
    assert list(connection.to_subscribe) == [] and list(connection.to_unsubscribe) == ["t/x"]


def test_a_members_run_keys_are_kept_for_a_node_that_subscribes_later_until_she_clears_them() -> None:
    """SPEC §5/§6: run_keys are published retained; a multiplexed connection that already receives a
    member's group topic for one node hands her last run_keys to a node joining that topic later (the
    broker would on a new SUBSCRIBE), drops them at her clear, and keeps no other message of hers."""
    member = crypto.SigningKey.generate(SeededRandom(1))
    round_id = bytes(16)
    topic = topics.subject_group(round_id, member.public)
    keys = codec.encode(RunKeys(round_id, member.public, 0, 0, bytes(32), bytes(32), bytes(32), bytes(32)), member)
    vote = codec.encode(Vote(round_id, member.public, 0, 0, True, bytes(32), bytes(32), bytes(32), bytes(32)), member)
    first, second = _Joining(), _Joining()
    a, b = HostedNode(0, first, "a"), HostedNode(1, second, "b")
    connection = Connection("c", [a, b], multiplexed=True)
    first.wanted = frozenset({topic})
    connection.follow(a)
    connection.keep_retained(topic, keys)
    connection.keep_retained(topic, vote)  # not retained by her: not kept
    second.wanted = frozenset({topic})
    connection.follow(b)
    assert connection.late == [(b, topic)] and connection.retained[topic] == keys
    connection.keep_retained(topic, b"")  # her clear
    assert topic not in connection.retained


def test_a_flood_waiting_for_its_nodes_is_bounded_in_bytes() -> None:
    """Found by an attacker: with bursts checked ahead (the collector from `--expected 5000`), every received
    message waited in the backlog whatever its size: 3 GB of junk in 7 s grew the process to 2.7 GB. Beyond
    `DriverOptions.max_backlog_bytes` a message is dropped and counted; handed out, its bytes are freed."""
    import asyncio

    from coutil.net.hosting import _Host
    from coutil.net.mqtt import DriverOptions, parse_broker_url

    async def main() -> tuple[int, int, int, int]:
        node = HostedNode(0, _Quiet(), "a")
        connection = Connection("c", [node], multiplexed=False)
        connection.route(node, frozenset({"t/x"}))
        connection.check = lambda payloads: asyncio.sleep(0)  # checked ahead: every message waits in the backlog
        host = _Host([connection], [node], parse_broker_url("mqtt://127.0.0.1:1"),
                     DriverOptions(max_backlog_bytes=1000), None)
        for _ in range(30):
            host._on_payload(connection, "t/x", b"x" * 100)
        kept, held, drops = len(connection.backlog), connection.backlog_bytes, connection.wire.drops
        connection.release_backlog(held)
        return kept, held, drops, connection.backlog_bytes

    assert asyncio.run(main()) == (10, 1000, 20, 0)
