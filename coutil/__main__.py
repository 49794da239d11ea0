"""``python -m coutil`` runs the command line."""

from __future__ import annotations

from coutil.cli import main

main()
