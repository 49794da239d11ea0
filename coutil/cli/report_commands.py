"""`coutil report DIR`: a finished run directory as one self-contained HTML page. Thin: parse, call, print.

The rendering lives in `coutil.round.html_report` (the round layer owns run directories). Exit code 2
when DIR lacks one of its files or matplotlib (the ``plot`` extra) is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from coutil.cli.common import OneLineErrorsCommand, emit_json, err_console


def register(app: typer.Typer) -> None:
    """Add `report` to the `coutil` app."""

    @app.command("report", cls=OneLineErrorsCommand)
    def report_command(
        directory: Annotated[Path, typer.Argument(help="A run directory: the --out of coutil run or coutil "
                                                  "simulate.", show_default=False)],
        out: Annotated[Path | None, typer.Option("-o", "--output", help="The HTML file to write (default: "
                                                 "DIR/report.html).", show_default=False)] = None,
        data: Annotated[Path | None, typer.Option("--data", help="The CSV the round's subjects were drawn from "
                                                  "(its first N records), for information loss and marginals; "
                                                  "default: the shipped survey, when the release matches it.",
                                                  show_default=False)] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print what was written as one JSON object.")] = False,
    ) -> None:
        """Render a run directory (release, manifest, audit, trace, report) as one self-contained HTML file."""
        from coutil.round.html_report import write_html_report

        written = write_html_report(directory, out, data)
        if as_json:
            emit_json(written)
            return
        if written["original_data"] is None:
            err_console.print(f"note: original data not available ({written['original_data_missing']}): no "
                              "information loss, no marginals")
        err_console.print(f"wrote {written['report']} ({written['bytes'] / 1e3:,.0f} kB, {written['images']} "
                          "figures)")
