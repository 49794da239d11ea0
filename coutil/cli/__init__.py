"""The `coutil` command line.

Each command family lives in its own module and adds itself to `app` through a ``register``
function. `main` turns every user error into one line on stderr and a documented exit code
(see `coutil.errors.ExitCode`); a traceback is printed only for internal errors with
``COUTIL_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys

import typer
from typer.main import get_command

from coutil.errors import CoutilError, ExitCode

app = typer.Typer(
    name="coutil",
    help="Co-utile collaborative anonymization: k-anonymity built peer to peer, audited by every subject.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root() -> None:
    """Co-utile collaborative anonymization: k-anonymity built peer to peer, audited by every subject.

    Exit codes: 0 ok; 1 internal error; 2 bad input or usage; 3 a privacy check failed;
    4 round incomplete; 5 round completed with a complaint; 6 network or broker error.
    """


@app.command("version")
def version_command() -> None:
    """Print the coutil version."""
    from coutil import __version__

    print(__version__)


def _register_all() -> None:
    # Imported here so that `import coutil.cli` stays cheap and each family stays in its own module.
    from coutil.cli import audit_commands, report_commands, round_commands, sdc_commands, service_commands

    sdc_commands.register(app)
    audit_commands.register(app)
    round_commands.register(app)
    service_commands.register(app)
    report_commands.register(app)


_register_all()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns (and exits with) the process exit code.

    Usage errors are reported by typer itself (exit code 2); coutil's own errors print one line.
    """
    command = get_command(app)
    try:
        command.main(args=argv, prog_name="coutil", standalone_mode=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        print("coutil: interrupted", file=sys.stderr)
        code = 130
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
