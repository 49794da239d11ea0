"""Where a profiled benchmark's CPU went: self and inclusive shares per function, from py-spy's raw output.

Reproduce the README's 10^5 profile (from the repository root, venv active, py-spy installed)::

    cd simulations/bench
    py-spy record --subprocesses --format raw -r 20 -o /tmp/prof.txt -- \
        python bench_round_mqtt.py --sizes 100000 --workers 2
    python profile_summary.py /tmp/prof.txt --top 40

Every process is sampled (the collector's and the workers'); a line of the raw format is one stack (frames
separated by ``;``, outermost first) and its sample count. Self time is the innermost frame's; inclusive
time counts a function once per stack it appears in. Paths are cut to file names.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

_PATH = re.compile(r" \((?:/[^)]*/)?([^/)]*)\)")


def summarize(path: Path) -> tuple[int, Counter[str], Counter[str]]:
    """Total samples, self samples per function, inclusive samples per function."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        samples = int(count)
        total += samples
        frames = [_PATH.sub(r" (\1)", frame) for frame in stack.split(";")[1:]]  # [0]: the process
        if frames:
            own[frames[-1]] += samples
        for frame in set(frames):
            inclusive[frame] += samples
    return total, own, inclusive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("raw", type=Path, help="py-spy record --format raw output")
    parser.add_argument("--top", type=int, default=30, help="functions to list in each table")
    args = parser.parse_args()
    total, own, inclusive = summarize(args.raw)
    print(f"{total} samples")
    for title, counts in (("self", own), ("inclusive", inclusive)):
        print(f"--- {title}")
        for frame, samples in counts.most_common(args.top):
            print(f"{samples:8d} {100 * samples / max(total, 1):5.1f}%  {frame}")


if __name__ == "__main__":
    main()
