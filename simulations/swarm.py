"""Run one simulated protocol round (a swarm of subjects and a collector) from a TOML file.

    python simulations/swarm.py --config simulations/configs/small.toml --seed 1 --out out/sim1

Options: ``--data CSV`` overrides the file's ``[data]`` source, ``--subjects N`` the number of
subjects (synthetic) or of CSV rows, ``--json`` prints the summary as one JSON object on stdout.
The same run is available as ``coutil simulate``; both use `coutil.round.memory.run_memory_round`.
Exit codes as the CLI: 0 completed, 2 bad input, 4 the round did not complete.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coutil.errors import CoutilError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="simulation TOML file")
    parser.add_argument("--seed", type=int, default=1, help="seed of everything random in the run")
    parser.add_argument("--out", type=Path, default=None, help="output directory")
    parser.add_argument("--data", type=Path, default=None, help="CSV overriding the [data] source")
    parser.add_argument("--subjects", type=int, default=None, help="number of subjects / CSV rows")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE",
                        help="override one key of the round file (k=3, data.rows=100, network.loss=0.1)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from coutil.cli.round_commands import simulate

    try:
        simulate(args.config, args.seed, args.out, args.data, args.subjects, args.json,
                 show_progress=not args.no_progress, sets=tuple(args.sets))
    except CoutilError as exc:
        print(f"swarm: error: {exc}", file=sys.stderr)
        return int(exc.exit_code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
