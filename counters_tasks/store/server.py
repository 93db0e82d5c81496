"""What a Redis server must be for the counters to be right: new enough, and never evicting.

- **Version**: ``MIN_VERSION`` (6.2.0). The scripts use ``ZADD ... LT`` (``counter_update``) and
  ``SET ... EXAT`` (``unique_visit``, ``unique_expected``), and the worker's broker transport waits
  with ``BLMOVE`` (``worker/broker.py``): all from Redis 6.2. On 6.0 a counter update wrote some
  buckets and then failed inside its script, and the worker died on ``BLMOVE`` naming no version.
  Valkey (any release) reports a compatible ``redis_version`` and passes.
- **Memory policy**: anything but ``maxmemory-policy noeviction`` lets Redis drop the counters'
  keys when memory runs short (``volatile-*`` the keys with a TTL: a day's visitor sets, dedupe
  markers; ``allkeys-*`` any key, the tag key too), and the figures go wrong without a word.
  ``noeviction`` refuses writes instead (OOM), which the tasks retry: nothing is lost.
  ``COUNTERS_ALLOW_EVICTION=1`` turns that error into a warning for those who accept it.

Read from ``INFO server`` and ``INFO memory`` (``CONFIG GET`` is disabled on several managed
services); on a cluster, every primary. The worker and beat check at start (``app``), ``health``
and ``/metrics`` at every report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.settings import get_settings
from ..errors import CountersError
from .client import RedisClient, as_str, is_cluster

MIN_VERSION = (6, 2, 0)
NEEDED_FOR = "ZADD LT and SET EXAT in the Lua scripts, BLMOVE in the worker's broker transport"
SAFE_POLICY = "noeviction"


class ServerTooOld(CountersError):
    """A Redis server older than MIN_VERSION: the package refuses to write to it."""


@dataclass(frozen=True)
class ServerFacts:
    """One server: where, what it is, and its memory settings."""

    where: str
    software: str  # "redis" or "valkey"
    version: str  # the software's own version (valkey_version on Valkey)
    redis_version: tuple[int, ...]  # the Redis version it is compatible with
    maxmemory: int
    policy: str

    @property
    def too_old(self) -> bool:
        return self.redis_version < MIN_VERSION

    @property
    def evicting(self) -> bool:
        return self.policy != SAFE_POLICY

    def describe(self) -> str:
        return f"{self.software} {self.version} at {self.where}"


def parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:3] if part.isdigit())


def _facts(where: str, server: dict, memory: dict) -> ServerFacts:
    redis_version = as_str(server.get("redis_version", "0"))
    software = "valkey" if "valkey_version" in server else as_str(server.get("server_name", "redis"))
    return ServerFacts(
        where=where,
        software=software,
        version=as_str(server.get("valkey_version", redis_version)),
        redis_version=parse_version(redis_version),
        maxmemory=int(memory.get("maxmemory", 0)),
        policy=as_str(memory.get("maxmemory_policy", "unknown")),
    )


def facts(conn: RedisClient) -> list[ServerFacts]:
    """The facts of the server behind ``conn``, or of every primary of a cluster."""
    if is_cluster(conn):
        servers = conn.info("server", target_nodes=conn.PRIMARIES)
        memories = conn.info("memory", target_nodes=conn.PRIMARIES)
        return [_facts(node, servers[node], memories[node]) for node in sorted(servers)]
    kwargs = conn.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"
    return [_facts(where, conn.info("server"), conn.info("memory"))]


def problems(found: list[ServerFacts], role: str = "Redis") -> tuple[list[str], list[str]]:
    """(errors, warnings) about these servers, each one line that says what to do. ``role``
    names them ("the counters' Redis", "the broker")."""
    errors, warnings = [], []
    for server in found:
        if server.too_old:
            errors.append(too_old_message(server, role))
        if server.evicting:
            message = (
                f"{role} ({server.describe()}) has maxmemory-policy {server.policy}: under memory pressure it "
                f"evicts the counters' keys and the figures go wrong without a word; set maxmemory-policy "
                f"noeviction (docs/production.md)"
            )
            if get_settings().allow_eviction:
                warnings.append(message + " (accepted: COUNTERS_ALLOW_EVICTION is set)")
            else:
                errors.append(message + ", or set COUNTERS_ALLOW_EVICTION=1 to accept it")
    return errors, warnings


def too_old_message(server: ServerFacts, role: str = "Redis") -> str:
    minimum = ".".join(map(str, MIN_VERSION))
    return (
        f"{role} is {server.describe()} (Redis {'.'.join(map(str, server.redis_version))}); counters-tasks "
        f"needs Redis {minimum} or newer ({NEEDED_FOR}): upgrade the server"
    )


def report(conn: RedisClient, role: str = "Redis") -> dict[str, Any]:
    """The check as health shows it: ``ok`` (no error), the servers, the errors and warnings."""
    found = facts(conn)
    errors, warnings = problems(found, role)
    return {
        "ok": not errors,
        "errors": errors,
        "warnings": warnings,
        "servers": [
            {
                "where": s.where,
                "software": s.software,
                "version": s.version,
                "maxmemory": s.maxmemory,
                "maxmemory_policy": s.policy,
            }
            for s in found
        ],
    }


def start_check(conn: RedisClient, role: str = "Redis") -> tuple[list[str], list[str]]:
    """What a worker and beat do at start: raise ``ServerTooOld`` when a server of ``conn`` is
    older than MIN_VERSION; else (errors to log at ERROR, warnings) as ``problems``."""
    found = facts(conn)
    _refuse(found, role)
    return problems(found, role)


def refuse_too_old(conn: RedisClient, role: str = "Redis") -> None:
    """Raise ``ServerTooOld`` when a server of ``conn`` is older than MIN_VERSION: what a
    process does before its first write through a client (``deployment``)."""
    _refuse(facts(conn), role)


def _refuse(found: list[ServerFacts], role: str) -> None:
    old = [s for s in found if s.too_old]
    if old:
        raise ServerTooOld(too_old_message(old[0], role))
