"""What one MQTT connection of `coutil.net.hosting.host_nodes` knows of the nodes it serves.

- `HostedNode`: one hosted node with its outbox, subscriptions, timer and traffic counters;
- `Connection`: one MQTT client's state: the nodes it serves, their queued messages, its broker-side
  subscriptions (with the covering filters of `DriverOptions.coarse_subscriptions`) and the routing of
  the messages it receives to the hosted nodes subscribed to them (`Connection.route`,
  `Connection.targets`).

Plain state without I/O (so it is tested without a broker); the driver in `coutil.net.hosting`
makes the node calls, talks to the broker and reads and writes these attributes.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque

from coutil.net.burst import BurstCheck
from coutil.net.mqtt import NodeTraffic
from coutil.net.routing import SubscriptionIndex
from coutil.protocol import codec, topics
from coutil.protocol.node import Node, Outgoing


class HostedNode:
    """One node with its outbox, subscriptions, timer and counters."""

    def __init__(self, index: int, node: Node, client_id: str) -> None:
        self.index = index
        self.node = node
        self.client_id = client_id
        self.outbox: deque[Outgoing] = deque()
        #: Identities of the queued messages (a node re-sends the very same `Outgoing` object).
        self.queued: set[int] = set()
        self.subscribed: frozenset[str] = frozenset()
        self.started = False
        self.timer_due: float | None = None
        #: What the node was last told about its connection (nodes start believing it is up).
        self.transport_up = True
        self.traffic = NodeTraffic()
        self.connection: Connection | None = None


class Connection:
    """One MQTT client and the nodes it serves, with the routing of received messages to them."""

    def __init__(self, client_id: str, nodes: list[HostedNode], multiplexed: bool, coarse: bool = False) -> None:
        self.client_id = client_id
        self.nodes = nodes
        self.multiplexed = multiplexed
        #: Subscribe at the broker to covering filters (see `DriverOptions.coarse_subscriptions`).
        self.coarse = coarse and multiplexed
        self.dirty = asyncio.Event()
        #: Broker-side filters routed (`follow`) but not yet subscribed or unsubscribed at the broker (in
        #: order; the later of two operations on one filter cancels the earlier), and the retained messages
        #: to hand to nodes that joined a filter the connection already had.
        self.to_subscribe: dict[str, None] = {}
        self.to_unsubscribe: dict[str, None] = {}
        self.late: list[tuple[HostedNode, str]] = []
        #: Nodes with queued messages, in the order they queued them.
        self.sending: deque[HostedNode] = deque()
        self.sending_set: set[int] = set()
        #: Broker-side subscriptions with the number of hosted node filters they serve.
        self.refcount: dict[str, int] = {}
        #: Broker-side subscriptions of a multiplexed connection that no hosted node wants any more,
        #: left in place (see `route`).
        self.lingering: set[str] = set()
        self.routes: SubscriptionIndex[HostedNode] = SubscriptionIndex()
        #: The retained message a multiplexed connection holds per topic (bulletins; members' run_keys until
        #: cleared, SPEC §6), to hand to a node that subscribes later: the broker re-sends a retained message
        #: only on a new SUBSCRIBE, and the connection already has one (SPEC §5).
        self.retained: dict[str, bytes] = {}
        #: Received messages not yet handed to all their targets, oldest first (the driver's ``deliver_backlog``
        #: hands them out). Targets None: routed when the message's turn comes, after the messages
        #: ahead of it (which may make a node subscribe to its topic).
        self.backlog: deque[tuple[str, bytes, list[HostedNode] | None]] = deque()
        #: Bytes of the messages in the backlog or being checked ahead (bounded by ``max_backlog_bytes``).
        self.backlog_bytes = 0
        self.backlog_ready = asyncio.Event()
        #: Checks bursts of received messages ahead of the node (`coutil.net.burst`); every message
        #: then goes through the backlog.
        self.check: BurstCheck | None = None
        #: An exception a node raised while handling a message (a bug: it ends hosting).
        self.error: BaseException | None = None
        self.failed = asyncio.Event()
        self.ever_connected = False
        #: Messages handed to the client whose broker acknowledgement has not come yet.
        self.in_flight = 0
        self.wire = NodeTraffic()  # what actually crossed this connection's socket
        self.jitter = random.Random(client_id)  # not the global `random`: per-connection, seeded
        for hosted in nodes:
            hosted.connection = self

    def release_backlog(self, size: int) -> None:
        """``size`` bytes of messages left the backlog (handed to their nodes)."""
        self.backlog_bytes -= size

    def reset(self) -> None:
        """Clean session: the broker forgot every subscription; every node's filters are routed and
        subscribed again."""
        self.refcount.clear()
        self.lingering.clear()
        self.routes.clear()
        self.to_subscribe.clear()
        self.to_unsubscribe.clear()
        self.late.clear()
        for hosted in self.nodes:
            hosted.subscribed = frozenset()
            self.follow(hosted)

    def follow(self, hosted: HostedNode) -> None:
        """Route to ``hosted`` what its current subscriptions match, from the next message handed
        out on (the driver calls this right after each node call); the broker-side SUBSCRIBEs and
        UNSUBSCRIBEs it takes wait in ``to_subscribe``/``to_unsubscribe`` for the driver's flusher.

        Routing at once, not when the SUBSCRIBE leaves: a fellow member's run_keys may already be on
        its way to this connection for another hosted node, behind the message that made this one
        subscribe (SPEC §5: the host hands a node what it would have received on its own)."""
        wanted = hosted.node.subscriptions()
        if wanted == hosted.subscribed:
            return
        new_filters, gone_filters, shared = self.route(hosted, wanted)
        for topic_filter in new_filters:
            self.to_unsubscribe.pop(topic_filter, None)
            self.to_subscribe[topic_filter] = None
        for topic_filter in gone_filters:
            self.to_subscribe.pop(topic_filter, None)
            self.to_unsubscribe[topic_filter] = None
        self.late.extend((hosted, f) for f in shared if f in self.retained)

    def keep_retained(self, topic: str, payload: bytes) -> None:
        """Note a message received on a multiplexed connection: a bulletin, or a member's run_keys
        (published retained), is what a node joining ``topic`` later is handed; an empty payload on a
        member's topic clears hers."""
        if topics.is_bulletin(topic):
            self.retained[topic] = payload
        elif topics.is_subject_group(topic):
            if not payload:
                self.retained.pop(topic, None)
            elif codec.peek_tag(payload) == "run_keys":
                self.retained[topic] = payload

    def set_connected(self, connected: bool) -> None:
        self.wire.connected = connected
        for hosted in self.nodes:
            hosted.traffic.connected = connected

    def targets(self, topic: str) -> set[HostedNode]:
        return self.routes.match(topic)

    def route(self, hosted: HostedNode, wanted: frozenset[str]) -> tuple[list[str], list[str], list[str]]:
        """Update the routes of one node; (filters to subscribe, to unsubscribe, already subscribed).

        A multiplexed connection never unsubscribes: a filter no hosted node wants lingers at the
        broker, and what still arrives on it is routed to nobody. mosquitto 2.0 looks a client's
        subscriptions up one by one on every SUBSCRIBE and UNSUBSCRIBE (measured: 100,000 filters on
        one client cost it 2.4 s to subscribe, 2.1 s to unsubscribe, 0.6 s for 50,000): the 110,000
        group topics a worker drops at 10^5 subjects, when its subjects send their verdicts, kept the
        broker busy for about 25 s while the worker's publishes waited behind the UNSUBACKs.
        """
        new_filters: list[str] = []
        gone_filters: list[str] = []
        shared: list[str] = []
        for topic_filter in wanted - hosted.subscribed:
            self.routes.add(topic_filter, hosted)
            broker_filter = topics.covering_filter(topic_filter) if self.coarse else topic_filter
            count = self.refcount.get(broker_filter, 0)
            self.refcount[broker_filter] = count + 1
            if count or broker_filter in self.lingering:
                self.lingering.discard(broker_filter)
                shared.append(topic_filter)
            else:
                new_filters.append(broker_filter)
                if broker_filter != topic_filter:
                    # The cover may have been subscribed before (and its retained messages seen).
                    shared.append(topic_filter)
        for topic_filter in hosted.subscribed - wanted:
            self.routes.discard(topic_filter, hosted)
            broker_filter = topics.covering_filter(topic_filter) if self.coarse else topic_filter
            count = self.refcount.get(broker_filter, 0) - 1
            if count <= 0:
                self.refcount.pop(broker_filter, None)
                if self.multiplexed:
                    self.lingering.add(broker_filter)
                else:
                    gone_filters.append(broker_filter)
            else:
                self.refcount[broker_filter] = count
        hosted.subscribed = wanted
        return new_filters, gone_filters, shared
