"""``python -m coutil`` runs the command line."""

from __future__ import annotations

from coutil.cli import main

if __name__ == "__main__":  # worker processes (spawned) import the main module: it must not run the CLI
    main()
