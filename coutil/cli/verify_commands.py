"""`coutil verify PATH`: the auditor. Thin: parse, call `coutil.round.verify`, print.

Exit 0 when every check passes, 3 (`CheckFailedError`) naming the first problem when one fails, 2 for
a PATH that is neither a run directory with a transcript.json nor a transcript, or for neither a PATH nor
``--evidence``. With ``--evidence`` and no PATH (a withheld round: nothing published), only what the
evidence proves on its own is checked (a proof of equivocation: exit 3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console, parse_collector_key
from coutil.errors import CheckFailedError

_MARK = {"pass": "[green]pass[/]", "fail": "[red]FAIL[/]", "skip": "[yellow]skip[/]"}


def register(app: typer.Typer) -> None:
    """Add `verify` to the `coutil` app."""

    @app.command("verify", cls=OneLineErrorsCommand)
    def verify_command(
        path: Annotated[Path | None, typer.Argument(
            help="A run directory (--out of coutil run or simulate: its transcript.json, release.csv, manifest.json) "
            "or a transcript (coutil collector export --transcript). Without it, --evidence alone: what the "
            "subjects' evidence proves on its own (a withheld round).", show_default=False)] = None,
        catches: Annotated[bool, typer.Option("--catches", help="Print which collector deviation each check catches "
                                              "(shown for failed checks anyway).")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print every check as one JSON object.")] = False,
        evidence: Annotated[list[Path] | None, typer.Option(
            "--evidence", help="A subject's evidence (JSON: her verdict and the collector's verdict_ack, or a proof "
            "of equivocation: the announce and two collector messages stating different roster roots, hex "
            "envelopes; a list of them, as a run directory's evidence.json): each acknowledged verdict must be in "
            "the transcript, and no proof of equivocation may hold. Repeatable.", show_default=False)] = None,
        collector_key: Annotated[str | None, typer.Option(
            "--collector-key", help="The collector's published key (hex). Needed with --evidence and no PATH (a "
            "proof convicts the key that signed it); with a PATH, the transcript must be signed by it.",
            show_default=False)] = None,
        other_transcript: Annotated[list[Path] | None, typer.Option(
            "--other-transcript", help="Another copy of this round's transcript (another auditor's, or a run "
            "directory's transcript.second.json): signed by the collector and final, it must be the same statement, "
            "else the two signatures prove the collector showed two rounds. Repeatable.", show_default=False)] = None,
        require_final: Annotated[bool, typer.Option(
            "--require-final", help="Fail (exit 3) on a transcript of a round not finished (a phase before done or "
            "aborted) instead of skipping the comparison of final copies: a collector must not keep its transcript "
            "open forever to escape it.")] = False,
    ) -> None:
        """Check a published round end to end: the auditor (exit 3 naming the first problem).

        Signatures, roster and Merkle roots, the grouping recomputed, group sizes >= k, release.csv, exclusions \
and their evidence, verdicts bound to the release, no subject holding two roster roots the collector signed, every \
verdict a subject shows the collector acknowledged present in the transcript, and the transcript signed by the \
collector (the same statement as any other copy given)."""
        from coutil.round.verify import verify_path

        result = verify_path(path, evidence or (), parse_collector_key(collector_key), other_transcript or (),
                             require_final)
        if as_json:
            emit_json(result.as_dict())
        else:
            for check in result.checks:
                detail = "; ".join(check.problems) if check.problems else "; ".join(check.notes)
                err_console.print(f"{_MARK[check.status]} {check.name}: {escape(detail)}")
                if catches or check.status == "fail":
                    err_console.print(f"     catches: {escape(check.catches)}", style="dim")
            err_console.print(f"round {result.round_id or '(none proven)'}: {escape(result.summary)}")
        if not result.ok:
            raise CheckFailedError(f"{path or result.source}: {result.first_problem}")
