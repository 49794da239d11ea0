"""The collector's logs: standard logging, one JSON object per line, levels, no confidential value."""

from __future__ import annotations

import io
import json

import pytest

from coutil.collector.logs import LOGGER, configure, log_event
from coutil.collector.serve import log_json
from coutil.errors import InputError


def test_events_are_json_lines_with_levels() -> None:
    stream = io.StringIO()
    configure("info", stream)
    log_event("round", round="ab12", how="new")
    log_event("excluded", group=3, reason="silent", sid="ff00")
    log_json(event="round_end", round="ab12", completed=False, released_rows=0)
    log_event("debug-detail", level=10)  # below the level: not written
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["event"], line["level"]) for line in lines] == [
        ("round", "info"), ("excluded", "warning"), ("round_end", "warning")]
    assert lines[0]["how"] == "new" and isinstance(lines[0]["t"], float)
    configure("warning", stream)
    log_event("round", round="cd34")
    assert "cd34" not in stream.getvalue()
    LOGGER.handlers.clear()


def test_a_bad_level_is_an_input_error() -> None:
    with pytest.raises(InputError, match="--log-level"):
        configure("loud")
