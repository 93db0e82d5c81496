"""README.md stays true: its Python examples run, its make targets exist, its settings are real."""

from __future__ import annotations

import re
from pathlib import Path

from counters_tasks.core.settings import load_settings

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text()


def test_python_examples_run(eager_app, redis_url, raw_conn):
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks
    for block in blocks:
        exec(compile(block.replace("redis://localhost:6379/0", redis_url), "README.md", "exec"), {})
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
