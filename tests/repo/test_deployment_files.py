"""docker-compose.yml and celeryconfig.py: the deployment promises, checked by parsing them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_services():
    services = compose()["services"]
    assert {"redis", "worker", "beat", "flower", "dashboard"} <= set(services)
    beats = [name for name, svc in services.items() if "beat" in " ".join(map(str, svc.get("command", [])))]
    assert beats == ["beat"], "exactly one beat"
    assert services["beat"].get("deploy", {}).get("replicas", 1) == 1


def test_compose_redis_version_aof_and_noeviction():
    redis = compose()["services"]["redis"]
    match = re.match(r"redis:(\d+)\.(\d+)", redis["image"])
    assert match and (int(match[1]), int(match[2])) >= (7, 4)
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_compose_flower_auth_from_env_and_bound_to_loopback():
    flower = compose()["services"]["flower"]
    assert "FLOWER_BASIC_AUTH" in flower["environment"]
    assert flower["environment"]["FLOWER_BASIC_AUTH"].startswith("${FLOWER_BASIC_AUTH")
    assert not any("basic-auth" in part or "basic_auth" in part for part in flower["command"])  # not on ps
    assert all(str(port).startswith("127.0.0.1:") for port in flower["ports"])


def test_compose_dashboard_needs_auth_and_is_bound_to_loopback():
    dashboard = compose()["services"]["dashboard"]
    assert dashboard["command"][:2] == ["counters-tasks", "serve"]
    assert dashboard["environment"]["COUNTERS_DASHBOARD_AUTH"].startswith("${COUNTERS_DASHBOARD_AUTH:?")
    assert all(str(port).startswith("127.0.0.1:") for port in dashboard["ports"])


def test_compose_redis_is_published_on_loopback_for_apps_on_the_host():
    assert compose()["services"]["redis"]["ports"] == ["127.0.0.1:6379:6379"]


def test_the_image_has_what_the_services_run():
    """The worker and beat need the core; Flower and the dashboard need their extras."""
    dockerfile = (REPO / "Dockerfile").read_text()
    extras = set(re.search(r'pip install [^\n]*"\.\[([\w,]+)\]"', dockerfile)[1].split(","))
    assert {"cli", "flower"} <= extras
    assert "constraints/tested.txt" in dockerfile and (REPO / "constraints" / "tested.txt").exists()


def test_what_the_compose_file_and_its_guide_name_exists():
    """Every docs/ page (and section) the compose file's comments name, and every service the
    guide's commands name, is real."""
    text = (REPO / "docker-compose.yml").read_text()
    for page, section in re.findall(r'(docs/[\w/.-]+\.md)(?:, "([^"]+)")?', text):
        content = (REPO / page).read_text()
        assert not section or f"## {section}" in content, (page, section)
    guide = (REPO / "docs" / "compose.md").read_text()
    services = set(compose()["services"])
    named = set(re.findall(r"docker compose (?:exec|logs|restart) (\w+)", guide))
    named |= set(re.findall(r"--scale (\w+)=", guide))
    assert named and named <= services
    for name in services:
        assert f"`{name}`" in guide, name  # each service is in the guide's table


@pytest.mark.processes
def test_docker_compose_config_accepts_the_file(tmp_path):
    """``docker compose config`` where the compose plugin is installed (it needs no engine)."""
    import shutil
    import subprocess

    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker compose plugin here; the file is checked by parsing above")
    env = {
        "PATH": "/usr/bin:/bin",
        "COUNTERS_SECRET": "x" * 64,
        "COUNTERS_TAG_KEY": "ab" * 16,
        "FLOWER_BASIC_AUTH": "a:b",
        "COUNTERS_DASHBOARD_AUTH": "a:b",
    }
    result = subprocess.run(
        [docker, "compose", "-f", str(REPO / "docker-compose.yml"), "config", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_celeryconfig_json_only_routes_and_beat(eager_app):
    conf = eager_app.conf
    assert conf.task_serializer == "json" and list(conf.accept_content) == ["json"]
    assert list(conf.result_accept_content) == ["json"]
    assert conf.task_ignore_result is True
    assert not conf.worker_send_task_events and not conf.task_send_sent_event  # on when Flower watches
    assert {q.name for q in conf.task_queues} == {"visits", "maintenance"}
    for entry in conf.beat_schedule.values():
        assert conf.task_routes[entry["task"]]["queue"] == "maintenance"
        assert entry["options"]["expires"] > 0


def test_pickle_message_is_refused(eager_app):
    import pytest
    from kombu.exceptions import ContentDisallowed
    from kombu.serialization import dumps, loads

    content_type, encoding, body = dumps({"x": 1}, serializer="pickle")
    with pytest.raises(ContentDisallowed):
        loads(body, content_type, encoding, accept=eager_app.conf.accept_content)
