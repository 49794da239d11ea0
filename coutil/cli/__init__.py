"""The `coutil` command line.

Each command family lives in its own module and adds itself to `app` through a ``register``
function. `main` turns every user error into one line on stderr and a documented exit code
(see `coutil.errors.ExitCode`); a traceback is printed only for internal errors with
``COUTIL_DEBUG=1``.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import Annotated

import typer
from typer.main import get_command

from coutil.cli.common import OneLineErrorsCommand, OneLineErrorsGroup, interrupting_signal, note_signal
from coutil.errors import CoutilError, ExitCode, InterruptedRunError

app = typer.Typer(
    cls=OneLineErrorsGroup,
    name="coutil",
    help="Co-utile collaborative anonymization: k-anonymity built peer to peer, audited by every subject.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        from coutil import __version__

        print(__version__)
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", help="Print the coutil version and exit.",
                                          callback=_print_version, is_eager=True)] = False,
) -> None:
    """Co-utile collaborative anonymization: k-anonymity built peer to peer, audited by every subject.

    Exit codes: 0 ok; 1 internal error; 2 bad input or usage; 3 a privacy check failed;
    4 round incomplete; 5 round completed with a complaint; 6 network or broker error;
    130 interrupted (Ctrl-C); 143 stopped by SIGTERM. Outputs are written whole or not at all.
    """


@app.command("version", cls=OneLineErrorsCommand)
def version_command(
    as_json: Annotated[bool, typer.Option("--json", help="Print {\"version\": ...} as one JSON object.")] = False,
) -> None:
    """Print the coutil version."""
    import json
    import platform

    from coutil import __version__

    if as_json:
        print(json.dumps({"version": __version__, "python": platform.python_version()}))
    else:
        print(__version__)


def _register_all() -> None:
    # Imported here so that `import coutil.cli` stays cheap and each family stays in its own module.
    from coutil.cli import (
        anonymize_commands,
        attack_commands,
        audit_commands,
        check_commands,
        dp_commands,
        experiment_commands,
        info_loss_commands,
        report_commands,
        round_commands,
        service_commands,
        verify_commands,
    )

    # The order of registration is the order of `coutil --help`.
    anonymize_commands.register(app)
    info_loss_commands.register(app)
    check_commands.register(app)
    audit_commands.register(app)
    attack_commands.register(app)
    round_commands.register(app)
    service_commands.register(app)
    dp_commands.register(app)
    dp_commands.register_anonymize(anonymize_commands.anonymize_app)
    experiment_commands.register(app)
    report_commands.register(app)
    verify_commands.register(app)


_register_all()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM interrupts a command exactly as Ctrl-C does (asyncio's runner, if one runs, cancels its
    task; otherwise KeyboardInterrupt), so that the same clean-up runs; the exit code is then 143."""
    note_signal("SIGTERM")
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def _install_sigterm_handler() -> None:
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a test thread): leave signals alone
        pass


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the process exit code.

    Usage errors and coutil's own errors print one line; SIGINT and SIGTERM print one line and exit
    with 130 and 143 (`coutil.errors.InterruptedRunError`).
    """
    command = get_command(app)
    _install_sigterm_handler()
    try:
        command.main(args=argv, prog_name="coutil", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        exc_interrupted = InterruptedRunError(interrupting_signal())
        print(f"coutil: {exc_interrupted}", file=sys.stderr)
        code = int(exc_interrupted.exit_code)
    except InterruptedRunError as exc:
        print(f"coutil: {exc}", file=sys.stderr)
        code = int(exc.exit_code)
    except CoutilError as exc:
        print(f"coutil: error: {exc}", file=sys.stderr)
        code = int(exc.exit_code)
    except BrokenPipeError:
        code = 0
    except Exception as exc:  # a bug in coutil, not the user's fault
        if os.environ.get("COUTIL_DEBUG"):
            raise
        print(
            f"coutil: internal error: {type(exc).__name__}: {exc} "
            "(set COUTIL_DEBUG=1 for the traceback and please report it)",
            file=sys.stderr,
        )
        code = ExitCode.INTERNAL
    if argv is None:
        sys.exit(code)
    return code
