"""The protocol core is sans-IO: no module of coutil.protocol imports I/O, clocks or global randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import coutil.protocol

FORBIDDEN = {"asyncio", "time", "random", "socket", "aiomqtt", "amqtt", "paho", "threading", "selectors", "datetime",
             "concurrent"}
PROTOCOL_DIR = Path(coutil.protocol.__file__).parent


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _np_random_global_calls(path: Path) -> list[int]:
    """Lines calling numpy's global random state (np.random.<fn> other than default_rng/Generator)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
            inner = node.value
            is_np = isinstance(inner.value, ast.Name) and inner.value.id in ("np", "numpy")
            if is_np and inner.attr == "random" and node.attr not in ("default_rng", "Generator", "PCG64"):
                lines.append(node.lineno)
    return lines


def test_protocol_modules_exist() -> None:
    modules = sorted(p.name for p in PROTOCOL_DIR.glob("*.py"))
    assert "subject.py" in modules and "collector.py" in modules and "messages.py" in modules


def test_no_io_clock_or_global_random_imports() -> None:
    offenders = {}
    for path in PROTOCOL_DIR.glob("*.py"):
        bad = _imports(path) & FORBIDDEN
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}, f"sans-IO violated: {offenders}"


def test_no_numpy_global_random_state() -> None:
    offenders = {p.name: _np_random_global_calls(p) for p in PROTOCOL_DIR.glob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_walker_detects_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import asyncio\nfrom time import monotonic\nimport numpy as np\nx = np.random.rand(3)\n")
    assert _imports(bad) & FORBIDDEN == {"asyncio", "time"}
    assert _np_random_global_calls(bad) == [4]
