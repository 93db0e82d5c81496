"""The package's architecture holds: layers import only downwards, no import cycles (none hidden
in a function either), no module uses another module's private names, every folder says what
it holds and what it may import."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "counters_tasks"
ARCHITECTURE = REPO / "docs" / "architecture.md"


def read_layers() -> list[list[str]]:
    """The layer map of docs/architecture.md (its section "Layers": a numbered list, one layer a
    line, its members in backticks), lowest first."""
    section = ARCHITECTURE.read_text().split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    layers = [re.findall(r"`(\w+)`", line) for line in re.findall(r"^\d+\. (.+)$", section, re.M)]
    assert layers and all(layers), "docs/architecture.md: no layer list under '## Layers'"
    return layers


LAYERS = read_layers()
"""Each module's layer is found by its first name under the package; lower layers come first."""


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    head = module.split(".")[0]
    for n, members in enumerate(LAYERS):
        if head in members:
            return n
    raise AssertionError(f"{module} belongs to no layer: add it to the layer list of docs/architecture.md")


def resolve(module: str, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The package modules an import statement of ``module`` brings in."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names if a.name.startswith("counters_tasks")]
        return [n.removeprefix("counters_tasks").lstrip(".") or "__init__" for n in names]
    if node.level == 0:
        if not (node.module or "").startswith("counters_tasks"):
            return []
        base = node.module.removeprefix("counters_tasks").lstrip(".")
    else:
        package = module.split(".")[:-1]  # the package a module (or an __init__) is in
        up = package[: len(package) - (node.level - 1)]
        base = ".".join([*up, *(node.module.split(".") if node.module else [])])
    found = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}" if base else alias.name
        if candidate in MODULES or f"{candidate}.__init__" in MODULES:
            found.append(candidate if candidate in MODULES else f"{candidate}.__init__")
        else:
            found.append(base if base in MODULES else f"{base}.__init__" if base else "__init__")
    return found


def imports(module: str) -> tuple[set[str], list[tuple[int, str]]]:
    """(modules imported at module level, [(line, module) imported inside a function or class])."""
    tree = ast.parse(MODULES[module].read_text())
    module_level = list(tree.body)  # and what a module-level try (an optional dependency) imports
    module_level += [n for t in tree.body if isinstance(t, ast.Try) for n in t.body]
    top: set[str] = set()
    nested: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = resolve(module, node)
            if node in module_level:
                top.update(targets)
            else:
                nested += [(node.lineno, t) for t in targets]
    return top, nested


def test_every_module_is_in_a_layer():
    for module in MODULES:
        layer_of(module)


def test_no_import_inside_a_function_hides_a_dependency():
    found = {module: nested for module in MODULES if (nested := imports(module)[1])}
    assert found == {}


def test_layers_import_only_downwards():
    wrong = []
    for module in MODULES:
        for target in imports(module)[0]:
            if target == "__init__" and module.startswith(("ops.", "__main__")):
                continue  # the top layer may read the package's version
            if layer_of(target) > layer_of(module):
                wrong.append(f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})")
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    graph = {module: imports(module)[0] - {module} for module in MODULES}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def private_names(tree: ast.AST) -> set[str]:
    """Names starting with one underscore that a module defines (functions, classes, methods,
    module and class attributes, ``self._x`` assignments)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def test_no_module_uses_another_modules_private_names():
    trees = {module: ast.parse(path.read_text()) for module, path in MODULES.items()}
    defined = {module: private_names(tree) for module, tree in trees.items()}
    everywhere = set().union(*defined.values())
    wrong = []
    for module, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                wrong += [
                    f"{module}:{node.lineno} imports {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
            elif isinstance(node, ast.Attribute) and node.attr in everywhere and node.attr not in defined[module]:
                wrong.append(f"{module}:{node.lineno} uses .{node.attr}")
    assert wrong == []


@pytest.mark.parametrize("folder", sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()))
def test_every_folder_says_what_it_holds_and_what_it_may_import(folder):
    doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text()))
    assert doc and "import" in doc, folder
    for module in (PACKAGE / folder).glob("*.py"):
        if module.name != "__init__.py":
            assert f"``{module.stem}``" in doc, f"{folder}/__init__.py does not describe {module.stem}"


def test_the_layer_map_names_every_top_level_module_once_and_only_those():
    names = [name for layer in LAYERS for name in layer]
    assert len(names) == len(set(names)), "a name in two layers of docs/architecture.md"
    top = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert set(names) == top
