"""docs/tasks.md's table of tasks names each kind's arguments as the kind declares them
(``kinds.PACKAGE_KINDS``, ``Kind.fields``; an app's own kind, as the test tree's, is its own to document): docs/tasks.md listed ``record_visit`` without
``site``, ``referrer``, ``utm``, ``user_agent``, ``language`` (issue 40), so a reader could not
know a visit's source or who visits could be sent with it."""

from __future__ import annotations

import re

import pytest

from counters_tasks.kinds import PACKAGE_KINDS
from tests.support.procs import REPO

TASKS_DOC = REPO / "docs" / "tasks.md"


def documented_arguments() -> dict[str, str]:
    """The arguments cell of each task of the table, by the task's full name."""
    rows = re.findall(r"^\| `([\w.]+)` \| ([^|]*) \|", TASKS_DOC.read_text(), re.M)
    return {task: cell.strip() for task, cell in rows}


@pytest.mark.parametrize("kind", PACKAGE_KINDS, ids=lambda kind: kind.name)
def test_each_kinds_task_lists_its_declared_fields_in_order(kind):
    documented = documented_arguments()
    if kind.item_task is not None:  # `ip, path, session_id=None, ...`: the fields, those past `required` with a default
        cell = documented[kind.item_task]
        arguments = [part.strip().strip("`") for part in cell.strip("`").split(",")]
        assert [argument.split("=")[0] for argument in arguments] == list(kind.fields), cell
        assert [("=" in argument) for argument in arguments] == [n >= kind.required for n in range(len(kind.fields))]
    if kind.payload_task is not None:  # `visits` (list of dicts with those keys), or `items` (list of `{route, ...}`)
        cell = documented[kind.payload_task]
        assert cell.startswith(f"`{kind.items_argument}`"), cell
        keys = re.search(r"`\{([^}]*)\}`", cell)
        if keys:
            assert [key.strip() for key in keys.group(1).split(",")] == list(kind.fields), cell
        else:
            assert "with those keys" in cell and kind.item_task is not None, cell
