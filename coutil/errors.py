"""Error types and the documented process exit codes.

Every error a *user* can cause (a bad file, a wrong column name, an unreachable broker) is a
`CoutilError` subclass carrying its exit code; the CLI prints its one-line message and exits with
that code, never a traceback. Errors caused by a *remote peer* (a malformed or forged message) are
`RemoteProtocolError`s: the protocol core records them as rejections and never lets them escape.

A file coutil cannot write (disk full, read-only file system, permission) is exit code 2 too, as
`coutil.fileio` reports an output it cannot write: the file system refused, which is no bug. The
collector's database is no exception (`StorageError`): its message says that everything acknowledged
before the failed write is in the database (write first, acknowledge second), so nothing is lost.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of the `coutil` command (documented in README.md)."""

    OK = 0
    #: An unexpected internal error (a bug in coutil): please report it.
    INTERNAL = 1
    #: Bad input or usage: missing/malformed file, unknown column, invalid parameter; also a file
    #: the file system refuses to write (disk full, read-only): an output, or the collector's database.
    USAGE = 2
    #: The command ran, but a privacy or protection check it performs did not hold.
    CHECK_FAILED = 3
    #: A protocol round did not complete (deadline passed, aborted, too few subjects).
    ROUND_INCOMPLETE = 4
    #: The round completed but at least one subject's verdict is a complaint.
    COMPLAINT = 5
    #: The network or broker could not be reached / failed.
    NETWORK = 6
    #: Interrupted by SIGINT (Ctrl-C): 128 + 2, as a shell reports it.
    INTERRUPTED = 130
    #: Stopped by SIGTERM: 128 + 15.
    TERMINATED = 143


class CoutilError(Exception):
    """Base class of errors reported to the user as one line plus an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL


class InputError(CoutilError, ValueError):
    """The user's input is wrong: file, column, value or parameter. Exit code 2."""

    exit_code = ExitCode.USAGE


class DataFileError(InputError):
    """A data file is missing, empty or malformed; the message names file, line and column."""

    def __init__(self, path: str, problem: str, *, line: int | None = None, column: str | None = None) -> None:
        where = path
        if line is not None:
            where += f", line {line}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {problem}")
        self.path = path
        #: 1-based line of the file (the header is line 1).
        self.line = line
        self.column = column
        self.problem = problem


class StorageError(InputError):
    """The collector's database could not be written (disk full, I/O error, read-only, locked). Exit code 2.

    Raised instead of acknowledging: the write that failed was rolled back and nothing after the last
    successful commit was acknowledged, so the database holds everything the collector acknowledged.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: cannot write the collector database ({problem}); nothing was acknowledged "
                         "after the last successful write: everything acknowledged before is in the database "
                         "(free space or fix the file system, then run again)")
        self.path = path
        self.problem = problem


class CheckFailedError(CoutilError):
    """A privacy check did not hold (exit code 3)."""

    exit_code = ExitCode.CHECK_FAILED


class RoundIncompleteError(CoutilError):
    """A protocol round did not complete, or left a live subject out (exit code 4)."""

    exit_code = ExitCode.ROUND_INCOMPLETE


class ComplaintError(CoutilError):
    """The round completed but a subject complained (exit code 5)."""

    exit_code = ExitCode.COMPLAINT


class NetworkError(CoutilError):
    """The broker or network failed (exit code 6)."""

    exit_code = ExitCode.NETWORK


class InterruptedRunError(CoutilError):
    """The command was interrupted by SIGINT (Ctrl-C) or SIGTERM (exit code 130 or 143).

    Raised in place of `KeyboardInterrupt` once every child process is stopped and no output is
    left half written (see `coutil.fileio`).
    """

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(f"interrupted ({signal_name}); outputs are written whole or not at all")
        self.signal_name = signal_name
        self.exit_code = ExitCode.TERMINATED if signal_name == "SIGTERM" else ExitCode.INTERRUPTED


class RemoteProtocolError(Exception):
    """A peer sent something the protocol must reject or ignore.

    ``reason`` is a stable machine-readable code (listed in protocol/SPEC.md), ``detail`` a
    human-readable explanation that never contains confidential values.
    """

    def __init__(self, reason: str, detail: str = "", *, ignore: bool = False) -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
        #: True for IGNORE (stale, duplicate, early), False for REJECT (malformed or malicious).
        self.ignore = ignore
