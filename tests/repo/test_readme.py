"""README.md stays true: its Python examples run, its make targets exist, its extras are the package's;
and docs/configuration.md documents every setting the code reads, with its true default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from counters_tasks.core.settings import load_settings

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
CONFIGURATION = (REPO / "docs" / "configuration.md").read_text()
SETTINGS_CODE = (
    REPO / "counters_tasks" / "core" / "settings.py"
).read_text()  # the one module that reads the environment


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


def configuration_table() -> dict[str, str]:
    """``{variable: its default cell}`` of docs/configuration.md's table."""
    return dict(re.findall(r"^\| `((?:COUNTERS|CELERY|FLOWER)_\w+)` \| .*? \| ([^|]*?) \|$", CONFIGURATION, re.M))


def test_every_setting_in_the_table_is_read_by_the_code():
    names = set(configuration_table())
    assert len(names) > 40
    for name in names:
        assert f'"{name}"' in SETTINGS_CODE, name


def test_every_setting_the_code_reads_is_in_the_table():
    read = set(re.findall(r'"((?:COUNTERS|CELERY|FLOWER)_[A-Z_]+)"', SETTINGS_CODE))
    assert read and read - set(configuration_table()) == set()


def test_the_tables_numeric_defaults_are_the_codes():
    """Each setting read as a number (``field=_int(env, "NAME", ...)``) whose default the table
    gives as a number: the value of ``load_settings({})``."""
    fields = dict((name, field) for field, name in re.findall(r'(\w+)=_(?:int|float)\(env, "(\w+)"', SETTINGS_CODE))
    defaults = load_settings({})
    checked = []
    for name, cell in configuration_table().items():
        if name in fields and re.fullmatch(r"\d+(\.\d+)?", cell):
            assert getattr(defaults, fields[name]) == float(cell), (name, cell)
            checked.append(name)
    assert {"COUNTERS_DEDUPE_TTL", "COUNTERS_VISIBILITY_TIMEOUT", "COUNTERS_REDIS_POOL_SIZE"} <= set(checked)


def test_the_readme_points_at_the_configuration_page():
    section = README.split("## Configuration\n", 1)[1].split("\n## ", 1)[0]
    assert "(docs/configuration.md)" in section and "| `COUNTERS_" not in README


def test_the_extras_table_names_the_packages_extras():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    section = README.split("## Install\n", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", section, re.M)) == extras


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


def test_every_docs_page_named_in_the_text_exists():
    """A page named in prose or code, not as a link (``(docs/cli.md, docs/dashboard.md)``), is a
    reference too: the link check above reads ``](target)`` only, so docs/clients.md named a
    docs/dashboard.md that never existed (issue 40). Every ``docs/<path>`` of README.md,
    CHANGELOG.md and docs/**/*.md names a file of the repository."""
    missing = []
    for page in [REPO / "README.md", REPO / "CHANGELOG.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in re.findall(r"(?<![\w/.-])(docs/[\w./-]*\w)", page.read_text()):
            if not (REPO / target).exists():
                missing.append(f"{page.relative_to(REPO)} names {target}")
    assert missing == []


def test_readme_stays_short_and_in_a_users_order():
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings[:5] == [
        "Install",
        "The two commands",
        "Using it from an app",
        "Reading the numbers",
        "Configuration",
    ]
    assert len(README.splitlines()) < 230


def test_the_session_ids_size_is_the_codes():
    """README said 56-bit session ids where the code (and docs/keys.md) reads 15 hex digits: 60 bits."""
    from counters_tasks.uniques import SESSION_DIGITS

    bits = SESSION_DIGITS * 4
    assert f"{bits}-bit ids" in README and f"first {SESSION_DIGITS} hex digits" in README
    assert f"first {SESSION_DIGITS} hex digits ({bits} bits)" in (REPO / "docs" / "keys.md").read_text()
