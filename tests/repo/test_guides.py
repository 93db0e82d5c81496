"""docs/integrations.md and docs/guides/ stay true to the code: every Python block parses, every
name they import from the package exists, every middleware option they use is a real one, the
option table lists exactly the options with their defaults, and the key snippets run."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from counters_tasks import recorder as recorder_module
from counters_tasks import sitestats
from counters_tasks.core.days import local_day
from counters_tasks.integrations import common
from counters_tasks.integrations.common import Options, RequestInfo
from counters_tasks.ranking import Ranking

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "docs" / "integrations.md", *sorted((REPO / "docs" / "guides").glob("*.md"))]
OPTION_NAMES = {f.name for f in dataclasses.fields(Options)}
MIDDLEWARE_CALLS = {"CountersMiddleware", "CountersASGIMiddleware", "Options"}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_the_guides_exist_and_have_python():
    assert {p.name for p in DOCS} >= {"integrations.md", "django.md", "flask.md", "gunicorn.md"}
    assert all(python_blocks(p) for p in DOCS if p.name != "integrations.md") and python_blocks(DOCS[0])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_python_block_parses_and_uses_real_names_and_options(doc):
    for block in python_blocks(doc):
        tree = ast.parse(block)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("counters_tasks"):
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{doc.name}: {node.module}.{alias.name}"
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in MIDDLEWARE_CALLS:
                unknown = {k.arg for k in node.keywords} - OPTION_NAMES - {None}
                assert not unknown, f"{doc.name}: {unknown}"
            elif isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "COUNTERS_MIDDLEWARE":
                keys = {k.value for k in node.value.keys}
                assert keys <= OPTION_NAMES, f"{doc.name}: {keys - OPTION_NAMES}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_dotted_name_of_the_package_in_the_docs_exists(doc):
    for dotted in set(re.findall(r"\bcounters_tasks(?:\.\w+)+", doc.read_text())):
        module_name, _, attribute = dotted.rpartition(".")
        try:
            importlib.import_module(dotted)
        except ImportError:
            assert hasattr(importlib.import_module(module_name), attribute), f"{doc.name}: {dotted}"


def test_the_option_table_lists_every_option_with_its_default():
    text = (REPO / "docs" / "integrations.md").read_text()
    table = text.split("## Options", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| .*\|$", table, re.M)
    assert [name for name, _ in rows] == [f.name for f in dataclasses.fields(Options)]
    defaults = {f.name: f.default for f in dataclasses.fields(Options)}
    checked = 0
    for name, cell in rows:
        literal = re.fullmatch(r"`([^`]*)`(?: \(.*\))?", cell.strip())
        if literal:
            assert eval(literal[1], dict(vars(common))) == defaults[name], name
            checked += 1
    assert checked >= 12
    for prefix in common.DEFAULT_SKIP_PREFIXES:  # "What counts as a page view" names each one
        assert f"`{prefix}`" in text, prefix


def test_the_flask_guide_app_counts_pages_and_bumps(eager_app, raw_conn, monkeypatch):
    monkeypatch.setattr(recorder_module, "_shared", None)
    namespace: dict = {"__name__": "myapp"}
    exec(compile(python_blocks(REPO / "docs" / "guides" / "flask.md")[0], "flask.md", "exec"), namespace)
    client = namespace["app"].test_client()
    day = local_day(time.time())
    try:
        # a closed response is one the server has sent: the middleware hands the visit over then
        with client.get("/", headers={"X-Forwarded-For": "6.6.6.6, 203.0.113.7"}) as first:
            assert first.status_code == 200 and client.get_cookie("ct_sid") is not None
        with client.get("/api/posts") as answer:
            assert answer.status_code == 200
        with client.post("/posts/7/like") as answer:
            assert answer.status_code == 200
        with client.get("/", headers={"X-Forwarded-For": "203.0.113.8"}):
            pass
    finally:
        common.shared_recorder().close(timeout=5)
    site = sitestats.site_visit_info(raw_conn, day)
    assert (site.pv, site.uv) == (2, 2)  # trusted_proxies=1: the two rightmost addresses
    assert sitestats.site_visit_info(raw_conn, day, "/api/posts").pv == 0
    assert Ranking(raw_conn, "likes").top(withscores=True) == [("7", 1)]


def test_the_should_count_example_of_integrations_md():
    blocks = python_blocks(REPO / "docs" / "integrations.md")
    namespace: dict = {}
    exec(compile(blocks[0], "integrations.md", "exec"), namespace)
    should_count = namespace["should_count"]
    json = [("Content-Type", "application/json")]
    assert should_count(RequestInfo("GET", "/app/inbox", "192.0.2.1", {}), 200, json)
    assert not should_count(RequestInfo("GET", "/api/inbox", "192.0.2.1", {}), 200, json)
    browser = {"user-agent": "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"}
    assert should_count(RequestInfo("GET", "/about", "192.0.2.1", browser), 200, [("Content-Type", "text/html")])
    assert not should_count(
        RequestInfo("GET", "/about", "192.0.2.1", {"user-agent": "curl/8.5.0"}), 200, [("Content-Type", "text/html")]
    )  # the default rule skips scripts


def test_the_django_session_id_example_gives_ids_the_recorder_accepts():
    blocks = python_blocks(REPO / "docs" / "guides" / "django.md")
    example = next(b for b in blocks if "def session_id" in b)
    namespace: dict = {}
    exec(compile(example, "django.md", "exec"), namespace)
    user = SimpleNamespace(is_authenticated=True, pk=42)
    sid = namespace["session_id"](RequestInfo("GET", "/", "192.0.2.1", {}, raw=SimpleNamespace(user=user)))
    assert common.valid_session_id(sid) == sid
    anonymous = SimpleNamespace(user=SimpleNamespace(is_authenticated=False, pk=None))
    assert namespace["session_id"](RequestInfo("GET", "/", "192.0.2.1", {}, raw=anonymous)) is None
