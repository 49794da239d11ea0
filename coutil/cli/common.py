"""Helpers shared by the CLI command modules: JSON output, progress bars, one-line usage errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from typer.core import TyperCommand, TyperGroup, TyperOption

from coutil.errors import InputError, InterruptedRunError

#: Human-facing output goes to stderr so that stdout carries only data (CSV, JSON). Piped or redirected
#: (not a terminal), tables keep every column whole: no 80-column default that cuts values to "5546…".
_WIDE = 10_000
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else _WIDE)
out_console = Console(width=None if sys.stdout.isatty() else _WIDE)


def _display_type_without_flags(self: TyperOption, ctx: Any) -> str | None:
    # typer shows every flag as "--json <bool>", which reads as if the flag took a value: flags get no type.
    return None if self.is_flag else _typer_display_type(self, ctx)


_typer_display_type = TyperOption.display_type_rich
TyperOption.display_type_rich = _display_type_without_flags  # type: ignore[method-assign]


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
        # Off the terminal it would draw nothing but still print an empty line when it stops.
        disable=not enabled or not err_console.is_terminal,
    )
    with prog:
        yield prog


# Recent typer vendors click privately (typer._click); in every version typer.BadParameter derives from
# click's UsageError, the class of every parse error (bad value, missing or unknown option, extra argument).
_UsageError: type[Exception] = next(
    (cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "UsageError"), typer.BadParameter
)


def _one_line_usage_error(exc: Exception, ctx: Any) -> InputError:
    """A click usage error as coutil's one-line `InputError` (exit code 2, no usage box)."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    path = getattr(getattr(exc, "ctx", None), "command_path", None) or ctx.command_path
    return InputError(f"{path}: {' '.join(str(message).split())} (see '{path} --help')")


def _is_help_request(exc: Exception) -> bool:
    # `no_args_is_help` raises a UsageError subclass whose message is the whole help page: keep showing it.
    return type(exc).__name__ == "NoArgsIsHelpError"


def _parse_in_one_line(parse: Callable[[Any, list[str]], list[str]], ctx: Any, args: list[str]) -> list[str]:
    try:
        return parse(ctx, args)
    except _UsageError as exc:
        if _is_help_request(exc):
            raise
        raise _one_line_usage_error(exc, ctx) from None


class OneLineErrorsCommand(TyperCommand):
    """A typer command whose parse errors (``--k abc``, a missing or misspelt option) are one line.

    The error leaves as `InputError`, which `coutil.cli.main` prints as ``coutil: error: ...`` with
    exit code 2, like every other user mistake, instead of typer's multi-line usage panel.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_in_one_line(super().parse_args, ctx, args)

    def invoke(self, ctx: Any) -> Any:
        # Click turns KeyboardInterrupt into "Aborted!" (exit 1); coutil reports it as one line with the
        # shell's code (130, or 143 for SIGTERM, which `coutil.cli.main` routes through SIGINT's handler).
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise InterruptedRunError(interrupting_signal()) from None


#: Set by `coutil.cli.main`'s SIGTERM handler before it interrupts the command like SIGINT does.
_signal_received: list[str] = []


def interrupting_signal() -> str:
    """The name of the signal that interrupted the command: SIGTERM if one arrived, else SIGINT."""
    return "SIGTERM" if "SIGTERM" in _signal_received else "SIGINT"


def note_signal(name: str) -> None:
    _signal_received.append(name)


class OneLineErrorsGroup(TyperGroup):
    """A typer group whose unknown or missing sub-command errors are one line (see `OneLineErrorsCommand`)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return super().resolve_command(ctx, args)
        except _UsageError as exc:
            raise _one_line_usage_error(exc, ctx) from None

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return _parse_in_one_line(super().parse_args, ctx, args)


def phase_progress(bars: Progress, phases: Sequence[str], total: int) -> Callable[[str, float], None]:
    """A progress callback for a round: one bar per collector phase, earlier bars filled when a
    later phase starts, phases outside ``phases`` (created, done, aborted) not shown."""
    tasks: dict[str, TaskID] = {}

    def on_progress(phase: str, fraction: float) -> None:
        if phase not in phases:
            return
        for earlier in phases[: phases.index(phase)]:
            if earlier in tasks:
                bars.update(tasks[earlier], completed=total)
        if phase not in tasks:
            tasks[phase] = bars.add_task(str(phase), total=total)
        bars.update(tasks[phase], completed=round(fraction * total))

    return on_progress
