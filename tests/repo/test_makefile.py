"""The Makefile's targets all work: each is run by CI (``.ci/run``) or by a test, the targets that
run again part of the suite select it by markers (not lists of files), ``make constraints`` pins
what is installed, and the development tools are a dependency group, pinned like the rest."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = (REPO / "Makefile").read_text()
CI = (REPO / ".ci" / "run").read_text()


def phony_targets() -> set[str]:
    [line] = re.findall(r"^\.PHONY:(.*)$", MAKEFILE, re.M)
    return set(line.split())


def prerequisites() -> dict[str, set[str]]:
    """``{target: the targets it runs first}`` of every rule."""
    return {m[1]: set(m[2].split()) for m in re.finditer(r"^([\w-]+):(?!=)(.*)$", MAKEFILE, re.M)}


def targets_run_by_tests() -> set[str]:
    """Targets a test runs as a command (``["make", "<target>", ...]``)."""
    found = set()
    for path in (REPO / "tests").rglob("*.py"):
        found.update(re.findall(r"""\[\s*["']make["']\s*,\s*["']([\w-]+)["']""", path.read_text()))
    return found


def targets_run_by_ci() -> set[str]:
    """Targets ``.ci/run`` runs (``make <target>``, alone or after variables), comments left out."""
    lines = [line.split("#", 1)[0] for line in CI.splitlines()]
    return {m for line in lines for m in re.findall(r"(?:^|[\s;&|])make\s+([\w-]+)", line)}


def covered() -> set[str]:
    """The targets run by CI or a test, and those they run first (``test`` runs ``install`` and ``lint``)."""
    rules = prerequisites()
    done: set[str] = set()
    todo = list(targets_run_by_ci() | targets_run_by_tests())
    while todo:
        target = todo.pop()
        if target not in done:
            done.add(target)
            todo += rules.get(target, ())
    return done


def test_every_target_is_declared_phony_and_has_a_rule():
    rules = set(prerequisites())
    assert phony_targets() == rules, "every rule in .PHONY and every .PHONY name a rule"


def test_every_target_is_run_by_ci_or_by_a_test():
    assert phony_targets() - covered() == set()


def test_every_make_command_of_the_docs_is_run_by_ci_or_by_a_test():
    """README.md's and docs/*.md's ``make <target>`` commands (in code blocks and inline code)."""
    named = set()
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        named.update(re.findall(r"(?:^|`)make ([\w][\w-]*)", page.read_text(), re.M))
    assert named - covered() == set()
    assert named - phony_targets() == set()


def test_ci_runs_lint_before_the_tests():
    assert "lint" in prerequisites()["test"] or CI.index("make lint") < CI.index("make test")
    assert prerequisites()["lint"] >= {"install"}
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)[1]
    assert "ruff check ." in recipe and "mypy" in recipe


SELECTING = (
    "check",
    "test-oldest",
    "test-newest",
    "test-oldest-redis",
    "test-redis-server",
    "test-rabbitmq",
)


@pytest.mark.parametrize("target", SELECTING)
def test_targets_select_tests_by_markers(target):
    recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", MAKEFILE, re.M)[1]
    assert "tests/" not in recipe, f"{target} names test files: give them a marker (pyproject.toml) instead"
    declared = {
        line.split(":", 1)[0] for line in re.findall(r'^\s+"(\w+: .*)",$', (REPO / "pyproject.toml").read_text(), re.M)
    }
    used = set()
    for expression in re.findall(r'pytest\b[^\n]*?\s-m (?:"([^"]+)"|(\w+))', recipe):
        used.update(w for w in re.findall(r"\w+", " ".join(expression)) if w not in ("not", "and", "or"))
    assert used and used <= declared, (used, declared)
    for marker in used:
        applied = [p for p in (REPO / "tests").rglob("test_*.py") if f"pytest.mark.{marker}" in p.read_text()]
        assert applied, f"no test module is marked {marker}"


@pytest.mark.processes
def test_make_check_runs_lint_then_selects_the_unit_level_tests():
    """``make check`` (lint, then the fast loop) with ``--collect-only``: its lint passes and its
    selection holds the unit-level tests of every module and none that starts a process or
    measures time (the whole loop is what the target's user runs, in under 2 minutes)."""
    done = subprocess.run(
        ["make", "check", "PYTEST_ARGS=--collect-only"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [(selected, total)] = re.findall(r"(\d+)/(\d+) tests collected", done.stdout)
    assert 900 < int(selected) < int(total)
    for module in ("tests/test_visits.py", "tests/store/test_keys.py", "tests/worker/test_batch_apply.py"):
        assert module in done.stdout, module
    assert "test_a_big_board_is_read_rebuilt_rotated_and_deleted_in_short_calls" not in done.stdout  # budget
    assert "test_worker_and_beat" not in done.stdout  # processes


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


NOT_PINNED = {"pip", "setuptools", "wheel", "distribute", "counters-tasks"}
"""What ``pip freeze --exclude-editable`` leaves out (the package itself is installed editable)."""


def installed() -> dict[str, str]:
    return {
        canonical(d.metadata["Name"]): d.version
        for d in importlib.metadata.distributions()
        if canonical(d.metadata["Name"]) not in NOT_PINNED
    }


def pins(text: str) -> dict[str, str]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, line
            found[canonical(name)] = version
    return {name: version for name, version in found.items() if name not in NOT_PINNED}


@pytest.mark.processes
def test_make_constraints_pins_what_is_installed(tmp_path):
    """``make constraints CONSTRAINTS_OUT=...`` (for this test's own venv) writes the header of
    constraints/tested.txt and one pin for each installed distribution, and leaves
    constraints/tested.txt alone."""
    tested = (REPO / "constraints" / "tested.txt").read_text()
    out = tmp_path / "pins.txt"
    result = subprocess.run(
        ["make", "constraints", f"VENV={sys.prefix}", f"CONSTRAINTS_OUT={out}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    text = out.read_text()
    header = [line for line in tested.splitlines() if line.startswith("#")]
    assert header and text.splitlines()[: len(header)] == header
    assert pins(text) == installed()
    assert (REPO / "constraints" / "tested.txt").read_text() == tested


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def requirement_names(requirements: list[str]) -> list[str]:
    return [canonical(re.match(r"[\w.-]+", r)[0]) for r in requirements]


def test_development_tools_are_a_dependency_group_not_an_extra():
    project = pyproject()
    extras = project["project"]["optional-dependencies"]
    assert "test" not in extras and "dev" not in extras
    dev = requirement_names(project["dependency-groups"]["dev"])
    assert {"pytest", "ruff", "mypy"} <= set(dev)
    everything = dev + [name for group in extras.values() for name in requirement_names(group)]
    assert everything.count("uvicorn") == 1
    bootstrap = (REPO / "scripts" / "bootstrap.sh").read_text()
    assert f'-e ".[{",".join(sorted(extras))}]" --group dev' in bootstrap
    assert '--upgrade "pip>=25.1"' in bootstrap  # the first pip to read dependency groups


def test_the_tested_constraints_pin_every_tool_and_extra():
    project = pyproject()
    pinned = pins((REPO / "constraints" / "tested.txt").read_text())
    wanted = requirement_names(project["dependency-groups"]["dev"])
    wanted += [n for group in project["project"]["optional-dependencies"].values() for n in requirement_names(group)]
    wanted += requirement_names(project["project"]["dependencies"])
    assert {n for n in wanted if n not in NOT_PINNED} - set(pinned) == set()
