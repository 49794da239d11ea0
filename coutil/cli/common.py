"""Helpers shared by the CLI command modules: JSON output, progress bars, one-line usage errors.

Also the options and input handling that more than one command module uses (command modules do not
import each other): the original X and release Y of `audit`, `attack` and `reverse-map` (the
`coutil.audit` commands), and the ``--ordinal``, ``--json`` and selected columns of `anonymize`,
`info-loss` and `check` (the `coutil.sdc` commands).
"""

from __future__ import annotations

import json
import string
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

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

from coutil.audit.inputs import Pair, check_k, load_pair
from coutil.errors import DataFileError, InputError, InterruptedRunError
from coutil.sdc.dataset import CsvTable, Dataset, table_to_dataset

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


def show_progress(json_output: bool) -> bool:
    """A progress bar only for a person watching a terminal; never in --json mode."""
    return err_console.is_terminal and not json_output


def stderr_line(message: str) -> None:
    """One line on stderr, however long (no wrapping, no rich markup in file names)."""
    err_console.print(message, soft_wrap=True, markup=False, highlight=False)


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


# ------------------------------------------------------ original X and release Y: audit, attack, reverse-map

#: Rows shown in the human-readable tables of `audit` and `attack` (the JSON always has every row).
AUDIT_TABLE_ROWS = 20

AuditReleaseOpt = Annotated[Path, typer.Option("--release", help="CSV of the anonymized release Y.")]
AuditColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Comma-separated attributes to use (default: all of X, found by name in Y).",
        show_default=False,
    ),
]
AuditReleaseColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--release-columns",
        help="The release's names for the --columns attributes, in the same order, when they differ.",
        show_default=False,
    ),
]
AuditJsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout.")]
AuditOrdinalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ordinal",
        help="Declare an ordinal categorical column of X with its categories in increasing order, e.g. "
        "'edu=primary<secondary<tertiary'; it is ranked as 1, 2, 3 in both files. Repeatable.",
        show_default=False,
    ),
]


def load_checked_pair(
    original: Path,
    release: Path,
    columns: str | None,
    release_columns: str | None,
    ordinal: list[str] | None,
    k: int | None,
    same_rows: str | None = None,
) -> Pair:
    """X and Y for every command, ``--k`` checked; ``same_rows`` (what needs it) refuses files of
    different lengths. Nothing is printed yet: see `announce_pair`."""
    pair = load_pair(original, release, columns, release_columns, ordinal)
    check_k(pair.release, k)
    if same_rows is not None and pair.release.n != pair.original.n:
        raise InputError(
            f"{same_rows} needs as many release rows as original records: {release} has {pair.release.n} "
            f"rows, {original} has {pair.original.n}"
        )
    return pair


def announce_pair(pair: Pair, k: int | None) -> None:
    """Once every option is checked (so that an error stays one line): the note on columns paired by
    position, and a warning on a release with fewer rows than the original."""
    if pair.note is not None:
        stderr_line(pair.note)
    x, y = pair.original, pair.release
    if k is None and y.n < x.n:
        stderr_line(
            f"warning: {y.source} has {y.n} rows, fewer than the {x.n} records of {x.source}: records "
            "were suppressed or the files do not match (--k sets the least number of rows to accept)"
        )


# ----------------------------------------------------------- centralized SDC: anonymize, info-loss, check

SdcOrdinalOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--ordinal",
        help="Declare an ordinal categorical column with its categories in increasing order, e.g. "
        "'edu=primary<secondary<tertiary'; it is processed as ranks 1, 2, 3. Repeatable.",
        show_default=False,
    ),
]
SdcJsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout (the machine interface).")]


def columns_to_dataset(
    table: CsvTable, column_names: list[str] | None, ordinal_map: dict[str, tuple[str, ...]]
) -> Dataset:
    """The selected columns as numbers; a text cell's error says how to leave the column out or declare it."""
    try:
        return table_to_dataset(table, column_names, ordinal_map)
    except DataFileError as exc:
        if not exc.problem.startswith("not a number") or exc.column is None:
            raise
        # The usual cause is a text column (an id, a category) that was not meant to be masked.
        choose = "choose the columns with --columns" if column_names is None else (
            f"leave {exc.column!r} out of --columns"
        )
        hint = f"{choose}, or declare an ordinal column with --ordinal '{exc.column}=low<medium<high'"
        raise DataFileError(exc.path, f"{exc.problem} ({hint})", line=exc.line, column=exc.column) from None


def parse_collector_key(text: str | None) -> bytes | None:
    """``--collector-key HEX`` (None when not given); `InputError` unless 64 hex digits.

    Whitespace around the key is dropped: a key pasted with a space, or read from a file (``$(cat key.hex)``
    keeps a ``\r`` of a CRLF file, ``"$(<file)"`` a trailing space) is the key a user means; whitespace
    inside it is refused (two keys pasted as one, or a key cut in two), and so is anything but hex digits.
    The one parser of a collector key (`coutil verify`, `coutil subject join`)."""
    if text is None:
        return None
    stripped = text.strip()
    shown = stripped if len(stripped) <= 80 else stripped[:80] + "..."
    if not stripped or any(c not in string.hexdigits for c in stripped):
        inside = " (whitespace inside it)" if any(c.isspace() for c in stripped) else ""
        raise InputError(f"bad --collector-key {shown!r}: expected 64 hex digits{inside}")
    if len(stripped) != 64:
        raise InputError(f"bad --collector-key: expected 32 bytes (64 hex digits), got {len(stripped)} hex digits")
    return bytes.fromhex(stripped)
