"""Who hears a topic: the subscription index shared by the in-memory bus and the MQTT host.

Both route a published topic to the members whose current filters match it, as a broker does.
Exact filters are indexed in a dict (topic -> members), so routing scales to 10^5 subscribers.
So are filters with a single ``+`` and no ``#``, such as every subject's
``coutil/v2/<round>/s/+/to/<her sid>``: by the topic with that level replaced by ``+`` (a topic of L
levels is looked up L times). Only the few other wildcard filters (``#``, several ``+``: the
collector's, or covers) are matched one by one. (With one-by-one matching of the subjects' directed
filters, a worker hosting 5,000 subjects matched every message against 5,000 filters: a
10^4-subject round took over ten minutes instead of under one.)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from coutil.protocol import topics

M = TypeVar("M", bound=Hashable)


def is_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


class SubscriptionIndex(Generic[M]):
    """Members by topic filter; `match` gives every member with a filter matching a topic."""

    def __init__(self) -> None:
        self._exact: dict[str, set[M]] = {}
        #: Filters with one ``+`` (and no ``#``), by level count: the ``+`` positions in use among them.
        self._single: dict[str, set[M]] = {}
        self._single_positions: dict[int, dict[int, int]] = {}
        self._wild: dict[str, set[M]] = {}

    def _table(self, topic_filter: str) -> dict[str, set[M]]:
        if not is_wildcard(topic_filter):
            return self._exact
        if "#" not in topic_filter and topic_filter.count("+") == 1:
            return self._single
        return self._wild

    def add(self, topic_filter: str, member: M) -> None:
        table = self._table(topic_filter)
        members = table.get(topic_filter)
        if members is None:
            members = table[topic_filter] = set()
            if table is self._single:
                levels = topic_filter.split("/")
                positions = self._single_positions.setdefault(len(levels), {})
                position = levels.index("+")
                positions[position] = positions.get(position, 0) + 1
        members.add(member)

    def discard(self, topic_filter: str, member: M) -> None:
        table = self._table(topic_filter)
        members = table.get(topic_filter)
        if members is not None:
            members.discard(member)
            if not members:
                del table[topic_filter]
                if table is self._single:
                    levels = topic_filter.split("/")
                    positions = self._single_positions[len(levels)]
                    position = levels.index("+")
                    positions[position] -= 1
                    if not positions[position]:
                        del positions[position]

    def update(self, member: M, added: Iterable[str], removed: Iterable[str]) -> None:
        for topic_filter in removed:
            self.discard(topic_filter, member)
        for topic_filter in added:
            self.add(topic_filter, member)

    def match(self, topic: str) -> set[M]:
        found = set(self._exact.get(topic, ()))
        if self._single:
            levels = topic.split("/")
            for position in self._single_positions.get(len(levels), ()):
                members = self._single.get("/".join([*levels[:position], "+", *levels[position + 1:]]))
                if members:
                    found.update(members)
        for topic_filter, members in self._wild.items():
            if topics.matches(topic_filter, topic):
                found.update(members)
        return found

    def clear(self) -> None:
        self._exact.clear()
        self._single.clear()
        self._single_positions.clear()
        self._wild.clear()
