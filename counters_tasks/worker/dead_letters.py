"""Dead letters: messages a worker cannot apply are set aside, never retried forever, never
dropped, and never able to stop a worker. They are kept on the broker's Redis, or in the
counters' Redis when the broker is not a Redis (RabbitMQ...: ``store_client``).

Two kinds of record go to one capped list (``store.keys.dead_letters``), newest first:

- a message the worker cannot decode or whose shape is wrong (not JSON, not a kombu message, no
  task name, a body that is not Celery's ``[args, kwargs, embed]``, or larger than
  ``COUNTERS_MAX_MESSAGE_BYTES``): taken by the broker transport and moved aside before Celery
  sees it, with its raw payload (``payload``);
- a task call that kept failing for a reason that is not Redis being away
  (``COUNTERS_MAX_ATTEMPTS`` tries): its task name, id, arguments (``args``, ``kwargs``).

Each record says why (``reason``), when (``at``) and from which queue; the reasons are counted.
Records older than ``COUNTERS_DEAD_LETTER_DAYS`` (14) are removed by the beat job
``expire_dead_letters`` (``expire``): they hold task arguments, visitor IPs among them.
Operators list, requeue or drop them with ``counters-tasks dead-letters``. ``message_problem``
and ``task_arguments`` decode a raw message (the metrics read the event time of a queue's head
with them).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import time
from typing import Any

import redis
from kombu.utils.json import loads as kombu_loads

from ..core.settings import get_settings, is_redis_url
from ..core.validation import finite_number
from ..store import keys
from ..store.client import as_str, get_redis
from ..store.scripts import run_script

log = logging.getLogger(__name__)

PAYLOAD_KEPT = 1 << 20
"""Bytes of a set-aside message's raw payload kept in its record (all of any decodable message)."""

_client: tuple[int, str, redis.Redis] | None = None


def store_client() -> Any:
    """The Redis that keeps the dead letters, for this process: the broker's, when the broker is
    a Redis (short timeouts); else (RabbitMQ, any other broker) the counters' own."""
    global _client
    settings = get_settings()
    if not is_redis_url(settings.broker_url):
        return get_redis()
    url = settings.broker_url
    if _client is None or _client[0] != os.getpid() or _client[1] != url:
        timeout = settings.socket_timeout
        _client = (os.getpid(), url, redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout))
    return _client[2]


def envelope_problem(item: bytes | str) -> tuple[str | None, dict[str, Any] | None]:
    """``(reason, message)`` for any kombu message, a task or a control message (a ``celery
    inspect`` reply): ``not_json`` or ``not_a_message`` with None, else None and the message
    decoded as kombu decodes it, which kombu can deliver."""
    try:
        message = kombu_loads(item)
    except Exception:  # noqa: BLE001  not JSON, not UTF-8, or kombu's type hook refused a value
        return "not_json", None
    if not isinstance(message, dict) or not all(isinstance(message.get(k), want) for k, want in
                                                (("headers", dict), ("properties", dict), ("body", str))):
        return "not_a_message", None
    return None, message


def message_problem(item: bytes | str) -> tuple[str | None, dict[str, Any] | None]:
    """``(reason, message)``: why a raw broker item cannot be handed to Celery (None when it can),
    and the decoded kombu message when it got that far: decoded as kombu decodes it (its JSON
    with its own types), so the worker hands over this very dict. A message that is JSON but
    that kombu's decoder refuses (a ``__type__`` object it cannot rebuild) is ``not_json`` too:
    handed to kombu it raised in the worker's loop, which took it again and again while the
    messages behind it waited."""
    reason, message = envelope_problem(item)
    if message is None:
        return reason, None
    if not isinstance(message["headers"].get("task"), str):  # protocol 2: the task name is a header
        return "no_task", message
    if message.get("content-type") != "application/json":
        return "not_json_content", message
    if task_arguments(message) is None:
        return "bad_body", message
    return None, message


def task_arguments(message: dict[str, Any]) -> tuple[list[Any], dict[str, Any]] | None:
    """``(args, kwargs)`` of a decoded kombu message whose body is Celery's ``[args, kwargs,
    embed]`` (base64 or not), or None when it is not."""
    body: str | bytes = message["body"]
    if message["properties"].get("body_encoding") == "base64":
        try:
            body = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return None
    try:
        decoded = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not (isinstance(decoded, list) and len(decoded) == 3 and isinstance(decoded[0], list)
            and isinstance(decoded[1], dict) and isinstance(decoded[2], dict)):
        return None
    return decoded[0], decoded[1]


def _record(reason: str, queue: str | None, task: str | None, task_id: Any, **extra: Any) -> str:
    return json.dumps({"reason": reason, "at": time.time(), "queue": queue, "task": task,
                       "id": task_id if isinstance(task_id, str) else repr(task_id)[:200], **extra})


def set_aside_message(client: Any, unacked: tuple[str, str], queue: str, item: bytes | str, reason: str,
                      message: dict[str, Any] | None) -> None:
    """Move a raw message taken from ``queue`` aside (and out of the ``unacked`` hash and index)."""
    text = as_str(item)
    headers = (message or {}).get("headers") or {}
    tag = ((message or {}).get("properties") or {}).get("delivery_tag")
    task = headers.get("task") if isinstance(headers.get("task"), str) else None
    record = _record(reason, queue, task, headers.get("id"), payload=text[:PAYLOAD_KEPT],
                     truncated=len(text) > PAYLOAD_KEPT)
    run_script(client, "dead_letter", [keys.dead_letters(), keys.dead_letter_reasons(), *unacked],
               [record, get_settings().dead_letter_max, reason, tag if isinstance(tag, str) else ""])
    log.warning("message %s (task %s) from %s set aside: %s", headers.get("id"), task, queue, reason)


def set_aside_call(task: str, task_id: Any, args: Any, kwargs: Any, queue: str | None, error: BaseException,
                   attempts: int) -> None:
    """Set aside a task call that kept failing (``attempts`` tries) for a reason that is not Redis
    being away, so that its message can be acknowledged without being lost."""
    reason = "failed"
    record = _record(reason, queue, task, task_id, args=args, kwargs=kwargs, attempts=attempts,
                     error=f"{type(error).__name__}: {error}"[:2000])
    run_script(store_client(), "dead_letter", [keys.dead_letters(), keys.dead_letter_reasons(), "", ""],
               [record, get_settings().dead_letter_max, reason, ""])
    log.error("%s %s failed %d times (%r): set aside in the dead letters", task, task_id, attempts, error)


EXPIRE_PER_RUN = 10_000
"""Most records one run of ``expire`` removes (the default cap of the list): the rest wait for
the next run, an hour later."""


def record_time(raw: bytes | str) -> float | None:
    """When a record was written (its ``at``), or None when it cannot be read."""
    try:
        return finite_number(json.loads(raw).get("at"))
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None


def expire(client: Any, older_than: float, limit: int = EXPIRE_PER_RUN) -> int:
    """Delete the records written before ``older_than`` (a time; ``COUNTERS_DEAD_LETTER_DAYS``
    ago for the beat job), so that the arguments and payloads kept here, visitor IPs among them,
    are not kept for good. The list is newest first, so the oldest is its last record: each step
    reads that one (LINDEX -1) and removes it only if it is still the last one (WATCH), and a run
    stops at the first record young enough. A run with nothing due costs one read. A record
    whose time cannot be read is removed as due. Returns how many were removed."""
    removed = 0

    def pop_if_old(pipe: Any) -> bool:
        last = pipe.lindex(keys.dead_letters(), -1)
        at = None if last is None else record_time(last)
        if last is None or (at is not None and at >= older_than):
            return False
        pipe.multi()
        pipe.rpop(keys.dead_letters())
        return True

    while removed < limit:
        if not client.transaction(pop_if_old, keys.dead_letters(), value_from_callable=True):
            break
        removed += 1
    if removed:
        log.info("%d dead letters older than %s removed", removed, time.strftime("%Y-%m-%d %H:%M", time.gmtime(older_than)))
    return removed


def expire_due(client: Any, now: float | None = None) -> int:
    """``expire`` the records older than ``COUNTERS_DEAD_LETTER_DAYS`` (none when it is 0)."""
    days = get_settings().dead_letter_days
    return expire(client, (time.time() if now is None else now) - days * 86400) if days else 0


def summary(client: Any) -> dict[str, Any]:
    """How many records are kept, and how many messages were ever set aside, by reason."""
    reasons = {as_str(k): int(v) for k, v in client.hgetall(keys.dead_letter_reasons()).items()}
    return {"count": int(client.llen(keys.dead_letters())), "by_reason": reasons}


def listing(client: Any, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` records, each with its ``index`` (0 = newest) for requeue and drop."""
    return [{"index": n, **json.loads(raw)} for n, raw in enumerate(client.lrange(keys.dead_letters(), 0, limit - 1))]


def _take(client: Any, index: int | None) -> list[tuple[bytes, dict[str, Any]]]:
    """Remove the record at ``index`` (or all, for None) from the list; returns what was removed."""
    if index is None:
        raws = client.lrange(keys.dead_letters(), 0, -1)
    else:
        found = client.lindex(keys.dead_letters(), index)
        raws = [] if found is None else [found]
    taken = []
    for raw in raws:
        if client.lrem(keys.dead_letters(), 1, raw):
            taken.append((raw, json.loads(raw)))
    return taken


def drop(client: Any, index: int | None) -> int:
    """Delete the record at ``index`` (all for None); returns how many were deleted."""
    return len(_take(client, index))


def requeue(client: Any, app: Any, index: int | None) -> int:
    """Send the record at ``index`` (all for None) again: a raw message back to its queue as it
    was, a failed task call as a new message with the same task id (so dedupe still holds)."""
    done = 0
    for raw, record in _take(client, index):
        if "payload" in record and not record.get("truncated"):
            client.lpush(record["queue"], record["payload"])
        elif "args" in record:
            app.send_task(record["task"], args=record["args"], kwargs=record["kwargs"], task_id=record["id"],
                          queue=record.get("queue") or None)
        else:  # a truncated payload cannot be sent again: keep it
            client.rpush(keys.dead_letters(), raw)
            continue
        done += 1
    return done
