"""Every grader module imports only from its own layer or the layers below it, and no import cycle exists."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from conftest import ROOT

GRADER = ROOT / "grader"
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# Lowest first. A module belongs to the first layer one of whose prefixes names it or a package holding it. The
# worker imports nothing of the grader outside itself, so it sits at the bottom: the case types above it build
# its requests.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("worker", ("grader.worker",)),
    ("text", ("grader.text", "grader.paths", "grader")),
    ("model", ("grader.model",)),
    ("confine", ("grader.confine",)),
    ("judge", ("grader.judge", "grader.author")),
    ("outputs", ("grader.outputs",)),
    ("engine", ("grader.engine",)),
    ("course", ("grader.course", "grader.watch")),
    ("commands", ("grader.commands",)),
    ("cli", ("grader.cli", "grader.__main__", "grader.bench")),
]

# The one import allowed to climb, named with its reason in docs/architecture.md's "Layers" section.
UPWARD: dict[tuple[str, str], str] = {
    ("grader.model.problem", "grader.judge.cases"): "problems' generators build `Call`s of `grader.judge.cases`",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(GRADER.rglob("*.py")) if "__pycache__" not in p.parts}


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or (p != "grader" and module.startswith(p + ".")) for p in prefixes):
            return index
    raise AssertionError(f"{module} belongs to no layer")


def _owning_module(name: str) -> str:
    """The grader module an imported name lives in (`grader.x.y.Name` -> `grader.x.y`)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
    for alias in node.names:
        yield f"{base}.{alias.name}"


def imports_of(module: str) -> set[str]:
    """Every grader module `module` imports, at the top or inside a function, type-checking blocks included."""
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found = {
        _owning_module(target)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in _targets(module, node)
        if target == "grader" or target.startswith("grader.")
    }
    return found - {module}


GRAPH = {module: imports_of(module) for module in MODULES}


def test_every_module_has_a_layer() -> None:
    assert [m for m in MODULES if not any(m == p or m.startswith(p + ".") for _, ps in LAYERS for p in ps)] == []


def test_imports_resolve_to_grader_modules() -> None:
    assert {(m, d) for m, deps in GRAPH.items() for d in deps if d not in MODULES} == set()


def test_layers_import_only_downwards() -> None:
    upward = {(m, d) for m, deps in GRAPH.items() for d in deps if layer_of(d) > layer_of(m)}
    assert upward == set(UPWARD)


def test_worker_imports_only_itself() -> None:
    worker = [m for m in MODULES if m.startswith("grader.worker")]
    assert {d for m in worker for d in GRAPH[m] if not d.startswith("grader.worker")} == set()


def _cycle_from(start: str, path: list[str], seen: set[str]) -> list[str] | None:
    for nxt in sorted(GRAPH[start]):
        if nxt in path:
            return [*path[path.index(nxt) :], nxt]
        if nxt not in seen:
            seen.add(nxt)
            if cycle := _cycle_from(nxt, [*path, nxt], seen):
                return cycle
    return None


def test_no_import_cycle() -> None:
    seen: set[str] = set()
    for module in MODULES:
        if module not in seen:
            seen.add(module)
            assert _cycle_from(module, [module], seen) is None


def test_a_cycle_is_found() -> None:
    """The search itself: a two-module loop planted in a copy of the graph is reported."""
    planted = {**GRAPH, "grader.text": GRAPH["grader.text"] | {"grader.paths"}}
    planted["grader.paths"] = GRAPH["grader.paths"] | {"grader.text"}
    original = dict(GRAPH)
    GRAPH.update(planted)
    try:
        assert _cycle_from("grader.text", ["grader.text"], {"grader.text"}) == [
            "grader.text",
            "grader.paths",
            "grader.text",
        ]
    finally:
        GRAPH.clear()
        GRAPH.update(original)


def _documented_layers() -> list[str]:
    section = ARCHITECTURE.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. \*\*(\w+)\*\*", section, re.M)


def test_architecture_shows_the_layers_and_names_the_upward_edge() -> None:
    assert _documented_layers() == [name for name, _ in reversed(LAYERS)]
    section = ARCHITECTURE.read_text().split("## Layers", 1)[1].split("\n## ", 1)[0]
    for importer, imported in UPWARD:
        assert f"`{importer}` → `{imported}`" in section
