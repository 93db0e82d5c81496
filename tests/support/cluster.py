"""A private Redis Cluster on loopback ports: for ``make test-cluster`` and the cluster benchmark.

Redis servers (``redis_server.server_binary``: Debian's or the embedded Valkey) with
``cluster-enabled yes``, joined the way ``redis-cli --cluster create`` does it, by plain
commands (so no ``redis-cli`` is needed): each master takes an even share of the 16384 slots
(CLUSTER ADDSLOTSRANGE) and a config epoch of its own, the nodes MEET, and each replica
REPLICATEs its master. Every node keeps its files in its own folder.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

import redis

from counters_tasks.local.redis_server import RedisServer, port_is_free
from counters_tasks.local.waiting import wait_until


def free_cluster_port() -> int:
    """A port whose cluster bus port (+10000) is free too."""
    rng = random.Random()
    for _ in range(1000):
        port = rng.randint(20000, 45000)
        if port_is_free(port) and port_is_free(port + 10000):
            return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterProcesses:
    """``masters`` masters with ``replicas`` replicas each; ``url`` is one startup node."""

    def __init__(self, base_dir: str | Path, masters: int = 3, replicas: int = 0, appendonly: bool = False) -> None:
        self.base_dir = Path(base_dir)
        self.masters = masters
        self.replicas = replicas
        self.appendonly = appendonly
        self.nodes: list[RedisServer] = []

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, timeout: float = 60.0) -> RedisClusterProcesses:
        for _ in range(self.masters * (1 + self.replicas)):
            port = free_cluster_port()
            node = RedisServer(
                self.base_dir / f"node-{port}",
                port=port,
                appendonly=self.appendonly,
                extra_args=[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--repl-diskless-sync-delay",
                    "0",
                ],
            )
            self.nodes.append(node.start())
        self.join(timeout)
        self.wait_ok(timeout)
        self.wait_replicas(timeout)
        return self

    def join(self, timeout: float = 60.0) -> None:
        """Assign the slots, introduce the nodes to each other and attach the replicas."""
        clients = [redis.Redis(port=n.port, decode_responses=True, socket_timeout=5) for n in self.nodes]
        masters, replicas = clients[: self.masters], clients[self.masters :]
        for n, client in enumerate(masters):
            first, last = 16384 * n // self.masters, 16384 * (n + 1) // self.masters - 1
            client.execute_command("CLUSTER", "ADDSLOTSRANGE", first, last)
            client.execute_command("CLUSTER", "SET-CONFIG-EPOCH", n + 1)
        for node in self.nodes[1:]:
            clients[0].execute_command("CLUSTER", "MEET", "127.0.0.1", node.port)

        def all_known() -> bool:
            try:
                return all(len(c.execute_command("CLUSTER", "NODES").splitlines()) == len(clients) for c in clients)
            except redis.RedisError:
                return False

        wait_until(all_known, timeout, interval=0.05, what="the cluster nodes to know each other")
        master_ids = [c.execute_command("CLUSTER", "MYID") for c in masters]
        for n, replica in enumerate(replicas):
            master_id = master_ids[n % self.masters]
            wait_until(
                functools.partial(_replicate, replica, master_id),
                timeout,
                interval=0.05,
                what="a replica to attach to its master",
            )
        for client in clients:
            client.close()

    def wait_ok(self, timeout: float = 60.0) -> None:
        """Until every live node says the cluster is ok and all slots are served."""

        def all_ok() -> bool:
            try:
                infos = [
                    redis.Redis(port=n.port, decode_responses=True).cluster("info")
                    for n in self.nodes
                    if n.process and n.process.poll() is None
                ]
            except redis.RedisError:
                return False
            return all(i["cluster_state"] == "ok" and int(i["cluster_slots_assigned"]) == 16384 for i in infos)

        wait_until(all_ok, timeout, interval=0.1, what="the Redis Cluster to be ok")

    def wait_failed_over(self, dead_port: int, timeout: float = 60.0) -> None:
        """Until every live node serves every slot from nodes other than the one on ``dead_port``
        (its replica promoted). ``wait_ok`` alone can pass at once after a kill: the nodes notice
        the failure only after the node timeout."""

        def promoted() -> bool:
            try:
                maps = [
                    redis.Redis(port=n.port).execute_command("CLUSTER", "SLOTS")
                    for n in self.nodes
                    if n.process and n.process.poll() is None
                ]
            except redis.RedisError:
                return False
            return all(
                sum(end - start + 1 for start, end, master, *_ in slots) == 16384
                and all(master[1] != dead_port for _start, _end, master, *_ in slots)
                for slots in maps
            )

        wait_until(promoted, timeout, interval=0.1, what=f"the replica of the node on port {dead_port} to take over")
        self.wait_ok(timeout)

    def wait_replicas(self, timeout: float = 60.0) -> None:
        """Until every master streams writes to its replicas (called by ``start``: it runs FLUSHALL).

        After a diskless first sync a master holds the stream back until the replica's first
        ACK, up to a second later; a master killed before that loses all it held. So each master
        replicates a (no-op) FLUSHALL and WAITs for its replicas to acknowledge it.
        """
        pending = list(self.nodes)

        def replicated() -> bool:
            while pending:
                try:
                    client = redis.Redis(port=pending[0].port, decode_responses=True)
                    if client.info("replication")["role"] == "master":
                        client.flushall()
                        if client.execute_command("WAIT", self.replicas, 200) < self.replicas:
                            return False
                except redis.RedisError:
                    return False
                pending.pop(0)
            return True

        wait_until(replicated, timeout, what="the replicas to acknowledge their masters' writes")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _replicate(replica: redis.Redis, master_id: str) -> bool:
    """CLUSTER REPLICATE, once the replica has heard of its master (False: not yet)."""
    try:
        replica.execute_command("CLUSTER", "REPLICATE", master_id)
    except redis.ResponseError as exc:
        if "Unknown node" in str(exc):
            return False
        raise
    return True
