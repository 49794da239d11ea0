"""Helpers shared by the CLI command modules: JSON output, progress bars, option parsing."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

#: Human-facing output goes to stderr so that stdout carries only data (CSV, JSON).
err_console = Console(stderr=True)
out_console = Console()


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def dumps_json(obj: Any, *, indent: int | None = None) -> str:
    return json.dumps(obj, default=_jsonable, indent=indent, allow_nan=False)


def emit_json(obj: Any) -> None:
    """Print exactly one JSON object on stdout (the machine interface of every ``--json``)."""
    sys.stdout.write(dumps_json(obj) + "\n")
    sys.stdout.flush()


@contextmanager
def progress(enabled: bool = True) -> Iterator[Progress]:
    """A rich progress display on stderr (invisible when stderr is not a terminal or disabled)."""
    prog = Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not enabled,
    )
    with prog:
        yield prog
