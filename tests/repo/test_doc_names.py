"""The Markdown pages name only code that exists: every inline code span of README.md, CHANGELOG.md
and docs/**/*.md that refers to the package's code resolves, so a rename or a removal that leaves
a page behind fails here instead of misleading its reader.

What counts as a reference to the code (the rule; anything else in backticks is not checked):

1. A path ending ``.py`` or ``.lua`` (``store/lua/site_day.lua``, ``counters_tasks/worker/broker.py``,
   ``tests/repo/test_readme.py``, ``paths.py``), optionally followed by ``::name`` (a pytest node id,
   whose names may hold ``*`` to name a family of tests) or ``:name`` / ``: name`` (a name of that
   file). The path names a file of the repository (the root's files and the folders in
   ``SOURCE_FOLDERS``) whose path is it or ends with ``/`` and it: a page says "``worker/broker.py``"
   for ``counters_tasks/worker/broker.py`` and "``lua/lib/hash_total.lua``" under ``store``. The
   names after it are defined at the top of that file (functions, classes, assignments), a node id's
   further names inside the class before them. Commands (a space but the ``: name`` form) and
   placeholders (``tests/test_<module>.py``) are not paths.
2. A folder or file path starting with ``counters_tasks/`` exists.
3. A dotted name (optionally called: ``skips.day_counts()``, ``sitestats.top_pages(conn, ...)``) whose
   first part is ``counters_tasks`` or the name of a module or folder directly under ``counters_tasks``
   (``visits.write_calls``, ``worker.batch_apply.apply_batch``), or a public name of the package
   (``counters_tasks.__all__``: ``VisitRecorder.record``), resolves from the package: each part a
   submodule (imported) or an attribute (getattr). A Celery task's registered name
   (``counters_tasks.record_visit``) resolves when ``counters_tasks.tasks`` holds the task of that name.
   Dotted names starting with a deeper module (``deployment.visible``, ``settings.X``) are not
   checked: those first parts are also JSON fields and Django's settings in the pages.

A changelog entry that lists removed or renamed names (a bullet of CHANGELOG.md starting "- Removed"
or "- Renamed") is not checked: it names what is gone, on purpose.

Run it alone: ``.venv/bin/python -m pytest tests/repo/test_doc_names.py -q`` (docs/development.md,
"Habits").
"""

from __future__ import annotations

import ast
import fnmatch
import importlib
import re
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

import counters_tasks

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "counters_tasks"
PAGES = [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]
SOURCE_FOLDERS = ("counters_tasks", "tests", "bench", "scripts", "docs", "constraints", ".ci")
"""Where a path of the pages may point (the root's own files too); not ``build/`` or a venv, whose
copies of the package would hide a file the package no longer has."""

TOP_NAMES = {p.stem for p in PACKAGE.glob("*.py")} | {
    p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()
}
FIRST_PARTS = TOP_NAMES | set(counters_tasks.__all__) | {"counters_tasks"}
"""The first parts of the dotted names checked (rule 3)."""

PATH = re.compile(r"(?P<path>\w[\w./-]*\.(?:py|lua))(?:(?P<sep>::|:\s?)(?P<names>[\w*]+(?:::[\w*]+)*))?")
DOTTED = re.compile(r"(?P<name>[A-Za-z_]\w*(?:\.\w+)+)(?:\(.*\))?")
PACKAGE_PATH = re.compile(r"counters_tasks/[\w./-]*")


def inline_code(text: str) -> list[str]:
    """The page's inline code spans (fenced blocks left out: their Python is run by other tests)."""
    return re.findall(r"`([^`\n]+)`", re.sub(r"^[ \t]*```.*?^[ \t]*```", "", text, flags=re.S | re.M))


@cache
def repository_files() -> tuple[str, ...]:
    files = [p for p in REPO.iterdir() if p.is_file()]
    for folder in SOURCE_FOLDERS:
        files += [p for p in (REPO / folder).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return tuple(p.relative_to(REPO).as_posix() for p in files)


def find_file(path: str) -> Path | None:
    """The repository's file the page means by ``path`` (rule 1), the shortest match first."""
    matches = sorted((f for f in repository_files() if f == path or f.endswith("/" + path)), key=len)
    return REPO / matches[0] if matches else None


@cache
def defined_names(path: Path) -> dict[str, set[str]]:
    """``{"": top-level names, class name: its names}`` of a Python file (Lua files define none)."""
    names: dict[str, set[str]] = {"": set()}
    if path.suffix != ".py":
        return names
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[""].add(node.name)
            if isinstance(node, ast.ClassDef):
                names[node.name] = {n.name for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names[""].update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def path_resolves(path: str, names: str | None) -> bool:
    found = find_file(path)
    if found is None:
        return False
    scope = ""
    for name in (names or "").split("::") if names else []:
        matches = fnmatch.filter(defined_names(found).get(scope, set()), name)
        if not matches:
            return False
        scope = matches[0]
    return True


def import_part(owner: object, part: str) -> object:
    """``owner.part``: a submodule when ``owner`` is a module that has one (``counters_tasks.app``
    the module, not the Celery app its ``__getattr__`` makes), else the attribute."""
    if isinstance(owner, ModuleType) and hasattr(owner, "__path__"):
        full = f"{owner.__name__}.{part}"
        try:
            return importlib.import_module(full)
        except ModuleNotFoundError as error:
            if error.name != full:
                raise
    return getattr(owner, part)


def dotted_resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[0] == "counters_tasks":
        parts = parts[1:]
    obj: object = counters_tasks
    try:
        for part in parts:
            obj = import_part(obj, part)
        return True
    except AttributeError:
        pass
    if len(parts) == 1 and name.startswith("counters_tasks."):  # a task's registered name
        tasks = importlib.import_module("counters_tasks.tasks")
        return getattr(getattr(tasks, parts[0], None), "name", None) == name
    return False


def reference(token: str) -> tuple[str, bool] | None:
    """``(kind, resolves)`` when ``token`` refers to the package's code (the module's rule), else None."""
    if m := PATH.fullmatch(token):
        return "path", path_resolves(m["path"], m["names"])
    if PACKAGE_PATH.fullmatch(token):
        return "path", (REPO / token).exists()
    if (m := DOTTED.fullmatch(token)) and m["name"].split(".")[0] in FIRST_PARTS:
        return "name", dotted_resolves(m["name"])
    return None


REMOVAL = re.compile(r"^- (?:Removed|Renamed)\b.*?(?=^\S|^- |\Z)", re.S | re.M)
"""A changelog entry that lists removed or renamed names (a bullet starting "- Removed" or
"- Renamed", up to the next bullet or heading): the one place a page names code that no longer
exists, on purpose."""


def checked_text(page: Path) -> str:
    """What of ``page`` is checked: all of it, but the changelog's removal entries."""
    text = page.read_text()
    return REMOVAL.sub("", text) if page.name == "CHANGELOG.md" else text


def test_a_removal_entry_is_the_only_part_left_out():
    text = (
        "- Removed `visits.gone`, `visits.gone_too`\n  and `visits.also_gone`.\n- Kept `visits.apply_visits`.\n"
        "- Renamed `visits.old` -> `visits.new`.\n"
    )
    assert inline_code(REMOVAL.sub("", text)) == ["visits.apply_visits"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_code_name_of_the_page_exists(page):
    missing = []
    for token in inline_code(checked_text(page)):
        found = reference(token)
        if found and not found[1]:
            missing.append(token)
    assert not missing, f"{page.relative_to(REPO)} names code that does not exist: {sorted(set(missing))}"


def test_the_rule_finds_the_code_names_of_the_pages():
    """The checker sees the pages' references (a change of its rule that sees none fails here)."""
    kinds = [found[0] for page in PAGES for token in inline_code(page.read_text()) if (found := reference(token))]
    assert kinds.count("path") > 100 and kinds.count("name") > 50, (kinds.count("path"), kinds.count("name"))


@pytest.mark.parametrize(
    "token, expected",
    [
        ("visits.write_calls", ("name", True)),
        ("worker.batch_apply.apply_batch", ("name", True)),
        ("counters_tasks.app", ("name", True)),
        ("app.MaskingAMQP", ("name", True)),
        ("counters_tasks.record_visits", ("name", True)),
        ("skips.day_counts()", ("name", True)),
        ("VisitRecorder.record(..., referrer=, utm=)", ("name", True)),
        ("VisitRecorder.no_such_method()", ("name", False)),
        ("sitestats.top_pages(conn, start, end, limit=10)", ("name", True)),
        ("sitestats.no_such_name", ("name", False)),
        ("counters_tasks.no_such_task", ("name", False)),
        ("store.no_such_module.name", ("name", False)),
        ("store/lua/site_day.lua", ("path", True)),
        ("counters_tasks/worker/broker.py", ("path", True)),
        ("lua/lib/hash_total.lua", ("path", True)),
        ("store/client.py:is_transient", ("path", True)),
        ("store/client.py:no_such_name", ("path", False)),
        ("tests/repo/test_doc_names.py::test_the_rule_*", ("path", True)),
        ("tests/repo/test_doc_names.py::test_no_such_test", ("path", False)),
        ("store/lua/no_such_script.lua", ("path", False)),
        ("counters_tasks/ops/static/", ("path", True)),
        ("counters_tasks/no_such_folder/", ("path", False)),
        ("deployment.visible", None),  # a JSON field, not checked (a deeper module's name)
        ("tests/test_<module>.py", None),  # a placeholder
        ("manage.py runserver", None),  # a command
        ("/static/", None),  # a URL path
    ],
)
def test_the_rule(token, expected):
    assert reference(token) == expected
