"""The collector service: a `CollectorNode` whose every acknowledgement is backed by SQLite.

`PersistentCollector` wraps the sans-IO collector and follows the storage rule **write first,
acknowledge second**: the driver publishes a node's outgoing messages only after `receive`
returns, and `receive` commits an accepted registration or verdict before returning. A ``kill -9``
therefore never loses anything the collector acknowledged.

Restart semantics (`open_round`): the newest unfinished round in the database is

* **resumed** when it was still in registration and its registration window is still open: the
  collector is rebuilt from the service's secret seed (same identity, same round key, same deadlines,
  hence a byte-identical announce) and the stored registrations are replayed into it;
* **aborted** otherwise (its phase is set to ``aborted``; everything stored stays available to
  ``coutil collector export``), and a fresh round is announced.

The service's secret seed lives beside the database in ``<db>.secret`` (mode 0600): 32 random
bytes from which the collector's signing key and each round's random stream are derived
(HMAC-SHA256 in counter mode keyed with a 256-bit secret is a sound deterministic generator).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from coutil.collector.storage import CollectorStore
from coutil.errors import InputError, RemoteProtocolError
from coutil.protocol import codec, crypto, topics
from coutil.protocol.collector import CollectorNode
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import CollectorEvent
from coutil.protocol.node import Outgoing, SeededRandom, SystemRandom
from coutil.sdc.dataset import format_number

SECRET_BYTES = 32


def load_or_create_secret(db_path: Path) -> bytes:
    """The service's secret seed (created with mode 0600 on first use)."""
    path = db_path.with_name(db_path.name + ".secret")
    if path.exists():
        secret = path.read_bytes()
        if len(secret) != SECRET_BYTES:
            raise InputError(f"{path}: corrupt secret file (expected {SECRET_BYTES} bytes, found {len(secret)})")
        return secret
    secret = SystemRandom().bytes(SECRET_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(secret)
        handle.flush()
        os.fsync(handle.fileno())
    return secret


def identity_from_secret(secret: bytes) -> crypto.SigningKey:
    return crypto.SigningKey.from_seed(hashlib.sha256(b"coutil collector identity" + secret).digest())


def round_rng(secret: bytes, round_id: bytes) -> SeededRandom:
    return SeededRandom(hashlib.sha256(b"coutil collector round" + secret + round_id).digest())


class PersistentCollector:
    """A `CollectorNode` that commits what it acknowledges (implements `coutil.protocol.node.Node`)."""

    def __init__(
        self, node: CollectorNode, store: CollectorStore, *, resume: tuple[float, list[bytes]] | None = None
    ) -> None:
        """``resume``: (the round's original start time, its stored registration payloads)."""
        self.node = node
        self.store = store
        self.round_id = node.round_id
        self.client_id = node.client_id
        self._resume = resume
        self._release_stored = False
        self._finish_stored = False

    # -- Node interface ---------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return self.node.finished

    @property
    def rejections(self) -> list[object]:
        return list(self.node.rejections)

    def subscriptions(self) -> frozenset[str]:
        return self.node.subscriptions()

    def next_timer(self) -> float | None:
        return self.node.next_timer()

    def start(self, now: float) -> list[Outgoing]:
        if self._resume is not None:
            # Re-announce the stored round (byte-identical) and replay its registrations; their
            # acknowledgements are re-sent, which subjects de-duplicate.
            started_at, registrations = self._resume
            out = self.node.start(now, started_at=started_at)
            limits = codec.Limits(max_message_bytes=self.node.config.max_message_bytes)
            for payload in registrations:
                # Replayed on the topic it originally arrived on (its sender's own), as the node checks.
                sender = codec.decode(payload, limits).message.sender
                out.extend(self.node.receive(topics.subject_up(self.round_id, sender), payload, now))
            return out
        out = self.node.start(now)
        params = dataclasses.asdict(self.node.config)
        self.store.create_round(self.round_id, params, collector_key=self.node.public_key, now=now,
                                announce=out[0].payload)
        return out

    def receive(self, topic: str, payload: bytes, now: float) -> list[Outgoing]:
        registered = len(self.node._registrations)
        verdicts = len(self.node._verdicts)
        out = self.node.receive(topic, payload, now)
        if len(self.node._registrations) > registered or len(self.node._verdicts) > verdicts:
            self._commit(payload, now)
        return out

    def on_timer(self, now: float) -> list[Outgoing]:
        return self.node.on_timer(now)

    def drain_events(self) -> list[CollectorEvent]:
        events = self.node.drain_events()
        for event in events:
            if event.kind == "phase":
                self.store.set_phase(self.round_id, str(dict(event.data).get("phase")), event.at)
        self._store_progress()
        return events

    # -- persistence ------------------------------------------------------------------------------
    def _commit(self, payload: bytes, now: float) -> None:
        try:
            decoded = codec.decode(payload, codec.Limits(max_message_bytes=self.node.config.max_message_bytes))
        except RemoteProtocolError:  # the node accepted it, so it decodes; be defensive anyway
            return
        message = decoded.message
        if message.TAG == "register":
            self.store.record_registration(self.round_id, message.sender, payload, decoded.digest, now)
        elif message.TAG == "verdict":
            accept = bool(getattr(message, "accept", False))
            self.store.record_verdict(self.round_id, message.sender, payload, decoded.digest, accept=accept,
                                      now=now)

    def _store_progress(self) -> None:
        node = self.node
        release = node._release_out
        if release is not None and not self._release_stored:
            outcome = node.outcome()
            lines = [",".join(outcome.columns)]
            lines.extend(",".join(format_number(float(v)) for v in row) for row in outcome.rows)
            self.store.record_release(self.round_id, release.payload, "\n".join(lines) + "\n", node._now)
            self._release_stored = True
        if node.finished and not self._finish_stored:
            for key, reason in node._excluded.items():
                self.store.record_exclusion(self.round_id, key, reason)
            counts: dict[str, int] = {}
            for rejection in node.rejections:
                counts[rejection.reason] = counts.get(rejection.reason, 0) + 1
            self.store.add_rejections(self.round_id, counts)
            self._finish_stored = True


@dataclass(frozen=True)
class OpenedRound:
    collector: PersistentCollector
    #: "new", "resumed", or "new after aborting <round id>".
    how: str


def open_round(store: CollectorStore, secret: bytes, config: RoundConfig, now: float) -> OpenedRound:
    """Resume the newest unfinished round when possible, else abort it and create a new one."""
    identity = identity_from_secret(secret)
    how = "new"
    latest = store.latest_round()
    if latest is not None and latest.phase not in ("done", "aborted"):
        stored = store.load_round(latest.round_id)
        window = float(str(stored.params.get("register_window", config.register_window)))
        if stored.phase == "registration" and now < stored.created_at + window:
            stored_config = RoundConfig.from_mapping(stored.params)
            node = CollectorNode(stored_config, identity=identity, rng=round_rng(secret, stored.round_id),
                                 round_id=stored.round_id)
            resume = (stored.created_at, [r.payload for r in stored.registrations])
            return OpenedRound(PersistentCollector(node, store, resume=resume), "resumed")
        store.set_phase(stored.round_id, "aborted", now)
        how = f"new after aborting {stored.round_id.hex()}"
    round_id = SystemRandom().bytes(16)
    node = CollectorNode(config, identity=identity, rng=round_rng(secret, round_id), round_id=round_id)
    return OpenedRound(PersistentCollector(node, store), how)
