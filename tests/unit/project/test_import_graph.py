"""The package's structure, read from its source: no import cycle, docker behind engine.py only,
planning code (matrix, compat, plan, tags, render) free of the engine (docs/architecture.md)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "imagesmith"
PLANNING = ("imagesmith.model.matrix", "imagesmith.model.compat", "imagesmith.model.plan", "imagesmith.model.tags", "imagesmith.render.contexts",
            "imagesmith.model.grammar", "imagesmith.model.located", "imagesmith.render.guard", "imagesmith.model.paths",
            "imagesmith.model.matrix.records", "imagesmith.model.matrix.sections", "imagesmith.model.validation")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(path: Path, module_level: bool) -> set[str]:
    """Modules ``path`` imports: at module level only (what runs at import), or anywhere."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if module_level else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = {f"{node.module}.{a.name}" for a in node.names}
            names.update(subs)
            names.add(node.module)
    return names


def graph(module_level: bool = True) -> dict[str, set[str]]:
    mods = modules()
    out = {}
    for name, path in mods.items():
        deps = {d for d in imports(path, module_level) if d in mods and d != name}
        # `from package import submodule` needs the submodule, not the package's own imports
        out[name] = {d for d in deps if not any(s.startswith(d + ".") for s in deps)}
    return out


def test_there_is_no_import_cycle_counting_every_import() -> None:
    """Imports inside functions and under TYPE_CHECKING count too: a circle tied inside a function is still a circle."""
    order = list(graphlib.TopologicalSorter(graph(module_level=False)).static_order())  # CycleError names the cycle
    assert "imagesmith.edges.engine" in order and len(order) == len(modules())


def test_only_the_engine_edge_imports_docker() -> None:
    users = sorted(name for name, path in modules().items()
                   if any(d == "docker" or d.startswith("docker.") for d in imports(path, module_level=False)))
    assert "imagesmith.edges.engine" in users
    assert [u for u in users if u != "imagesmith.edges.engine" and not u.startswith("imagesmith.edges.engine.")] == []


def test_planning_code_never_reaches_the_engine() -> None:
    g = graph(module_level=False)
    for start in PLANNING:
        seen, todo = set(), [start]
        while todo:
            for dep in g.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        assert "imagesmith.edges.engine" not in seen, f"{start} imports the engine (through {sorted(seen)})"
