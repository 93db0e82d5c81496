"""TLS with the default broker: ``COUNTERS_REDIS_URL=rediss://...?ssl_ca_certs=...`` and no
``CELERY_BROKER_URL`` (the broker is database 1 of the same server, over TLS with the same CA):
a real worker counts what ``.delay()`` sends from an app process, and ``counters-tasks health``
is ok, the broker's certificate verified. Needs a redis-server built with TLS (Debian's):
``make test-redis-server`` runs it; elsewhere it skips, as the TLS tests of test_security do."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
import redis

from counters_tasks import counters
from counters_tasks.core.settings import load_settings
from counters_tasks.local.waiting import wait_until
from tests.faults.test_security import tls_server  # noqa: F401  (the fixture)
from tests.support.procs import REPO, celery_env, start_beat, start_worker

pytestmark = [pytest.mark.processes, pytest.mark.server_build]

SENDER = textwrap.dedent("""
    import sys
    from counters_tasks import tasks
    for n in range(25):
        tasks.update_counter.delay("tls-default-broker", 1, float(sys.argv[1]))
""")


def test_a_tls_redis_alone_is_also_the_broker(tls_server, tmp_path):  # noqa: F811
    base, ca = tls_server
    env = celery_env(f"{base}/0?ssl_ca_certs={ca}", COUNTERS_REDIS_CLUSTER="", COUNTERS_CLEAN_EVERY="0.5")
    env.pop("CELERY_BROKER_URL", None)
    assert load_settings(env).broker_url == f"{base}/1?ssl_ca_certs={ca}"
    conn = redis.Redis.from_url(f"{base}/0?ssl_ca_certs={ca}")
    redis.Redis.from_url(f"{base}/1?ssl_ca_certs={ca}").flushdb()
    conn.flushdb()
    worker = start_worker(env, tmp_path / "w.log")
    beat = start_beat(env, tmp_path, tmp_path / "beat.log")
    try:
        worker.wait_ready()
        now = float(int(time.time()))
        sent = subprocess.run(
            [sys.executable, "-c", SENDER, str(now)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
        )
        assert sent.returncode == 0, sent.stderr[-3000:]
        wait_until(
            lambda: counters.get_counter(conn, "tls-default-broker", 1, now=now) == [(now, 25)],
            timeout=60,
            what=f"the worker over TLS; log:\n{worker.output()[-3000:]}",
        )

        def healthy() -> bool:
            return (
                subprocess.run(
                    [sys.executable, "-m", "counters_tasks.ops.cli", "health", "--json"],
                    cwd=REPO,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=60,
                ).returncode
                == 0
            )

        wait_until(healthy, timeout=60, interval=1, what="counters-tasks health to be ok over TLS")
        without_ca = subprocess.run(
            [sys.executable, "-m", "counters_tasks.ops.cli", "health", "--json"],
            cwd=REPO,
            env=dict(env, COUNTERS_REDIS_URL=f"{base}/0"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        report = json.loads(without_ca.stdout)  # no CA: neither server's certificate can be verified
        assert without_ca.returncode == 1 and "certificate verify failed" in report["redis"]["error"]
        assert "certificate verify failed" in report["queues"]["error"]
    finally:
        beat.stop()
        worker.stop()
        conn.close()
