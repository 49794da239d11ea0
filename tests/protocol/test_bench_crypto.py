"""The crypto microbenchmark runs and compares the same operations (the figures are for README)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "simulations" / "bench" / "bench_crypto.py"


def test_bench_crypto_times_every_operation_on_both_libraries(tmp_path: Path) -> None:
    assert SCRIPT.is_file(), f"{SCRIPT} is missing"
    bench = runpy.run_path(str(SCRIPT))
    out = tmp_path / "crypto.json"
    assert bench["main"](["--number", "20", "--out", str(out)]) == 0
    results = json.loads(out.read_text(encoding="utf-8"))["results"]
    assert [r["operation"].split()[0] for r in results] == ["Ed25519"] * 2 + ["X25519"] * 2 + ["ChaCha20-Poly1305"] * 2
    for row in results:
        assert row["coutil_us"] > 0 and row["other_us"] > 0
        ratio = row["other_us"] / row["coutil_us"]
        assert abs(row["other_over_coutil"] - ratio) < 0.02 * ratio + 0.01
