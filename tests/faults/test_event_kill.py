"""Issue 43's first "done when": a Flask app under gunicorn fires events three ways (the
middleware's helper, ``.delay()`` of ``counters_tasks.track_event``, its own ``VisitRecorder``)
while the worker applying them is SIGKILLed (its whole process group): every event's count and
unique visitors, and each property value's, are exact; nothing lost, nothing counted twice. The
visibility timeout is cut to 2 s so the broker hands the dead worker's unacknowledged messages to
the next worker in seconds (production: 240 s)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

from counters_tasks import events, throughput
from counters_tasks.core.days import local_day
from counters_tasks.local.redis_server import free_port
from counters_tasks.local.waiting import wait_until
from tests.support.event_model import EventModel, observed, total_events
from tests.support.faults import broker_idle
from tests.support.procs import Server, celery_env, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.long]

REQUESTS = 1000
"""Requests a route (three routes)."""

ROUTES = {"helper": "signup", "delay": "purchase", "recorder": "download"}
PLANS = ("free", "pro", "team")


def scenario(seed: int = 43) -> tuple[list[tuple[str, dict[str, str]]], EventModel]:
    """The requests (path, headers) and the events they must count: 120 visitors (an IP behind
    the proxy and a session cookie each), each request one event of its route's name."""
    rng = random.Random(seed)
    visitors = [(f"203.0.113.{n}" if n < 60 else f"198.51.100.{n}", f"{n:032x}") for n in range(1, 121)]
    requests, model = [], EventModel()
    for n in range(REQUESTS):
        for route, name in ROUTES.items():
            ip, session = rng.choice(visitors)
            plan = rng.choice(PLANS)
            headers = {"X-Forwarded-For": f"6.6.6.6, {ip}", "Cookie": f"ct_sid={session}"}
            requests.append((f"/{route}/{n}?plan={plan}", headers))
            model.add(name, ip, {"plan": plan})
    rng.shuffle(requests)
    return requests, model


def gunicorn(env: dict[str, str], tmp_path) -> Server:
    port = free_port()
    return Server(
        ["gunicorn", "--preload", "-w", "2", "-k", "gthread", "--threads", "4", "-b", f"127.0.0.1:{port}",
         "--graceful-timeout", "20", "tests.support.event_app:wsgi_app"],
        env,
        tmp_path / "gunicorn.log",
        port,
    )  # fmt: skip


def test_events_of_a_flask_app_survive_a_worker_sigkill_exactly(
    fault_env, counters_conn, broker_conn, tmp_path, capsys
):
    requests, model = scenario()
    day = local_day(time.time())
    env = celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env, COUNTERS_VISIBILITY_TIMEOUT="2")
    first = start_worker(env, tmp_path / "w1.log", name="w1", extra=("-O", "fair"))
    second = None
    server = gunicorn(env, tmp_path)
    answered = [0]
    failures: list[object] = []

    def send() -> None:
        def one(request):
            status = server.get(request[0], request[1], method="POST")[0]
            if status != 200:
                failures.append((request[0], status))
            answered[0] += 1

        with ThreadPoolExecutor(6) as pool:
            list(pool.map(one, requests))

    sender = threading.Thread(target=send)
    try:
        server.wait_for_workers(2)
        sender.start()
        wait_until(
            lambda: total_events(counters_conn, day) >= model.total() // 3,
            timeout=120,
            interval=0.02,
            what=f"a third of the events; worker log:\n{first.output()[-3000:]}",
        )
        first.kill()
        at_kill = total_events(counters_conn, day)
        in_flight = broker_conn.zcard("unacked_index")
        second = start_worker(env, tmp_path / "w2.log", name="w2", extra=("-O", "fair"))
        sender.join(180)
        assert not sender.is_alive() and failures == [] and answered[0] == len(requests)
        assert server.stop() == 0, server.log.read_text()[-3000:]  # SIGTERM: the recorders flush
        wait_until(
            lambda: total_events(counters_conn, day) >= model.total() and broker_idle(broker_conn),
            timeout=120,
            what=f"every event; {total_events(counters_conn, day)} of {model.total()}; log:\n{second.output()[-3000:]}",
        )
    finally:
        if sender.is_alive():
            sender.join(180)
        server.stop()
        first.kill()
        if second is not None:
            second.stop()
    assert observed(counters_conn, day) == model.expected()
    live = {name: sum(n for _start, n in events.event_counter(counters_conn, name, 86400)) for name in ROUTES.values()}
    assert live == Counter(name for name, _ip, _props in model.sent)  # the live counters too
    duplicates = throughput.totals(counters_conn).duplicates.get("event", 0)
    with capsys.disabled():
        print(
            f"\n[faults] events SIGKILL: {model.total()} events from gunicorn (helper, .delay(), VisitRecorder); "
            f"{at_kill} counted at the kill, {in_flight} messages unacknowledged then, all redelivered "
            f"({duplicates} events found applied already); "
            f"every event's and value's count and unique visitors exact: lost 0, doubled 0"
        )
