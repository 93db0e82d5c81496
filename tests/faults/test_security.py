"""Security: JSON only on a real worker, COUNTERS_SECRET required, TLS and ACL users for Redis,
and no user string ever in a key unescaped."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid

import pytest
import redis
from kombu import Connection, Exchange, Queue

from counters_tasks import counters, ranking, sitestats, tasks, uniques, visits
from counters_tasks.core.settings import reset_settings
from counters_tasks.errors import ConfigurationError, InvalidInput
from counters_tasks.local.redis_server import RedisServer, free_port, installed_server_binary, server_has_tls
from counters_tasks.local.waiting import wait_until
from counters_tasks.store import keys
from counters_tasks.store.client import get_redis
from tests.support.procs import celery_env, start_worker
from tests.support.servers import dump_all

pytestmark = [pytest.mark.processes, pytest.mark.server_build]


def publish_pickled_task(broker_url: str, task_name: str, args: tuple) -> str:
    """A well-formed Celery (protocol 2) task message, but pickle-serialized, sent with kombu."""
    task_id = str(uuid.uuid4())
    headers = {
        "lang": "py",
        "task": task_name,
        "id": task_id,
        "root_id": task_id,
        "parent_id": None,
        "group": None,
        "retries": 0,
        "eta": None,
        "expires": None,
        "timelimit": [None, None],
        "argsrepr": repr(args),
        "kwargsrepr": "{}",
        "origin": "test",
    }
    body = (args, {}, {"callbacks": None, "errbacks": None, "chain": None, "chord": None})
    with Connection(broker_url) as conn:
        exchange = Exchange("visits", "direct")
        conn.Producer().publish(
            body,
            exchange=exchange,
            routing_key="visits",
            declare=[Queue("visits", exchange, "visits")],
            serializer="pickle",
            headers=headers,
            delivery_mode=2,
        )
    return task_id


def test_real_worker_refuses_a_pickle_message(fault_env, counters_conn, broker_conn, publisher, tmp_path):
    """A pickled task message is never deserialized: the transport sets it aside (content that
    is not JSON) before Celery sees it, and the worker goes on."""
    ts = float(int(time.time()))
    worker = start_worker(celery_env(fault_env["COUNTERS_REDIS_URL"], **fault_env), tmp_path / "w.log")
    try:
        publish_pickled_task(fault_env["CELERY_BROKER_URL"], "counters_tasks.update_counter", ("pickled", 1, ts))
        wait_until(
            lambda: broker_conn.llen(keys.dead_letters()) == 1,
            timeout=60,
            what=f"the worker to set the pickle message aside; log:\n{worker.output()[-3000:]}",
        )
        tasks.update_counter.apply_async(("json", 1, ts), producer=publisher)  # the worker still works
        wait_until(lambda: counters.get_counter(counters_conn, "json", 1, now=ts), timeout=60, what="the JSON message")
        # the refused message is set aside, not requeued, and the JSON one acknowledged (acks_late:
        # just after it was counted, so wait for it rather than look once)
        wait_until(
            lambda: broker_conn.llen("visits") == 0 and broker_conn.zcard("unacked_index") == 0,
            timeout=30,
            what="the broker to hold no message (queued or unacknowledged)",
        )
    finally:
        worker.stop()
    record = json.loads(broker_conn.lindex(keys.dead_letters(), 0))
    assert (record["reason"], record["task"]) == ("not_json_content", "counters_tasks.update_counter")
    assert "set aside: not_json_content" in worker.output()
    assert counters.known_counters(counters_conn) == ["json"]
    assert broker_conn.llen("visits") == 0 and broker_conn.zcard("unacked_index") == 0


def test_sitestats_refuses_without_secret(raw_conn, eager_app, monkeypatch):
    monkeypatch.delenv("COUNTERS_SECRET")
    reset_settings()
    for write in (
        lambda: sitestats.record_visit(raw_conn, "10.0.0.1", "/"),
        lambda: visits.apply_visit(raw_conn, "10.0.0.1", "/", "6f1c2b1e98a44c51"),
        lambda: tasks.record_visit.apply(("10.0.0.1", "/")).get(),
    ):
        with pytest.raises(ConfigurationError, match="COUNTERS_SECRET"):
            write()
    assert dump_all(raw_conn) == {}


# --- keys: user strings are hashed into the tag and escaped after it ----------------------

NASTY = [
    "{x}",
    "}{",
    "a:b",
    "*",
    "? *",
    "tab\tname",
    "new\nline",
    "spaces  in name",
    "{{tag}}:x",
    "é{ü}*",
    "x" * 1024,
    "%7B",
    "ct:cnt:{0000000000000000}:1:x",
]
TAG = re.compile(
    rb"\{([0-9a-f]{16}|[rb]\d+|[cp]\d{1,3}|days)\}"
)  # keys.tag, a registry shard, keys.group_tag, the day registry


def write_everywhere(conn, text: str, ts: float) -> None:
    """Use ``text`` as every kind of user string, in every module (refusals are fine)."""
    attempts = [
        lambda: counters.update_counter(conn, text, 1, ts, message_id=text),
        lambda: ranking.Ranking(conn, text).incr(text, 1, ts, message_id=text),
        lambda: sitestats.record_visit(conn, "10.0.0.1", "/" + text, ts, message_id=text),
        lambda: visits.apply_visit(conn, "10.0.0.2", text, "6f1c2b1e98a44c51", ts, message_id=text[:200]),
        lambda: uniques.count_visit(conn, text, ts, message_id=text),
    ]
    for attempt in attempts:
        try:
            attempt()
        except InvalidInput:
            pass


def test_no_user_string_in_a_key_unescaped(raw_conn):
    ts = float(int(time.time()))
    for text in NASTY:
        write_everywhere(raw_conn, text, ts)
    assert counters.known_counters(raw_conn)  # something was written
    for key in raw_conn.scan_iter(count=1000):
        braces = key.count(b"{") + key.count(b"}")
        if braces:
            assert braces == 2 and TAG.search(key), key  # one tag, made from a hash of the user string
        assert not re.search(rb"[\s*?\[\]]", key), key
        assert len(key) < 4096, key[:100]


def test_refused_strings_write_nothing(raw_conn):
    ts = float(int(time.time()))
    for text in ["new\nline", "nul\x00", "del\x7f", "c1\x85", "x" * 1025, "x" * 10_240, "", "\ud800"]:
        write_everywhere(raw_conn, text, ts)
        assert dump_all(raw_conn) == {}, repr(text[:20])


def test_long_path_is_cut_to_512_bytes(raw_conn):
    ts = float(int(time.time()))
    path = "/" + "é" * 600  # 1201 bytes
    sitestats.record_visit(raw_conn, "10.0.0.1", path, ts)
    cut = path.encode()[:512].decode("utf-8", "ignore")
    assert sitestats.site_visit_info(raw_conn, None, path).pv == 1
    assert sitestats.site_visit_info(raw_conn, None, cut).pv == 1
    assert max(len(k) for k in raw_conn.scan_iter()) < 2000


# --- TLS and ACL --------------------------------------------------------------------------


def make_certificates(folder) -> dict[str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the openssl CLI."""
    run = lambda *args: subprocess.run(["openssl", *args], cwd=folder, check=True, capture_output=True)  # noqa: E731
    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=counters-test-ca",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return {name: str(folder / f"{name}.pem") for name in ("ca", "server")} | {"key": str(folder / "server.key")}


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    binary = installed_server_binary()
    if binary is None or not server_has_tls(binary):
        pytest.skip("needs a redis-server built with TLS (Debian's); the embedded Valkey server has no TLS")
    folder = tmp_path_factory.mktemp("tls")
    certs = make_certificates(folder)
    tls_port = free_port()
    server = RedisServer(
        folder / "data",
        binary=binary,
        extra_args=[
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            certs["server"],
            "--tls-key-file",
            certs["key"],
            "--tls-ca-cert-file",
            certs["ca"],
            "--tls-auth-clients",
            "no",
        ],
    )
    server.start()
    yield f"rediss://127.0.0.1:{tls_port}", certs["ca"]
    server.stop()


def test_counters_over_tls(tls_server, monkeypatch):
    base, ca = tls_server
    monkeypatch.delenv("COUNTERS_REDIS_CLUSTER", raising=False)
    monkeypatch.setenv("COUNTERS_REDIS_URL", f"{base}/0?ssl_ca_certs={ca}")
    reset_settings()
    conn = get_redis()
    assert conn.connection_pool.connection_class.__name__ == "SSLConnection"
    conn.flushdb()
    counters.update_counter(conn, "over-tls", 3, 1000.0, message_id="m1")
    counters.update_counter(conn, "over-tls", 3, 1000.0, message_id="m1")
    assert counters.get_counter(conn, "over-tls", 1, now=1000.0) == [(1000, 3)]
    monkeypatch.setenv("COUNTERS_REDIS_URL", f"{base}/0")  # the certificate is verified: no CA, no connection
    reset_settings()
    with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        get_redis().ping()


def test_worker_over_tls_broker_and_counters(tls_server, tmp_path, monkeypatch):
    base, ca = tls_server
    env = {
        "COUNTERS_REDIS_URL": f"{base}/0?ssl_ca_certs={ca}",
        "CELERY_BROKER_URL": f"{base}/1?ssl_ca_certs={ca}",
        "COUNTERS_REDIS_CLUSTER": "",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    reset_settings()
    from counters_tasks.app import app

    conn = get_redis()
    conn.flushdb()
    worker = start_worker(celery_env(env["COUNTERS_REDIS_URL"], **env), tmp_path / "w.log")
    try:
        with app.connection_for_write(env["CELERY_BROKER_URL"]) as broker:
            assert broker.transport.client.ssl["ssl_ca_certs"] == ca
            tasks.update_counter.apply_async(("tls-worker", 2, 1000.0), producer=app.amqp.Producer(broker))
        wait_until(
            lambda: counters.get_counter(conn, "tls-worker", 1, now=1000.0) == [(1000, 2)],
            timeout=60,
            what=f"the worker over TLS; log:\n{worker.output()[-3000:]}",
        )
    finally:
        worker.stop()


def test_acl_user_in_the_url(tmp_path, monkeypatch):
    monkeypatch.delenv("COUNTERS_REDIS_CLUSTER", raising=False)
    server = RedisServer(tmp_path / "acl").start()
    try:
        admin = redis.Redis(port=server.port)
        admin.acl_setuser("counters", enabled=True, passwords=["+s3cret-pass"], keys=["ct:*"], commands=["+@all"])
        admin.acl_setuser("default", enabled=False)
        monkeypatch.setenv("COUNTERS_REDIS_URL", f"redis://counters:s3cret-pass@127.0.0.1:{server.port}/0")
        reset_settings()
        counters.update_counter(get_redis(), "acl", 4, 1000.0)
        assert counters.get_counter(get_redis(), "acl", 1, now=1000.0) == [(1000, 4)]
        monkeypatch.setenv("COUNTERS_REDIS_URL", f"redis://counters:wrong@127.0.0.1:{server.port}/0")
        reset_settings()
        with pytest.raises(redis.AuthenticationError, match="invalid username-password pair"):
            counters.update_counter(get_redis(), "acl", 4, 1000.0)
    finally:
        reset_settings()
        server.stop()
