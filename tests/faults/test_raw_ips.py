"""Where raw visitor IPs live with a Redis broker (docs/reliability.md, "Where raw IPs live"):
visits through every path a message can take (applied, refused as bad input or malformed, set
aside after failing, undecodable or malformed messages), sent by an app's ``.delay()`` and
``VisitRecorder``, leave no raw IP in the counters' Redis, and on the broker's Redis none but in
the dead letters once every message is acknowledged. RabbitMQ as the broker:
tests/system/test_rabbitmq.py."""

from __future__ import annotations

import base64
import json
import time

import pytest

from counters_tasks import refusals, sitestats
from counters_tasks.core.days import local_day
from counters_tasks.store import keys
from tests.support import raw_ips
from tests.support.faults import wait_idle
from tests.support.procs import celery_env, start_worker

pytestmark = pytest.mark.processes


def poison_messages(ips: tuple[str, str]) -> list[str]:
    """Messages a broken producer could send: not JSON (holding the IPv4 address of ``ips``), and
    a kombu message whose body is not Celery's ``[args, kwargs, embed]`` (holding the IPv6 one,
    in its base64 body only)."""
    v4, v6 = ips
    body = base64.b64encode(json.dumps({"ip": v6, "path": "/p"}).encode()).decode()
    message = {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"task": "counters_tasks.record_visit", "id": "poison-bad-body"},
        "properties": {
            "body_encoding": "base64",
            "delivery_tag": "poison-tag",
            "priority": 0,
            "delivery_info": {"exchange": "", "routing_key": "visits"},
        },
    }
    return [f"not json: {v4}", json.dumps(message)]


def test_no_raw_ip_in_the_counters_redis_nor_on_the_broker_but_its_dead_letters(
    fault_env, counters_conn, broker_conn, tmp_path
):
    now = time.time() - 30
    day = local_day(now)
    with keys.bound(counters_conn, write=True):
        counters_conn.rpush(keys.counter_hash(f"hits:{raw_ips.FAILING_PATH}"), "written by hand")
    env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env, COUNTERS_MAX_ATTEMPTS="2")
    worker = start_worker(env, tmp_path / "worker.log").wait_ready()
    poison = poison_messages(raw_ips.PATHS["poison"])
    try:
        raw_ips.send(env, raw_ips.counted_actions(now))
        for raw in poison:
            broker_conn.lpush("visits", raw)
        raw_ips.wait_for(
            lambda: (
                sitestats.site_visit_info(counters_conn, day, raw_ips.APPLIED_PATH).pv,
                {r: n for r, n in refusals.counts(counters_conn).items() if n},
            ),
            (raw_ips.APPLIED, raw_ips.REFUSED),
            worker,
            "the visits applied and refused",
        )
        raw_ips.send(env, raw_ips.failing_actions(now))
        raw_ips.wait_for(
            lambda: broker_conn.llen(keys.dead_letters()),
            raw_ips.SET_ASIDE + len(poison),
            worker,
            "the calls and messages set aside",
        )
        wait_idle(broker_conn)
    finally:
        worker.stop()
    assert raw_ips.raw_ips_in(counters_conn, raw_ips.all_ips()) == {}
    assert counters_conn.llen(keys.dead_letters()) == 0  # kept on the broker's Redis
    dead = keys.dead_letters().encode()
    assert raw_ips.raw_ips_in(broker_conn, raw_ips.all_ips(), skip=[dead]) == {}
    # the dead letters keep them as sent (a call's arguments, a message's raw payload: the IPv6
    # address of the poison is in a base64 body), so that requeue can apply them:
    # docs/reliability.md says so, and for how long
    kept = set(raw_ips.PATHS["delay_failed"] + raw_ips.PATHS["recorder_failed"] + raw_ips.PATHS["poison"])
    assert raw_ips.raw_ips_in(broker_conn, raw_ips.all_ips()) == {dead: kept}
    assert not any(json.loads(r).get("masked") for r in broker_conn.lrange(dead, 0, -1))
