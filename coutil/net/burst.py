"""Checking a burst of received messages ahead of the node that will handle them.

When tens of thousands of subjects send at once (their registrations at the start of a round,
their verdicts at its end), the collector's one thread verifies every signature: about half of
what a registration costs it, while the other cores wait for its acknowledgements. A driver given
a `BurstCheck` for a connection hands each batch of waiting messages to it and delivers the batch
to the node once the check is done, while the next batches are being checked. The round layer's
check (`coutil.round.parallel.signature_prechecker`) verifies the signatures in the collector's
process pool and records the envelopes that verified in the decode cache the collector reads, so
the node skips only work already done, and done by its own process's helpers.

Nothing depends on the check for correctness: the messages reach the node in the order received,
each exactly once; one that failed the check, or a check that raised (a dead pool process), only
leaves the node to verify as it always does.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeAlias, TypeVar

logger = logging.getLogger(__name__)

#: Checks a batch of received payloads (whole envelopes) ahead of the node; may raise (then unused).
BurstCheck: TypeAlias = Callable[[list[bytes]], Awaitable[None]]

#: Messages waiting at once from which a batch is checked ahead: fewer are a trickle, which the node
#: handles sooner itself than a pool's round trip would.
CHECK_FROM = 64
#: Messages per checked batch.
BATCH = 256
#: Batches being checked while the oldest one is delivered.
DEPTH = 4

T = TypeVar("T")
#: A received message waiting for delivery: topic, payload, the targets not yet handed it (None: not
#: routed yet, routed when its turn comes: `coutil.net.hosting` does so for unchecked connections only).
Entry: TypeAlias = tuple[str, bytes, list[T] | None]


def _start(check: BurstCheck, batch: list[Entry[T]]) -> asyncio.Future[None]:
    return asyncio.ensure_future(check([data for _, data, _ in batch]))


async def deliver_checked(backlog: deque[Entry[T]], ready: asyncio.Event, check: BurstCheck,
                          deliver: Callable[[T, str, bytes], None], chunk: int,
                          handed_out: Callable[[int], None] = lambda size: None) -> None:
    """Hand out ``backlog`` (filled by the transport's read callback, which sets ``ready``) in order,
    bursts checked ahead by ``check``, at most ``chunk`` node calls between two turns of the event
    loop; ``handed_out`` gets the bytes of each batch once delivered. Runs until cancelled; an exception
    raised by ``deliver`` (a node's bug) ends it."""
    in_check: deque[tuple[list[Entry[T]], asyncio.Future[None] | None]] = deque()
    usable = True
    try:
        while True:
            if not backlog and not in_check:
                ready.clear()
                await ready.wait()
            while backlog and len(in_check) < DEPTH:
                batch = [backlog.popleft() for _ in range(min(len(backlog), BATCH))]
                checked = usable and len(batch) >= CHECK_FROM
                in_check.append((batch, _start(check, batch) if checked else None))
            batch, future = in_check.popleft()
            if future is not None:
                try:
                    await future
                except Exception as exc:  # only a shortcut is lost: the node verifies
                    usable = False
                    logger.warning("checking received messages ahead failed (%s: %s); the node checks them itself",
                                   type(exc).__name__, exc)
            calls = 0
            for topic, data, targets in batch:
                for target in targets or ():
                    deliver(target, topic, data)
                    calls += 1
                if calls >= chunk:
                    calls = 0
                    await asyncio.sleep(0)
            handed_out(sum(len(data) for _, data, _ in batch))
    finally:
        for _, future in in_check:
            if future is not None:
                future.cancel()
