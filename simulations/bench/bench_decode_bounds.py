"""What one hostile, unsigned message costs its receiver while it is decoded (SPEC §7.1 entry budget).

    python simulations/bench/bench_decode_bounds.py [--mib 60]

A message is decoded before its signature can be checked (the sender's key is inside the payload), so
anyone who can publish on a topic a node reads makes it build whatever the bytes describe. msgpack builds
an object of some 30-100 bytes per array entry whatever the entry's size on the wire, so a message of
small entries is an amplifier. Each shape below is a ``--mib`` MiB envelope, decoded with
`coutil.protocol.codec.decode` in a fresh process of its own (spawned: nothing inherited), which reports
the peak of the memory the decoding allocates (`tracemalloc`, a second decode; the message itself
not counted), the time of the first decode, and the outcome (every shape is refused; the question is at what cost).

Shapes: ``nested`` (a batch whose arrays hold 1-entry arrays, 2 bytes each on the wire), ``ints``
(a batch whose arrays hold 3-byte integers), ``release-ints`` (the same under the release's tag, which has
the larger budget), ``chain`` and ``release-chain`` (arrays of 2^20 3-byte integers nested in one another:
each still being built while the next is read, found by a reviewer of the budget), ``envelope`` (the
envelope itself an array of 1-entry arrays); and what the bounds cost honest messages: ``honest-release``
(the signed release of a 10^5-subject round: 20,000 groups, 3.3 MB; a payload that is walked) and
``honest-batch`` (a signed batch of five 300-byte items), each decoded many times (mean per decode). A table on stdout,
``results/bench_decode_bounds.json`` beside it. Compare with the code before the budget by running this
file against a checkout of it (``PYTHONPATH=<checkout> python simulations/bench/bench_decode_bounds.py``).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack

RESULTS = Path(__file__).resolve().parent / "results" / "bench_decode_bounds.json"
ARRAY = 2**16  # entries per inner array: under every array limit, so only the total can stop it
SHAPES = ("nested", "ints", "release-ints", "chain", "release-chain", "envelope", "honest-release", "honest-batch")
#: Decodes timed per shape (the mean is reported): honest messages are timed for what the bounds cost them.
REPEAT = {"honest-release": 50, "honest-batch": 20000}


def _array(entries: int, entry: bytes) -> bytes:
    return b"\xdd" + entries.to_bytes(4, "big") + entry * entries


def _arrays_of(total_bytes: int, entry: bytes) -> list[bytes]:
    per_array = 5 + ARRAY * len(entry)
    return [_array(ARRAY, entry) for _ in range(max(1, total_bytes // per_array))]


def hostile(shape: str, size: int) -> bytes:
    """An envelope of about ``size`` bytes of the given shape (signature zero: it would never verify)."""
    if shape.startswith("honest"):
        return honest(shape)
    if shape == "envelope":
        inner = _arrays_of(size, b"\x91\x00")
        return b"".join([b"\xdd" + (3 + len(inner)).to_bytes(4, "big"), b"\x02", msgpack.packb(b""),
                         msgpack.packb(bytes(64)), *inner])
    tag = "release" if shape.startswith("release") else "batch"
    if shape.endswith("chain"):
        # Arrays of 2^20 entries nested in one another, each still being built while the next is read.
        entries, entry = 2**20, b"\xcd\x12\x34"
        level = _array(entries, entry)
        while len(level) < size:
            level = b"\xdd" + entries.to_bytes(4, "big") + entry * (entries - 1) + level
        payload = b"\x92" + msgpack.packb(tag) + level
        return bytes(msgpack.packb([2, payload, bytes(64)], use_bin_type=True))
    entry = b"\x91\x00" if shape == "nested" else b"\xcd\x12\x34"
    arrays = _arrays_of(size, entry)
    payload = b"".join([b"\xdd" + (1 + len(arrays)).to_bytes(4, "big"), msgpack.packb(tag), *arrays])
    return bytes(msgpack.packb([2, payload, bytes(64)], use_bin_type=True))


def honest(shape: str) -> bytes:
    """A signed honest message: the release of a 10^5-subject round (20,000 groups, 4 columns) or a batch
    of five 300-byte items."""
    from coutil.protocol import codec, crypto
    from coutil.protocol.messages import Batch, Release
    from coutil.protocol.node import SeededRandom

    key = crypto.SigningKey.generate(SeededRandom("bench_decode_bounds"))
    if shape == "honest-batch":
        return codec.encode(Batch(bytes(16), key.public, 1, 1, 1, (bytes(300),) * 5), key)
    groups = 20_000
    return codec.encode(Release(bytes(16), key.public, ("a", "b", "c", "d"), tuple(range(groups)), (5,) * groups,
                                bytes(8 * 4 * 5 * groups), bytes(32), bytes(32)), key)


def _child(path: str, repeat: int) -> None:
    from coutil.errors import RemoteProtocolError
    from coutil.protocol import codec

    data = Path(path).read_bytes()

    def attempt() -> str:
        try:
            codec.decode(data)
            return "accepted"
        except RemoteProtocolError as exc:
            return f"{exc.reason}: {exc.detail[:60]}"

    start = time.perf_counter()
    for _ in range(repeat):
        outcome = attempt()
    elapsed = (time.perf_counter() - start) / repeat
    tracemalloc.start()
    attempt()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(json.dumps({"peak_mb": peak / 2**20, "seconds": elapsed, "outcome": outcome}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=60.0, help="size of each hostile message (MiB)")
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    args = parser.parse_args(argv)
    rows: list[dict[str, Any]] = []
    scratch = Path(RESULTS.parent / ".decode_bounds.bin")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    print(f"{'shape':<14} {'MiB':>6} {'peak MiB':>9} {'s/decode':>10}  outcome")
    try:
        for shape in args.shapes:
            data = hostile(shape, int(args.mib * 2**20))
            scratch.write_bytes(data)
            done = subprocess.run([sys.executable, __file__, "--child", str(scratch), str(REPEAT.get(shape, 1))],
                                  capture_output=True, text=True, check=True)
            row = {"shape": shape, "mib": len(data) / 2**20, **json.loads(done.stdout)}
            rows.append(row)
            print(f"{shape:<14} {row['mib']:>6.1f} {row['peak_mb']:>9.1f} {row['seconds']:>10.6f}  "
                  f"{row['outcome']}")
    finally:
        scratch.unlink(missing_ok=True)
    RESULTS.write_text(json.dumps({"python": platform.python_version(), "msgpack": msgpack.version,
                                   "cpus": multiprocessing.cpu_count(), "runs": rows}, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(main())
