"""The layout is the architecture: every import of coutil goes down the declared layers, none goes in a circle.

Every module's imports are walked from its source, function-level imports included (an import
inside a function hides a dependency, it does not remove it). A module may import its own layer
and the layers below it; the module graph must have no cycle at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import coutil

PACKAGE = Path(coutil.__file__).parent

#: Bottom to top. A module may import modules of its own layer and of the layers below.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("coutil.errors", "coutil.fileio"),
    ("coutil.sdc",),
    ("coutil.audit",),
    ("coutil.protocol",),
    ("coutil.adversary",),
    ("coutil.net",),
    ("coutil.round",),
    ("coutil.collector",),
    ("coutil.experiment",),
    ("coutil.cli",),
    ("coutil.__main__",),
)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer(module: str) -> int | None:
    for index, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def import_graph(root: Path) -> dict[str, dict[str, int]]:
    """module -> {imported coutil module: first line}, for every module under ``root``."""
    modules = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for imported in targets:
                target = imported
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                # A module importing its own package's __init__ (for a re-export) is not an edge we check.
                if target and target != name and not name.startswith(target + ".") and target != root.name:
                    edges.setdefault(target, node.lineno)
        graph[name] = edges
    return graph


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    problems = []
    for module, edges in sorted(graph.items()):
        own = _layer(module)
        if own is None:
            if module != "coutil":
                problems.append(f"{module}: in no declared layer (add it to LAYERS)")
            continue
        for target, line in sorted(edges.items()):
            theirs = _layer(target)
            if theirs is not None and theirs > own:
                problems.append(f"{module}:{line} imports {target}, a higher layer")
    return problems


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_import_goes_down_the_layers() -> None:
    assert layer_violations(import_graph(PACKAGE)) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph(PACKAGE)) == []


def test_cli_modules_do_not_import_each_other() -> None:
    """Command modules are thin and independent; only `coutil.cli.common` is shared."""
    graph = import_graph(PACKAGE)
    shared = {"coutil.cli.common", "coutil.cli"}
    crossings = [f"{m} -> {t}" for m, edges in graph.items() if m.startswith("coutil.cli.") and m not in shared
                 for t in edges if t.startswith("coutil.cli.") and t not in shared]
    assert crossings == []


def test_the_walker_sees_violations_and_cycles(tmp_path: Path) -> None:
    """The checks can fail: a fake package with an upward import (inside a function) and a circle."""
    root = tmp_path / "coutil"
    for sub in ("sdc", "protocol"):
        (root / sub).mkdir(parents=True)
        (root / sub / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "sdc" / "low.py").write_text("def f():\n    from coutil.protocol import high\n")
    (root / "protocol" / "high.py").write_text("from . import other\n")
    (root / "protocol" / "other.py").write_text("import coutil.protocol.high\n")
    graph = import_graph(root)
    assert layer_violations(graph) == ["coutil.sdc.low:2 imports coutil.protocol, a higher layer",
                                       "coutil.sdc.low:2 imports coutil.protocol.high, a higher layer"]
    assert cycles(graph) == [["coutil.protocol.high", "coutil.protocol.other"]]
