"""Test setup: a real redis-server on a private port and data dir, started once per session.

Set COUNTERS_TEST_REDIS_URL to run the suite against an existing server (or, with
COUNTERS_REDIS_CLUSTER=1, a cluster) instead; it is flushed between tests.

Markers (pyproject.toml; what each selects and which make target runs it: docs/development.md):
``processes`` for tests that start processes (worker, beat, servers of their own, a browser,
``make``): ``pytest -m "not processes"`` is the fast inner loop, and a test without the marker
that starts one fails; ``cluster`` for the tests ``make test-cluster`` runs again on a Redis Cluster;
``timing`` (and ``budget``) for the tests that measure time, which run alone when the suite runs in
parallel (``make test``: pytest-xdist, ``tests/support/timing.py``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from counters_tasks import uniques
from counters_tasks.core.settings import reset_settings
from counters_tasks.local.redis_server import RedisServer
from counters_tasks.local.waiting import wait_until
from tests.support import timing
from tests.support.isolation import forget_app_configuration, renew_the_shared_recorder
from tests.support.server_cpu import CallBudget
from tests.support.servers import TEST_SECRET, TEST_TAG_KEY, flush, is_cluster_run, make_client

_POPEN_INIT = subprocess.Popen.__init__
_running: dict[str, Any] = {"item": None, "shared_server": False}


def _guarded_popen_init(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
    """A test that starts a process (in its body or in any fixture it uses) must be marked
    ``processes``, so that ``-m "not processes"`` really is the fast loop."""
    item = _running["item"]
    if item is not None and not _running["shared_server"] and item.get_closest_marker("processes") is None:
        raise AssertionError(f"{item.nodeid} starts a process: mark it @pytest.mark.processes")
    _POPEN_INIT(self, *args, **kwargs)


def pytest_configure(config: pytest.Config) -> None:
    subprocess.Popen.__init__ = _guarded_popen_init  # type: ignore[method-assign]
    # never a local stack's state: `make run` in this checkout leaves ./.counters-tasks/env, which
    # the CLI and the settings read when COUNTERS_REDIS_URL is unset (tests that unset it, and
    # every process they start, would then reach that stack's Redis); tests that want a home set one
    os.environ["COUNTERS_HOME"] = tempfile.mkdtemp(prefix="counters-tests-home-")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timing.timed_tests_first(config, items)  # under xdist only (tests/support/timing.py)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under pytest-xdist, a test that measures time (marker timing or budget) runs alone:
    ``tests/support/timing.py``."""
    with timing.turn(item, nextitem):
        _running["item"] = item
        yield
        _running["item"] = None


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The session's Redis (the one process every test may share)."""
    external = os.environ.get("COUNTERS_TEST_REDIS_URL")
    if external:
        yield external
        return
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    _running["shared_server"] = True
    try:
        server.start()
    finally:
        _running["shared_server"] = False
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def counters_env(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test sees settings for the test server, read afresh."""
    monkeypatch.setenv("COUNTERS_REDIS_URL", redis_url)
    monkeypatch.setenv("COUNTERS_SECRET", TEST_SECRET)
    # the hash-tag key pinned, so that flushing the test Redis between tests (which drops the
    # generated one) never leaves two processes with different keys; tests/store/test_keys.py
    # covers the generated key
    monkeypatch.setenv("COUNTERS_TAG_KEY", TEST_TAG_KEY)
    for name in ("COUNTERS_KEY_PREFIX", "COUNTERS_TIMEZONE", "COUNTERS_UV_MODE", "COUNTERS_SITES"):
        monkeypatch.delenv(name, raising=False)
    reset_settings()
    yield
    monkeypatch.undo()  # this test's environment gone first: the settings read next are the session's
    reset_settings()


@pytest.fixture(autouse=True)
def isolated_app_and_recorder(counters_env) -> Iterator[None]:
    """Every test starts with the package's Celery app unconfigured, so that its first use reads
    the settings of that test (a broker a test pointed the settings at never sticks in the app for
    the tests after it, and the RabbitMQ tests, which set their broker before using the app, get
    theirs), and with a new, open shared ``VisitRecorder``; after the test, the recorder it used is
    closed (what it held sent to that test's broker, 2 s at most) and the app forgotten again
    (``tests/support/isolation.py``)."""
    forget_app_configuration()
    yield
    renew_the_shared_recorder()
    forget_app_configuration()


@pytest.fixture(autouse=True)
def _fresh_expected_figures():
    """No test sees another's remembered expected-uniques figures (a per-process cache)."""
    uniques.forget_expected()
    yield
    uniques.forget_expected()


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def conn(request: pytest.FixtureRequest, redis_url: str):
    """A flushed client, once not decoding responses and once decoding them."""
    client = make_client(redis_url, decode=request.param)
    flush(client)
    yield client
    client.close()


@pytest.fixture
def raw_conn(redis_url: str):
    """A flushed client that does not decode responses."""
    client = make_client(redis_url)
    flush(client)
    yield client
    client.close()


@pytest.fixture
def call_budget(raw_conn, monkeypatch: pytest.MonkeyPatch) -> Iterator[CallBudget]:
    """The package's Redis calls over the 5 ms budget (``tests/support/server_cpu.py``: the
    server's CPU time for each call, SLOWLOG where that cannot be read). One server: a cluster
    run skips. It starts once the server has freed what the tests before left (``raw_conn``'s
    FLUSHDB is lazy on Valkey 8+ and where ``lazyfree-lazy-user-flush`` is on: a background
    thread frees a big board or 100,000 keys while the budget test's first calls run)."""
    if is_cluster_run():
        pytest.skip("one server's calls")
    wait_until(lambda: raw_conn.info("memory")["lazyfree_pending_objects"] == 0, timeout=30, what="lazy free")
    yield CallBudget(raw_conn, monkeypatch)
    raw_conn.config_set("slowlog-log-slower-than", 10000)


@pytest.fixture
def eager_app():
    """The Celery app running tasks in-process (eager), with exceptions propagated."""
    import counters_tasks.tasks  # noqa: F401  (registers the tasks)
    from counters_tasks.app import app

    app.conf.update(task_always_eager=True, task_eager_propagates=True)
    yield app
    app.conf.update(task_always_eager=False, task_eager_propagates=False)


@pytest.fixture(scope="module")
def module_worker(redis_url, tmp_path_factory):
    """One Celery worker for a module's web server tests (each test flushes the data it reads)."""
    from tests.support.procs import celery_env, purge_broker, start_worker

    purge_broker(redis_url)
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    process = start_worker(celery_env(redis_url), log).wait_ready()
    yield process
    process.stop()
