"""README.md stays true: its Python examples run, its make targets exist, its settings are real."""

from __future__ import annotations

import re
from pathlib import Path

from counters_tasks.core.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_python_examples_run(eager_app, redis_url, raw_conn):
    for name in ("README.md", "docs/api.md"):
        blocks = re.findall(r"```python\n(.*?)```", (REPO / name).read_text(), re.S)
        assert blocks, name
        for block in blocks:
            exec(compile(block.replace("redis://localhost:6379/0", redis_url), name, "exec"), {"__name__": "__main__"})
    from counters_tasks import counters

    assert {"signups", "hits"} <= set(counters.known_counters(raw_conn))


def test_make_targets_exist():
    makefile = (REPO / "Makefile").read_text()
    for target in set(re.findall(r"^make (\w[\w-]*)", README, re.M)):
        assert re.search(rf"^{target}:", makefile, re.M), target


def test_every_counters_setting_in_the_table_is_read_by_the_code():
    names = set(re.findall(r"^\| `(COUNTERS_\w+|CELERY_\w+)`", README, re.M))
    assert names
    code = (REPO / "counters_tasks" / "core" / "settings.py").read_text()  # the one module that reads the environment
    for name in names:
        assert name in code, name
    assert load_settings({}).dedupe_ttl == int(re.search(r"`COUNTERS_DEDUPE_TTL` \| .*? \| (\d+) \|", README)[1])


def test_every_relative_link_of_the_docs_resolves():
    """README.md and docs/**/*.md: a link to a file of the repository names one that exists."""
    broken = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(REPO)} -> {target}")
    assert broken == []


def test_readme_stays_short_and_in_a_users_order():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:5] == ["Install", "The two commands", "Using it from an app", "Reading the numbers",
                            "Configuration"]
    assert len(README.splitlines()) < 230
