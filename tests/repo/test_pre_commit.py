""".pre-commit-config.yaml runs what ``make lint`` runs, with the venv's tools (no hook repository
to download): its hooks' commands are the lint recipe's, so a change of one shows in the other."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def lint_recipe() -> list[str]:
    """The commands of the Makefile's ``lint`` target, ``$(BIN)`` as the default venv's ``.venv/bin``."""
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)[1]
    return [line.strip().replace("$(BIN)", ".venv/bin") for line in recipe.splitlines()]


def test_the_hooks_are_the_lint_recipe_with_local_tools():
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    [repo] = config["repos"]
    assert repo["repo"] == "local"
    hooks = repo["hooks"]
    assert [hook["entry"] for hook in hooks] == lint_recipe()
    for hook in hooks:
        assert hook["language"] == "system" and hook["pass_filenames"] is False, hook["id"]
