"""`coutil verify PATH`: the auditor. Thin: parse, call `coutil.round.verify`, print.

Exit 0 when every check passes, 3 (`CheckFailedError`) naming the first problem when one fails, 2 for
a PATH that is neither a run directory with a transcript.json nor a transcript.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console
from coutil.errors import CheckFailedError

_MARK = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}


def register(app: typer.Typer) -> None:
    """Add `verify` to the `coutil` app."""

    @app.command("verify", cls=OneLineErrorsCommand)
    def verify_command(
        path: Annotated[Path, typer.Argument(help="A run directory (--out of coutil run or simulate: its "
                                             "transcript.json, release.csv, manifest.json) or a transcript "
                                             "(coutil collector export --transcript).", show_default=False)],
        catches: Annotated[bool, typer.Option("--catches", help="Print which collector deviation each check catches "
                                              "(shown for failed checks anyway).")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print every check as one JSON object.")] = False,
        evidence: Annotated[list[Path] | None, typer.Option(
            "--evidence", help="A subject's evidence (JSON: her verdict and the collector's verdict_ack, hex "
            "envelopes; a list of them, as a run directory's evidence.json): each acknowledged verdict must be in "
            "the transcript. Repeatable.", show_default=False)] = None,
    ) -> None:
        """Check a published round end to end: signatures, roster and Merkle roots, the grouping recomputed,
        group sizes >= k, release.csv, exclusions and their evidence, verdicts bound to the release, and every
        verdict a subject shows the collector acknowledged present in the transcript."""
        from coutil.round.verify import verify_path

        result = verify_path(path, evidence or ())
        if as_json:
            emit_json(result.as_dict())
        else:
            for check in result.checks:
                detail = "; ".join(check.problems) if check.problems else "; ".join(check.notes)
                err_console.print(f"{_MARK[check.status]} {check.name}: {escape(detail)}")
                if catches or check.status == "fail":
                    err_console.print(f"     catches: {escape(check.catches)}", style="dim")
            err_console.print(f"round {result.round_id}: {escape(result.summary)}")
        if not result.ok:
            raise CheckFailedError(f"{path}: {result.first_problem}")
