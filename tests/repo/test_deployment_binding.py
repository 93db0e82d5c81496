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


KEY_MODULES = [Path(keys.__file__), *sorted((PACKAGE / "sitestats").glob("*.py"))]
"""Where keys are made: store/keys.py (the primitives and the keys of counters, rankings, uniques...)
and the table modules of sitestats (each table's own keys)."""


def tag_key_makers() -> set[tuple[str, str]]:
    """The functions given no client, of store/keys.py and the table modules, whose keys depend on
    the tag key (calling it, directly or not): (module's last name, name)."""
    functions = {
        (path.stem, node.name): node
        for path in KEY_MODULES
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and not takes_a_client(node)
    }
    makers = {("keys", "tag_key")}
    while True:
        more = {
            name
            for name, node in functions.items()
            if name not in makers
            and any(isinstance(c, ast.Call) and called_name(c, name[0]) in makers for c in ast.walk(node))
        }
        if not more:
            return makers - {("keys", "tag_key")}
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
            used = {called_name(c, path.stem) for c in ast.walk(node) if isinstance(c, ast.Call)}
            if used & makers and ("keys", "bound") not in used:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}")
    return found


def test_the_key_makers_are_found():
    makers = tag_key_makers()
    assert {("keys", "counter_hash"), ("keys", "ranking_meta"), ("keys", "uniques_levels")} <= makers
    assert {("page_all", "path_tag"), ("site_day", "site_day_totals"), ("who_visits", "page_scope")} <= makers
    assert ("keys", "tag_key_name") not in makers and ("keys", "dead_letters") not in makers  # keys without a tag


def test_every_public_function_given_a_client_binds_its_deployment():
    assert unbound_public_functions() == []


def is_binding(node: ast.AST) -> bool:
    """A ``with keys.bound(...)`` block, or a call of ``store.scripts.write_through`` (which runs
    what it is given within ``keys.bound``: a kind's write queues its plan there)."""
    if isinstance(node, ast.Call):
        func = node.func
        return (func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")) == "write_through"
    return isinstance(node, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "bound"
        for item in node.items
    )


def called_name(call: ast.Call, module: str) -> tuple[str, str] | None:
    """(module, function) of a call of ``name(...)`` (this module's) or ``mod.name(...)``."""
    if isinstance(call.func, ast.Name):
        return module, call.func.id
    if isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name):
        return call.func.value.id, call.func.attr
    return None


def parsed_functions(sources: dict[str, str] | None = None) -> dict[tuple[str, str], ast.FunctionDef]:
    """Every function of the package but store/keys.py's, by (module's last name, name); ``sources``
    (module -> text) stands in for files of the package (the test of this test)."""
    functions: dict[tuple[str, str], ast.FunctionDef] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "keys.py" and path.parent.name == "store":
            continue
        text = (sources or {}).get(path.stem) or path.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                functions.setdefault((path.stem, node.name), node)
    return functions


def keys_made_outside_a_binding(sources: dict[str, str] | None = None) -> list[str]:
    """Where a public function given a client makes a key outside its ``keys.bound`` block, itself
    or through a helper that makes keys without binding (one given no client, or a private one):
    what ``sitestats.clients_scope`` did before ``top_clients``'s binding (and ``views.clients_view``
    with none), which raised ``DeploymentNotBound`` unpinned."""
    functions = parsed_functions(sources)
    makers = tag_key_makers()
    while True:  # the helpers that make keys with the binding of their caller
        more = {
            name
            for name, node in functions.items()
            if name not in makers
            and (name[1].startswith("_") or not takes_a_client(node))
            and not any(is_binding(n) for n in ast.walk(node))
            and any(isinstance(c, ast.Call) and called_name(c, name[0]) in makers for c in ast.walk(node))
        }
        if not more:
            break
        makers |= more
    found = []
    for (module, name), node in functions.items():
        if not name.startswith("_") and takes_a_client(node):
            found += [
                f"{module}.{name}:{call.lineno} {'.'.join(made)}"
                for call, made in unbound_calls(node, module, makers, bound=False)
            ]
    return found


def unbound_calls(
    branch: ast.AST, module: str, makers: set[tuple[str, str]], bound: bool
) -> list[tuple[ast.Call, tuple[str, str]]]:
    """The calls of ``makers`` under ``branch`` that no ``keys.bound`` block around them encloses."""
    found = []
    for child in ast.iter_child_nodes(branch):
        made = called_name(child, module) if isinstance(child, ast.Call) else None
        if made in makers and not bound:
            found.append((child, made))
        found += unbound_calls(child, module, makers, bound or is_binding(child))
    return found


def test_every_key_is_made_inside_the_binding():
    assert keys_made_outside_a_binding() == []


def test_a_helper_making_keys_before_the_binding_is_found():
    """The check finds the bug it is for: ``clients_scope`` as it was (a key made before any binding)."""
    before = """
def clients_scope(site, path):
    return page_scope(check_site(site), check_path(path))

def top_clients(conn, start, end, *, site=None, path=None):
    scope = clients_scope(site, path)
    with keys.bound(conn):
        return conn.hgetall(sources.site_day_table(start, "b", site=scope))
"""
    found = keys_made_outside_a_binding({"who_visits": before})
    assert found == ["who_visits.top_clients:6 who_visits.clients_scope"]
