"""Who hears a topic: the subscription index shared by the in-memory bus and the MQTT host.

Both route a published topic to the members whose current filters match it, as a broker does.
Exact filters are indexed in a dict (topic -> members), so routing scales to 10^5 subscribers;
only the few wildcard filters (the collector's, or covers) are matched one by one.
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
        self._wild: dict[str, set[M]] = {}

    def add(self, topic_filter: str, member: M) -> None:
        table = self._wild if is_wildcard(topic_filter) else self._exact
        table.setdefault(topic_filter, set()).add(member)

    def discard(self, topic_filter: str, member: M) -> None:
        table = self._wild if is_wildcard(topic_filter) else self._exact
        members = table.get(topic_filter)
        if members is not None:
            members.discard(member)
            if not members:
                del table[topic_filter]

    def update(self, member: M, added: Iterable[str], removed: Iterable[str]) -> None:
        for topic_filter in removed:
            self.discard(topic_filter, member)
        for topic_filter in added:
            self.add(topic_filter, member)

    def match(self, topic: str) -> set[M]:
        found = set(self._exact.get(topic, ()))
        for topic_filter, members in self._wild.items():
            if topics.matches(topic_filter, topic):
                found.update(members)
        return found

    def clear(self) -> None:
        self._exact.clear()
        self._wild.clear()
