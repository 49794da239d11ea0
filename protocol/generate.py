"""Regenerate the generated sections of protocol/SPEC.md from the reference implementation.

Run: ``python protocol/generate.py`` (``--check`` exits 1 if SPEC.md is out of date; the tests use it).
The state diagrams come from the transition tables of coutil/protocol/subject.py and collector.py.
"""

from __future__ import annotations

import argparse
import enum
import sys
from collections.abc import Mapping
from pathlib import Path

from coutil.protocol import collector, subject
from coutil.protocol.messages import Message

SPEC = Path(__file__).resolve().parent / "SPEC.md"
BEGIN = "<!-- BEGIN GENERATED: states -->"
END = "<!-- END GENERATED: states -->"


def _machine(title: str, transitions: Mapping[enum.StrEnum, Mapping[type[Message], object]],
             edges: Mapping[enum.StrEnum, tuple[enum.StrEnum, ...]]) -> str:
    """A machine's diagram (its ``STATE_EDGES``) and table (the message classes ``TRANSITIONS`` lists)."""
    lines = [f"### {title}", "", "```mermaid", "stateDiagram-v2"]
    for state, targets in edges.items():
        for target in targets:
            lines.append(f"    {state} --> {target}")
    lines += ["```", "", "| state | accepted message types (anything else: IGNORE `unexpected`) |", "|---|---|"]
    for state, table in transitions.items():
        accepted = ", ".join(f"`{cls.TAG}`" for cls in table) or "(none)"
        lines.append(f"| {state} | {accepted} |")
    lines.append("")
    return "\n".join(lines)


def generated() -> str:
    return "\n".join(
        [
            BEGIN,
            "",
            _machine("Subject", subject.TRANSITIONS, subject.STATE_EDGES),
            _machine("Collector", collector.TRANSITIONS, collector.STATE_EDGES),
            END,
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only check that SPEC.md is up to date")
    args = parser.parse_args(argv)
    text = SPEC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN), text.index(END) + len(END)
    updated = text[:start] + generated() + text[end:]
    if args.check:
        if updated != text:
            print("protocol/SPEC.md is out of date: run python protocol/generate.py", file=sys.stderr)
            return 1
        return 0
    SPEC.write_text(updated, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
