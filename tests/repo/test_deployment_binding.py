"""Every public function that makes the deployment's keys binds its deployment (``keys.bound``).

A key made outside ``keys.bound(conn)`` raises ``DeploymentNotBound`` unless ``COUNTERS_TAG_KEY``
is pinned. The suite runs unpinned (tests/conftest.py), so a function that forgot its binding fails
the tests that reach it; this reads the package for the ones no test reaches: a public function that calls a key maker whose name depends on the tag key opens
``keys.bound`` itself (a helper that takes no client, or a private one, is called from one that
does). Before it, ``Ranking.stats``, ``ranking.register_board``, ``ranking.finish_maintenance`` and
``uniques.day_sets`` made their keys with whatever deployment the thread had used last."""

from __future__ import annotations

import ast
from pathlib import Path

from counters_tasks.store import keys

PACKAGE = Path(keys.__file__).resolve().parents[1]


def tag_key_makers() -> set[str]:
    """The functions of store/keys.py whose keys depend on the tag key (calling it, directly or not)."""
    tree = ast.parse(Path(keys.__file__).read_text())
    functions = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

    def called(node: ast.AST) -> set[str]:
        return {c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)}

    makers = {"tag_key"}
    while True:
        more = {name for name, node in functions.items() if name not in makers and called(node) & makers}
        if not more:
            return makers - {"tag_key"}
        makers |= more


def takes_a_client(node: ast.FunctionDef) -> bool:
    names = [a.arg for a in node.args.args + node.args.kwonlyargs]
    uses_self_conn = any(
        isinstance(n, ast.Attribute) and n.attr == "conn" and getattr(n.value, "id", "") == "self"
        for n in ast.walk(node)
    )
    return "conn" in names or uses_self_conn


def unbound_public_functions() -> list[str]:
    makers = tag_key_makers()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "keys.py" and path.parent.name == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_") or not takes_a_client(node):
                continue
            used = {
                c.func.attr
                for c in ast.walk(node)
                if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Attribute)
                and getattr(c.func.value, "id", "") == "keys"
            }
            if used & makers and "bound" not in used:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    return found


def test_the_key_makers_are_found():
    makers = tag_key_makers()
    assert {"path_tag", "counter_hash", "ranking_meta", "uniques_levels", "site_day_totals"} <= makers
    assert "tag_key_name" not in makers and "dead_letters" not in makers  # keys without a tag


def test_every_public_function_given_a_client_binds_its_deployment():
    assert unbound_public_functions() == []
