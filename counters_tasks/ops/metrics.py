"""Prometheus metrics (``/metrics`` of ``counters-tasks serve``), all named ``counters_...``.

Workers are prefork and many, so no worker process can export a deployment's totals; they keep
them in Redis instead (``counters_tasks.throughput``, ``refusals``, the dead letters) and this
module's collector reads them, with the broker's queues, at each scrape: what every worker did,
whichever process did it, with no per-worker port to scrape and nothing lost when a worker
restarts. docs/metrics.md lists every metric with a PromQL example.

A scrape is bounded: one round trip to the counters Redis (two HGETALLs of small hashes) and one
to the broker (LLEN, LINDEX, HLEN, ZRANGE 0 0, HGETALL of the dead-letter reasons), each client
with a socket timeout; never KEYS or SCAN. A source that does not answer makes
``counters_source_up{source=...}`` 0 and its metrics absent, never a failed or hanging scrape.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from starlette.requests import Request
from starlette.responses import Response

from .. import kinds, live, refusals, skips, throughput
from ..app import SENT_AT_HEADER
from ..app import app as default_app
from ..core.kind import registered
from ..core.settings import get_settings, is_redis_url
from ..core.table import TIERS
from ..core.validation import finite_number
from ..store import deployment, keys, server
from ..store.client import as_str, read_pipeline
from ..worker import dead_letters, retention
from . import health

log = logging.getLogger(__name__)

UNACKED, UNACKED_INDEX = "unacked", "unacked_index"
"""kombu's Redis transport: messages taken by workers and not yet acknowledged (HASH), and when
each was taken (ZSET); the package keeps kombu's default names."""

LAG_QUEUE = "visits"
"""The queue whose head message tells how long the oldest waiting item has waited."""


def item_time(task: str, args: list[Any], kwargs: dict[str, Any]) -> float | None:
    """The oldest item time (``ts``) a waiting task message carries, or None when it carries
    none (``.delay()`` without ``ts``: such an item is stamped when a worker applies it). Where
    ``ts`` sits is its kind's declaration (``core.kind``): a per-item task's argument, or each
    item's of a payload task's one argument."""
    kind = kinds.of_task(task)
    position = None if kind is None else kind.ts_position
    if kind is None or position is None:
        return None
    if task == kind.item_task:
        found = [kwargs.get("ts"), args[position] if len(args) > position else None]
    else:
        items = kwargs.get(kind.items_argument, args[0] if args else None)
        found = [item.get("ts") for item in items if isinstance(item, dict)] if isinstance(items, list) else []
    times = [ts for ts in map(finite_number, found) if ts is not None]
    return min(times) if times else None


def oldest_waiting(heads: Iterable[bytes | str | None]) -> float | None:
    """The oldest item time among the messages at the head of a queue's lists (the next to be
    taken from each), or None when none carries one. A message with no ``ts`` is as old as
    when it was sent (``app.SENT_AT_HEADER``; a producer other than this package's app sets none)."""
    times = []
    for raw in heads:
        reason, message = (None, None) if raw is None else dead_letters.message_problem(raw)
        if reason is not None or message is None:
            continue
        args, kwargs = dead_letters.task_arguments(message) or ([], {})
        ts = item_time(message["headers"]["task"], args, kwargs)
        ts = finite_number(message["headers"].get(SENT_AT_HEADER)) if ts is None else ts
        if ts is not None:
            times.append(ts)
    return min(times) if times else None


class CountersCollector(Collector):
    """Reads the deployment's totals from Redis and the broker at each scrape (see the module)."""

    def __init__(
        self, conn: Callable[[], Any], broker: Callable[[], Any], clock: Callable[[], float] = time.time
    ) -> None:
        self.conn, self.broker, self.clock = conn, broker, clock

    def describe(self) -> list:
        return []  # registered without a scrape; every name is counters_...

    def collect(self) -> Iterator[Any]:
        started = time.perf_counter()
        now = self.clock()
        up = GaugeMetricFamily(
            "counters_source_up", "Whether the last scrape could read this source (1) or not (0)", labels=["source"]
        )
        try:
            yield from self.counters_metrics(now)
            up.add_metric(["redis"], 1)
        except Exception as exc:  # noqa: BLE001  a scrape reports the failure, never fails
            log.warning("metrics: the counters Redis did not answer: %s: %s", type(exc).__name__, exc)
            up.add_metric(["redis"], 0)
        try:
            yield from self.broker_metrics(now)
            up.add_metric(["broker"], 1)
        except Exception as exc:  # noqa: BLE001
            log.warning("metrics: the broker did not answer: %s: %s", type(exc).__name__, exc)
            up.add_metric(["broker"], 0)
        yield up
        yield GaugeMetricFamily(
            "counters_scrape_duration_seconds", "How long this scrape's reads took", value=time.perf_counter() - started
        )

    def counters_metrics(self, now: float) -> list[Any]:
        """The workers' totals, refusals, and the deployment's layout and data loss (one round
        trip to the counters Redis)."""
        pipe = read_pipeline(self.conn())  # fixed names and hash tags: no tag key to read first
        pipe.hgetall(keys.throughput())
        pipe.hgetall(keys.refusal_counts())
        pipe.hgetall(keys.skip_counts())
        pipe.hgetall(retention.state_key())
        deployment.queue_read(pipe)
        stored, refused, skipped, retained, tag, marker = pipe.execute()
        held = deployment.describe(*deployment.parse(tag, marker), now=now)
        totals = throughput.parse_totals(stored)
        out: list[Any] = [  # a kind's metric of its own (``Kind.applied_metric``), besides the one by kind
            CounterMetricFamily(kind.applied_metric[0], kind.applied_metric[1], value=totals.applied[kind.name])
            for kind in registered()
            if kind.applied_metric is not None
        ]
        every_kind = CounterMetricFamily(
            "counters_events_applied",
            "Items applied, by kind (core.kind: visit, ranking, and any kind an app declared; "
            "as counters_visits_applied and counters_ranking_events_applied for theirs)",
            labels=["kind"],
        )
        for kind, count in totals.applied.items():
            every_kind.add_metric([kind], count)
        out.append(every_kind)
        duplicates = CounterMetricFamily(
            "counters_duplicates_skipped",
            "Items skipped because their message was applied before (a redelivery)",
            labels=["kind"],
        )
        for kind, count in totals.duplicates.items():
            duplicates.add_metric([kind], count)
        by_reason = CounterMetricFamily("counters_refused", "Items refused as bad input, by reason", labels=["reason"])
        for reason, count in sorted(refusals.parse_counts(refused).items()):
            by_reason.add_metric([reason], count)
        not_views = CounterMetricFamily(
            "counters_skipped",
            "Requests that were not page views, by route "
            "(middleware, import) and reason (docs/api.md: the page view rule)",
            labels=["route", "reason"],
        )
        for (route, reason), count in sorted(skips.parse_counts(skipped).items()):
            not_views.add_metric([route, reason], count)
        sizes = HistogramMetricFamily(
            "counters_batch_size",
            "Items per batch: messages per worker-side batch "
            "(record_visit, incr_ranking), items per batch message (record_visits, "
            "incr_rankings)",
            labels=["kind"],
        )
        for kind, batches in totals.batches.items():  # le as the client library writes it: "1.0", "+Inf"
            sizes.add_metric([kind], [(floatToGoString(float(le)), n) for le, n in batches.buckets], batches.total)
        layout = GaugeMetricFamily(
            "counters_key_layout",
            "Key layout version: the one Redis holds (0: no marker yet) and this package's; they must be equal",
            labels=["side"],
        )
        layout.add_metric(["redis"], held["layout"] or 0)
        layout.add_metric(["package"], held["package_layout"])
        visitors = GaugeMetricFamily(
            "counters_visitors_now",
            f"Distinct visitors of each site in the last "
            f"{live.WINDOW_MINUTES} minutes (the current one and those before it; "
            f"HyperLogLog, ~0.81% error)",
            labels=["site"],
        )
        for site, count in live.visitors_now_by_site(self.conn(), now).items():
            visitors.add_metric([site], count)
        visible = GaugeMetricFamily(
            "counters_data_visible",
            "1 when this process reads the deployment's data "
            "(0: its COUNTERS_TAG_KEY differs from Redis's, or Redis holds data and no tag "
            "key: every figure read here would be zero; health says why)",
            value=1 if held["visible"] else 0,
        )
        out += [duplicates, by_reason, not_views, sizes, layout, visible, visitors, *retention_metrics(retained)]
        out += self.server_metrics()
        if held["lost_at"] is not None:
            out.append(
                GaugeMetricFamily(
                    "counters_data_loss_timestamp_seconds",
                    "When a process found Redis had "
                    "lost the deployment's data (restart without persistence, FLUSHALL, an "
                    "empty replica): figures before then are gone",
                    value=held["lost_at"],
                )
            )
        if totals.newest_ts is not None:
            out.append(
                GaugeMetricFamily(
                    "counters_newest_applied_timestamp_seconds",
                    "Item time (ts) of the newest visit applied",
                    value=totals.newest_ts,
                )
            )
            out.append(
                GaugeMetricFamily(
                    "counters_lag_newest_applied_seconds",
                    "Age of the newest visit applied: now minus its item time",
                    value=max(0.0, now - totals.newest_ts),
                )
            )
        return out

    def server_metrics(self) -> list[Any]:
        """The counters' Redis servers: supported version, evicting memory policy (``store.server``)."""
        try:
            found = server.facts(self.conn())
        except Exception as exc:  # noqa: BLE001  an ACL without INFO: these two are missing
            log.warning("metrics: the server's INFO could not be read: %s: %s", type(exc).__name__, exc)
            return []
        supported = GaugeMetricFamily(
            "counters_redis_version_supported",
            "1 when the server is at least the oldest Redis the package runs on (6.2), else 0",
            labels=["server", "version"],
        )
        evicting = GaugeMetricFamily(
            "counters_redis_evicting",
            "1 when the server's maxmemory-policy may evict the counters' keys (anything but noeviction), else 0",
            labels=["server", "policy"],
        )
        for facts in found:
            supported.add_metric([facts.where, facts.version], 0 if facts.too_old else 1)
            evicting.add_metric([facts.where, facts.policy], 1 if facts.evicting else 0)
        return [supported, evicting]

    def broker_metrics(self, now: float) -> list[Any]:
        """Queue lengths, unacknowledged messages, dead letters and the oldest waiting item (one
        round trip to the broker)."""
        broker = self.broker()
        if broker is None:
            return self.other_broker_metrics()
        lists = {queue: health.queue_lists(queue) for queue in health.QUEUES}
        pipe = broker.pipeline(transaction=False)
        for names in lists.values():
            for name in names:
                pipe.llen(name)
        for name in lists[LAG_QUEUE]:
            pipe.lindex(name, -1)  # kombu publishes with LPUSH and takes from the right
        pipe.hlen(UNACKED)
        pipe.zrange(UNACKED_INDEX, 0, 0, withscores=True)
        pipe.llen(keys.dead_letters())
        pipe.hgetall(keys.dead_letter_reasons())
        replies = pipe.execute()
        per_queue = {}
        position = 0
        for queue, names in lists.items():
            per_queue[queue] = sum(int(n) for n in replies[position : position + len(names)])
            position += len(names)
        heads = replies[position : position + len(lists[LAG_QUEUE])]
        unacked, oldest_taken, dead_kept, dead_reasons = replies[position + len(heads) :]
        waiting = GaugeMetricFamily(
            "counters_lag_oldest_unapplied_seconds",
            "Age of the oldest item waiting at the head of the visits queue (0 when the queue is empty)",
            labels=["queue"],
        )
        oldest = oldest_waiting(heads)
        if oldest is not None or not any(heads):
            waiting.add_metric([LAG_QUEUE], 0.0 if oldest is None else max(0.0, now - oldest))
        taken = GaugeMetricFamily(
            "counters_oldest_unacked_age_seconds",
            "Since when the oldest message taken by a worker and not yet acknowledged was taken (0 when none)",
            value=max(0.0, now - float(oldest_taken[0][1])) if oldest_taken else 0.0,
        )
        return [
            queue_lengths(per_queue),
            waiting,
            GaugeMetricFamily(
                "counters_unacked_messages", "Messages taken by workers, not yet acknowledged", value=int(unacked)
            ),
            taken,
            *dead_letter_metrics(int(dead_kept), {as_str(k): int(v) for k, v in dead_reasons.items()}),
        ]

    def other_broker_metrics(self) -> list[Any]:
        """A broker that is not a Redis (RabbitMQ...): queue lengths through kombu, dead letters
        from the counters' Redis (where they are kept then). The unacknowledged messages and the
        waiting items' lag are not read: AMQP does not show a queue's messages without taking
        them (docs/metrics.md)."""
        kept = dead_letters.summary(self.conn())
        return [
            queue_lengths(health.amqp_queue_lengths(default_app)),
            *dead_letter_metrics(kept["count"], kept["by_reason"]),
        ]


def queue_lengths(per_queue: dict[str, int]) -> Any:
    """``counters_queue_length``, whatever the broker."""
    lengths = GaugeMetricFamily(
        "counters_queue_length", "Messages waiting in a queue (every priority)", labels=["queue"]
    )
    for queue, count in per_queue.items():
        lengths.add_metric([queue], count)
    return lengths


def retention_metrics(raw: Any) -> list[Any]:
    """What the retention pass removed (``worker.retention``): keys by table and tier since the
    start, site's days past a horizon left for the next pass by tier, and when the last pass ran."""
    status = retention.parse_status(raw)
    removed = CounterMetricFamily(
        "counters_retention_removed_keys",
        "Keys the retention pass removed (apply_retention: days past COUNTERS_VISITOR_DAYS, COUNTERS_AGGREGATE_DAYS)",
        labels=["table", "tier"],
    )
    for (name, tier), count in sorted(status["removed"].items()):
        removed.add_metric([name, tier], count)
    pending = GaugeMetricFamily(
        "counters_retention_pending_days",
        "Site's days past a horizon that the last retention pass left for the next one",
        labels=["tier"],
    )
    last = status["last"]
    for tier in TIERS:
        pending.add_metric([tier], last.get(f"pending:{tier}", 0))
    out = [removed, pending]
    if "run" in last:
        out.append(
            GaugeMetricFamily(
                "counters_retention_last_run_timestamp_seconds", "When the last retention pass ran", value=last["run"]
            )
        )
    return out


def dead_letter_metrics(kept: int, by_reason: dict[str, int]) -> list[Any]:
    """``counters_dead_letters`` (dead letters kept) and ``counters_dead_lettered`` (set aside ever, by
    reason), wherever the dead letters are kept."""
    set_aside = CounterMetricFamily(
        "counters_dead_lettered", "Messages ever set aside in the dead letters, by reason", labels=["reason"]
    )
    for reason, count in sorted(by_reason.items()):
        set_aside.add_metric([reason], count)
    return [
        GaugeMetricFamily("counters_dead_letters", "Dead letters kept (counters-tasks dead-letters)", value=kept),
        set_aside,
    ]


class Broker:
    """A client of the broker's Redis with short timeouts, made on first use and kept; None when
    the broker is not a Redis (its metrics are then read through kombu)."""

    def __init__(self, timeout: float = 2.0) -> None:
        self.timeout = timeout
        self.lock = threading.Lock()
        self.client: Any = None

    def __call__(self) -> Any:
        with self.lock:
            url = get_settings().broker_url
            if self.client is None and is_redis_url(url):
                self.client = health.broker_client(url, self.timeout)
            return self.client


def registry(conn: Callable[[], Any], broker: Callable[[], Any] | None = None) -> CollectorRegistry:
    """A registry holding only the counters collector (no process metrics of the server)."""
    made = CollectorRegistry(auto_describe=False)
    made.register(CountersCollector(conn, broker or Broker()))
    return made


def endpoint(conn: Callable[[], Any], broker: Callable[[], Any] | None = None) -> Callable[[Request], Response]:
    """The ``/metrics`` handler: Prometheus' text format of ``registry(conn, broker)``."""
    made = registry(conn, broker)

    def metrics(_request: Request) -> Response:
        return Response(generate_latest(made), media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    return metrics
