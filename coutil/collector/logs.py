"""The collector service's logs: standard `logging`, one JSON object per line, with levels.

Records go to the ``coutil.collector`` logger; `configure` installs the JSON formatter on stderr (what
``coutil collector serve`` does). A line is ``{"t": <unix time>, "level": "info", "event": <code>, ...}``
with event codes, counts and ids only: never a confidential value (the events are
`coutil.protocol.events`, which hold none).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO

from coutil.errors import InputError

LOGGER = logging.getLogger("coutil.collector")

#: Events worth a warning: a round that did not complete, members excluded, complaints.
WARNING_EVENTS = frozenset({"aborted", "excluded", "dissolved", "blame"})


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time, level, event code and the record's structured fields."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, object] = {"t": round(record.created, 3), "level": record.levelname.lower(),
                                     "event": record.getMessage()}
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            fields.update(extra)
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info).splitlines()[-1]
        return json.dumps(fields, default=str)


def configure(level: str = "info", stream: IO[str] | None = None) -> None:
    """Send ``coutil.collector`` records at ``level`` and above to ``stream`` (stderr) as JSON lines."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise InputError(f"bad --log-level {level!r}: expected debug, info, warning or error")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonLineFormatter())
    LOGGER.handlers[:] = [handler]
    LOGGER.setLevel(numeric)
    LOGGER.propagate = False


def log_event(event: str, *, level: int | None = None, **fields: object) -> None:
    """Log one event with its fields (warning for `WARNING_EVENTS` unless ``level`` says otherwise)."""
    chosen = level if level is not None else (logging.WARNING if event in WARNING_EVENTS else logging.INFO)
    LOGGER.log(chosen, event, extra={"fields": fields})
