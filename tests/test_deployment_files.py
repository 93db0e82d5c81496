"""docker-compose.yml and celeryconfig.py: the deployment promises, checked by parsing them."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_services():
    services = compose()["services"]
    assert {"redis", "worker", "beat", "flower"} <= set(services)
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
    assert all(str(port).startswith("127.0.0.1:") for port in flower["ports"])


def test_celeryconfig_json_only_routes_and_beat(eager_app):
    conf = eager_app.conf
    assert conf.task_serializer == "json" and list(conf.accept_content) == ["json"]
    assert list(conf.result_accept_content) == ["json"]
    assert conf.task_ignore_result is True
    assert conf.worker_send_task_events and not conf.task_send_sent_event
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
