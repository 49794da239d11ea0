"""The collector service's durable side: round storage (`coutil.collector.storage`).

The service itself (``coutil collector serve``) drives a `coutil.protocol.collector.CollectorNode`
over `coutil.net.mqtt` and commits to a `CollectorStore` before acknowledging anything.
"""

from __future__ import annotations

from coutil.collector.storage import (
    CollectorStore,
    RoundSummary,
    StoredRegistration,
    StoredRound,
    StoredVerdict,
)

__all__ = ["CollectorStore", "RoundSummary", "StoredRegistration", "StoredRound", "StoredVerdict"]
