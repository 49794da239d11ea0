"""The collector service's loop: rounds over a broker, one after the other, each backed by SQLite.

`serve_rounds` is what ``coutil collector serve`` runs: for each round it opens (resumes or starts)
a `PersistentCollector` on the store, hosts it on the broker until it finishes, and logs one JSON
record per event through `coutil.collector.logs` (JSON lines on stderr, with levels: event codes, counts
and ids, never a confidential value).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coutil.collector.logs import log_event
from coutil.collector.service import (
    PersistentCollector,
    check_identity,
    create_secret,
    load_secret,
    open_round,
    serving_lock,
)
from coutil.collector.storage import CollectorStore
from coutil.errors import NetworkError
from coutil.net.hosting import host_nodes
from coutil.net.mqtt import BrokerAddress
from coutil.protocol.config import RoundConfig
from coutil.protocol.events import Event, RoundAborted
from coutil.protocol.node import SERIAL_POOL, WorkPool
from coutil.round.parallel import PROCESS_POOL_FROM, ProcessPool, signature_prechecker

#: Writes one structured log record.
LogSink = Callable[..., None]


def log_json(**fields: object) -> None:
    """One structured log record (`coutil.collector.logs`: standard logging, JSON lines, with levels)."""
    event = str(fields.pop("event", "log"))
    level = None
    if event == "round_end" and not fields.get("completed"):
        level = logging.WARNING
    log_event(event, level=level, **fields)


@dataclass(frozen=True)
class ServedRound:
    """How one served round ended."""

    round_id: str
    completed: bool
    phase: str
    registered: int
    released_rows: int
    verdicts: int
    accepted: int
    stopped_by: str
    #: Why the round aborted (the collector's reason, e.g. ``too_few_subjects``), else None.
    abort_reason: str | None = None

    @property
    def problem(self) -> str | None:
        """Why this round is no success (None when it released rows and completed)."""
        if not self.completed:
            why = self.abort_reason or (f"stopped by {self.stopped_by}" if self.stopped_by != "condition" else "")
            return f"round {self.round_id} aborted in phase {self.phase}{f' ({why})' if why else ''}"
        if self.released_rows == 0:
            return f"round {self.round_id} released nothing ({self.registered} registered)"
        return None

    def as_dict(self) -> dict[str, object]:
        return {"round": self.round_id, "completed": self.completed and self.released_rows > 0,
                "phase": self.phase, "abort_reason": self.abort_reason, "registered": self.registered,
                "released_rows": self.released_rows, "verdicts": self.verdicts, "accepted": self.accepted,
                "stopped_by": self.stopped_by, "problem": self.problem}


def serve_rounds(address: BrokerAddress, db: Path, config: RoundConfig, *, rounds: int = 1,
                 log: LogSink = log_json) -> list[ServedRound]:
    """Run ``rounds`` rounds (0: forever) over ``address``; every acknowledgement is committed first."""
    # Both files are checked before either is created: a refused --db (a directory, a foreign file)
    # leaves no new secret beside it, and a refused secret no new database.
    secret = load_secret(db)
    served: list[ServedRound] = []
    # Spare cores open each group's records while the service reads the other groups' reveals (when
    # the rounds are expected large enough to repay starting the pool's processes).
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(CollectorStore(db))
        # One service per database, before the secret or a round is written.
        stack.enter_context(serving_lock(db))
        # Read again under the lock: a service that created it and ended since the first read.
        secret = load_secret(db)
        check_identity(store, db, secret)
        if secret is None:
            secret = create_secret(db)
        processes = stack.enter_context(ProcessPool()) if config.expected_subjects >= PROCESS_POOL_FROM else None
        opener: WorkPool = processes if processes is not None else SERIAL_POOL
        while rounds == 0 or len(served) < rounds:
            opened = open_round(store, secret, config, time.time(), pool=opener)
            collector = opened.collector
            # The same processes verify the signatures of bursts (registrations, verdicts) ahead of the node.
            checks = {} if processes is None else {collector.client_id: signature_prechecker(processes, collector.node)}
            log(event="round", round=collector.round_id.hex(), how=opened.how, broker=address.display(),
                collector_key=collector.node.public_key.hex())
            limit = config.register_window + config.audit_window + 200 * config.step_timeout

            aborted: list[str] = []

            def on_event(node_id: str, event: Event, aborted: list[str] = aborted) -> None:
                if isinstance(event, RoundAborted):
                    aborted.append(event.reason)
                log(**{k: v for k, v in event.as_dict().items() if k != "at"})

            def finished(c: PersistentCollector = collector) -> bool:
                return c.finished

            try:
                stats = asyncio.run(host_nodes([collector], address, stop_when=finished, timeout=limit,
                                               on_event=on_event, checks=checks))
            except OSError as exc:
                raise NetworkError(f"network error: {exc}") from None
            outcome = collector.node.outcome()
            result = ServedRound(collector.round_id.hex(), outcome.completed, outcome.phase, outcome.registered,
                                 int(outcome.rows.shape[0]), len(outcome.verdicts),
                                 sum(1 for v in outcome.verdicts if v["accept"]), stats.stopped_by,
                                 aborted[-1] if aborted else None)
            log(event="round_end", round=result.round_id, completed=result.completed, phase=result.phase,
                registered=result.registered, released_rows=result.released_rows, verdicts=result.verdicts,
                accepted=result.accepted, stopped_by=result.stopped_by, abort_reason=result.abort_reason)
            if not outcome.completed:
                store.set_phase(collector.round_id, "aborted", time.time())
            served.append(result)
    return served
