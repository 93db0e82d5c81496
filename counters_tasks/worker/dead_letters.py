"""Dead letters: messages a worker cannot apply are set aside, never retried forever, never
dropped, and never able to stop a worker. They are kept on the broker's Redis, or in the
counters' Redis when the broker is not a Redis (RabbitMQ...: ``store_client``).

Two kinds of dead letter go to one capped list (``store.keys.dead_letters``), newest first:

- a message the worker cannot decode or whose shape is wrong (not JSON, not a kombu message, no
  task name or id, a body that is not Celery's ``[args, kwargs, embed]``, or larger than
  ``COUNTERS_MAX_MESSAGE_BYTES``): with a Redis broker, taken by the broker transport and moved
  aside before Celery sees it, with its raw payload (``payload``; bytes that are not UTF-8
  escaped, ``escaped``); with any other broker (RabbitMQ), the worker's consumer
  (``worker.consumer``) checks each delivered message the same way (``task_problem``) and sets it
  aside with its body (``body_only``), as it does a message of a task the worker does not know
  (``unknown_task``);
- a task call that kept failing for a reason that is not Redis being away
  (``COUNTERS_MAX_ATTEMPTS`` tries): its task name, id, arguments (``args``, ``kwargs``), error.

A call's arguments hold raw visitor IPs; the broker's Redis holds them anyway (the queues), but
the counters' Redis never holds a raw IP (docs/keys.md): a call or a message body kept there has
every IP address of its arguments, body and error masked as Celery's output shows them
(``core.privacy``), is marked ``masked`` when that changed it, and is then not sent again by
``requeue`` (a masked IP is not a visitor: it would be refused as bad input); the operator reads
and drops it.

Each dead letter says why (``reason``), when (``at``) and from which queue; the reasons are counted.
Dead letters older than ``COUNTERS_DEAD_LETTER_DAYS`` (14) are removed by the beat job
``expire_dead_letters`` (``expire``): they hold task arguments, visitor IPs among them.
Operators list, requeue or drop them with ``counters-tasks dead-letters``. ``message_problem``
and ``task_arguments`` decode a raw message (the metrics read the item time of a queue's head
with them).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from typing import Any

import redis
from kombu.utils.json import loads as kombu_loads

from ..core import table
from ..core.privacy import masked, masked_text
from ..core.settings import Settings, get_settings, is_redis_url, redis_py_url
from ..core.validation import finite_number
from ..store import keys
from ..store.client import as_str, get_redis
from ..store.scripts import run_script

log = logging.getLogger(__name__)

PAYLOAD_KEPT = 1 << 20
"""Bytes of a set-aside message's raw payload kept in its dead letter (all of any decodable message)."""

_client: tuple[int, str, redis.Redis] | None = None


def kept_with_the_counters() -> bool:
    """Whether the dead letters live in the counters' Redis (the broker is not a Redis: RabbitMQ,
    any other), where no raw IP may be kept."""
    return not is_redis_url(get_settings().broker_url)


def store_client() -> Any:
    """The Redis that keeps the dead letters, for this process: the broker's, when the broker is
    a Redis (short timeouts); else (RabbitMQ, any other broker) the counters' own."""
    global _client
    settings = get_settings()
    if kept_with_the_counters():
        return get_redis()
    url = redis_py_url(settings.broker_url)
    if _client is None or _client[0] != os.getpid() or _client[1] != url:
        timeout = settings.socket_timeout
        _client = (os.getpid(), url, redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout))
    return _client[2]


def _is_message(message: Any) -> bool:
    """Whether a decoded item has the shape of a kombu message (headers, properties, a body)."""
    return isinstance(message, dict) and all(
        isinstance(message.get(k), want)
        for k, want in (("headers", dict), ("properties", dict), ("body", (str, bytes)))
    )


def envelope_problem(item: bytes | str) -> tuple[str | None, dict[str, Any] | None]:
    """``(reason, message)`` for any kombu message, a task or a control message (a ``celery
    inspect`` reply): ``not_json`` or ``not_a_message`` with None, else None and the message
    decoded as kombu decodes it, which kombu can deliver."""
    try:
        message = kombu_loads(item)
    except Exception:  # noqa: BLE001  not JSON, not UTF-8, or kombu's type hook refused a value
        return "not_json", None
    if not _is_message(message):
        return "not_a_message", None
    return None, message


def message_check(item: bytes | str) -> tuple[str | None, dict[str, Any] | None, Any]:
    """``message_problem``'s ``(reason, message)`` and the task's body it decoded (kombu's JSON;
    None when refused), which the worker hands on with the message rather than decode it again."""
    reason, message = envelope_problem(item)
    if message is None:
        return reason, None, None
    reason, body = task_check(message)
    return reason, message, body


def message_problem(item: bytes | str) -> tuple[str | None, dict[str, Any] | None]:
    """``(reason, message)``: why a raw broker item cannot be handed to Celery (None when it can),
    and the decoded kombu message when it got that far: decoded as kombu decodes it (its JSON
    with its own types), so the worker hands over this very dict. A message that is JSON but
    that kombu's decoder refuses (a ``__type__`` object it cannot rebuild) is ``not_json`` too:
    handed to kombu it raised in the worker's loop, which took it again and again while the
    messages behind it waited. The task message itself is checked by ``task_problem``."""
    reason, message, _body = message_check(item)
    return reason, message


def task_problem(message: dict[str, Any]) -> str | None:
    """Why a kombu message (decoded as ``envelope_problem`` decodes a raw item, or a delivered
    one as ``delivered_message`` shows it) cannot be handed to Celery as a task, whatever the
    broker; None when it can. Celery raises in the worker's loop on each of these (a missing
    ``id`` header or a body that is not ``[args, kwargs, embed]`` made the main process exit)."""
    return task_check(message)[0]


def task_check(message: dict[str, Any]) -> tuple[str | None, Any]:
    """``task_problem``'s reason, and the body it decoded when there is none (else None)."""
    if not _is_message(message):
        return "not_a_message", None
    headers = message["headers"]
    if not isinstance(headers.get("task"), str):  # protocol 2: the task name is a header
        return "no_task", None
    if "id" not in headers:
        return "no_id", None
    if message.get("content-type") != "application/json":
        return "not_json_content", None
    try:
        body = _body(message)
    except Exception:  # noqa: BLE001  not base64, UTF-8 or JSON, or kombu's type hook refused a value
        return "not_json", None
    return ("bad_body", None) if _arguments(body) is None else (None, body)


def delivered_message(message: Any) -> dict[str, Any]:
    """A message as kombu delivered it (a ``kombu.Message``, from any transport) as the dict that
    ``task_problem`` reads: its body is already decoded from the transport's encoding."""
    return {"headers": message.headers, "properties": {}, "body": message.body, "content-type": message.content_type}


def task_arguments(message: dict[str, Any]) -> tuple[list[Any], dict[str, Any]] | None:
    """``(args, kwargs)`` of a decoded kombu message whose body is Celery's ``[args, kwargs,
    embed]`` (base64 or not), or None when it is not."""
    try:
        return _arguments(_body(message))
    except Exception:  # noqa: BLE001  not base64, UTF-8 or JSON, or kombu's type hook refused a value
        return None


def _body(message: dict[str, Any]) -> Any:
    """The JSON of a message's body (base64 or not), decoded as kombu decodes it (its own types:
    what Celery is then given); raises when it is not JSON or kombu refuses a value."""
    body: str | bytes = message["body"]
    if message["properties"].get("body_encoding") == "base64":
        body = base64.b64decode(body, validate=True)
    return kombu_loads(body)


def _arguments(decoded: Any) -> tuple[list[Any], dict[str, Any]] | None:
    if not (
        isinstance(decoded, list)
        and len(decoded) == 3
        and isinstance(decoded[0], list)
        and isinstance(decoded[1], dict)
        and isinstance(decoded[2], dict)
    ):
        return None
    return decoded[0], decoded[1]


def payload_text(item: bytes | str) -> tuple[str, bool]:
    """A raw payload as text, and whether it had to be escaped: bytes that are not UTF-8 (a
    foreign producer's) are kept as ``\\xNN`` escapes, so the dead letter is JSON and can be listed,
    but is not the message as it was (``requeue`` keeps it)."""
    if isinstance(item, str):
        return item, False
    try:
        return item.decode("utf-8"), False
    except UnicodeDecodeError:
        return item.decode("utf-8", "backslashreplace"), True


def _dead_letter(reason: str, queue: str | None, task: str | None, task_id: Any, **extra: Any) -> str:
    return json.dumps(
        {
            "reason": reason,
            "at": time.time(),
            "queue": queue,
            "task": task,
            "id": task_id if isinstance(task_id, str) else repr(task_id)[:200],
            **extra,
        }
    )


def set_aside_message(
    client: Any, unacked: tuple[str, str], queue: str, item: bytes | str, reason: str, message: dict[str, Any] | None
) -> None:
    """Move a raw message taken from ``queue`` aside (and out of the ``unacked`` hash and index)."""
    text, escaped = payload_text(item)
    headers = (message or {}).get("headers") or {}
    tag = ((message or {}).get("properties") or {}).get("delivery_tag")
    task = headers.get("task") if isinstance(headers.get("task"), str) else None
    letter = _dead_letter(
        reason,
        queue,
        task,
        headers.get("id"),
        payload=text[:PAYLOAD_KEPT],
        truncated=len(text) > PAYLOAD_KEPT,
        **({"escaped": True} if escaped else {}),
    )
    run_script(
        client,
        "dead_letter",
        [keys.dead_letters(), keys.dead_letter_reasons(), *unacked],
        [letter, get_settings().dead_letter_max, reason, tag if isinstance(tag, str) else ""],
    )
    log.warning("message %s (task %s) from %s set aside: %s", headers.get("id"), task, queue, reason)


def set_aside_delivered(message: Any, reason: str) -> None:
    """Set aside a task message as kombu delivered it (``worker.consumer``, any broker), for
    ``reason`` (a ``task_problem``, or ``unknown_task``), before Celery handles it: its dead letter
    keeps the body (``body_only``: without its message it cannot be sent again, ``requeue``
    keeps it). Kept in the counters' Redis (``kept_with_the_counters``), its body, task and id
    have their IP addresses masked (``masked`` when that changed them). The caller acknowledges
    the message once this returned."""
    headers = message.headers if isinstance(message.headers, dict) else {}
    text, escaped = payload_text(message.body if isinstance(message.body, (bytes, str)) else repr(message.body))
    found_task, found_id = headers.get("task"), headers.get("id")
    task: str = found_task if isinstance(found_task, str) else ""
    task_id: str = found_id if isinstance(found_id, str) else repr(found_id)[:200]
    extra: dict[str, Any] = {"escaped": True} if escaped else {}
    if kept_with_the_counters():
        shown = (masked_text(text), masked_text(task), masked_text(task_id))
        if shown != (text, task, task_id):
            (text, task, task_id), extra["masked"] = shown, True
    queue = (message.delivery_info or {}).get("routing_key")
    letter = _dead_letter(
        reason,
        queue,
        task or None,
        task_id,
        payload=text[:PAYLOAD_KEPT],
        truncated=len(text) > PAYLOAD_KEPT,
        body_only=True,
        **extra,
    )
    run_script(
        store_client(),
        "dead_letter",
        [keys.dead_letters(), keys.dead_letter_reasons(), "", ""],
        [letter, get_settings().dead_letter_max, reason, ""],
    )
    log.warning(
        "message %s (task %s) from %s set aside: %s", masked_text(task_id[:200]), masked_text(task[:200]), queue, reason
    )


def set_aside_call(
    task: str, task_id: Any, args: Any, kwargs: Any, queue: str | None, error: BaseException, attempts: int
) -> None:
    """Set aside a task call that kept failing (``attempts`` tries) for a reason that is not Redis
    being away, so that its message can be acknowledged without being lost. Kept in the counters'
    Redis (``kept_with_the_counters``), its IP addresses are masked (``masked`` when that changed
    its arguments: it cannot be sent again)."""
    reason = "failed"
    error_text = f"{type(error).__name__}: {error}"[:2000]
    extra: dict[str, Any] = {}
    if kept_with_the_counters():
        shown_args, shown_kwargs = masked(args, whole=True), masked(kwargs, whole=True)
        if (shown_args, shown_kwargs) != (args, kwargs):
            args, kwargs, extra["masked"] = shown_args, shown_kwargs, True
        error_text = masked_text(error_text)
    letter = _dead_letter(
        reason, queue, task, task_id, args=args, kwargs=kwargs, attempts=attempts, error=error_text, **extra
    )
    run_script(
        store_client(),
        "dead_letter",
        [keys.dead_letters(), keys.dead_letter_reasons(), "", ""],
        [letter, get_settings().dead_letter_max, reason, ""],
    )
    log.error("%s %s failed %d times (%r): set aside in the dead letters", task, task_id, attempts, error)


EXPIRE_PER_RUN = 10_000
"""Most dead letters one run of ``expire`` removes (the default cap of the list): the rest wait for
the next run, an hour later."""


def record_time(raw: bytes | str) -> float | None:
    """When a dead letter was written (its ``at``), or None when it cannot be read."""
    try:
        return finite_number(json.loads(raw).get("at"))
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None


def expire(client: Any, older_than: float, limit: int = EXPIRE_PER_RUN) -> int:
    """Delete the dead letters written before ``older_than`` (a time; ``COUNTERS_DEAD_LETTER_DAYS``
    ago for the beat job), so that the arguments and payloads kept here, visitor IPs among them,
    are not kept for good. The list is newest first, so the oldest is its last dead letter: each step
    reads that one (LINDEX -1) and removes it only if it is still the last one (WATCH), and a run
    stops at the first dead letter young enough. A run with nothing due costs one read. A dead letter
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
        log.info(
            "%d dead letters older than %s removed", removed, time.strftime("%Y-%m-%d %H:%M", time.gmtime(older_than))
        )
    return removed


def kept_days(settings: Settings) -> int:
    """Days a dead letter is kept: COUNTERS_DEAD_LETTER_DAYS, never more than COUNTERS_VISITOR_DAYS
    (a message's arguments are visitor-level data: an IP, masked, a session id, a path); 0 dead-letter
    days: the visitor days."""
    days = settings.dead_letter_days
    return min(days, settings.visitor_days) if days else settings.visitor_days


def expire_due(client: Any, now: float | None = None) -> int:
    """``expire`` the dead letters older than ``kept_days`` (COUNTERS_DEAD_LETTER_DAYS, at most
    COUNTERS_VISITOR_DAYS)."""
    return expire(client, (time.time() if now is None else now) - kept_days(get_settings()) * 86400)


def summary(client: Any) -> dict[str, Any]:
    """How many dead letters are kept, and how many messages were ever set aside, by reason."""
    reasons = {as_str(k): int(v) for k, v in client.hgetall(keys.dead_letter_reasons()).items()}
    return {"count": int(client.llen(keys.dead_letters())), "by_reason": reasons}


def listing(client: Any, limit: int = 100) -> list[dict[str, Any]]:
    """The newest ``limit`` dead letters, each with its ``index`` (0 = newest) for requeue and drop."""
    return [{"index": n, **json.loads(raw)} for n, raw in enumerate(client.lrange(keys.dead_letters(), 0, limit - 1))]


def _take(client: Any, index: int | None) -> list[tuple[bytes, dict[str, Any]]]:
    """Remove the dead letter at ``index`` (or all, for None) from the list; returns what was removed."""
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
    """Delete the dead letter at ``index`` (all for None); returns how many were deleted."""
    return len(_take(client, index))


def requeue(client: Any, app: Any, index: int | None) -> int:
    """Send the dead letter at ``index`` (all for None) again: a raw message back to its queue as it
    was, a failed task call as a new message with the same task id (so dedupe still holds). A
    truncated payload, or a call whose IPs were masked, cannot be: it stays. Returns how many
    were sent."""
    done = 0
    for raw, letter in _take(client, index):
        if "payload" in letter and not any(letter.get(k) for k in ("truncated", "escaped", "body_only")):
            client.lpush(letter["queue"], letter["payload"])
        elif "args" in letter and not letter.get("masked"):
            app.send_task(
                letter["task"],
                args=letter["args"],
                kwargs=letter["kwargs"],
                task_id=letter["id"],
                queue=letter.get("queue") or None,
            )
        else:  # a payload not as it came (truncated, escaped, a body alone) or masked arguments: keep it
            client.rpush(keys.dead_letters(), raw)
            continue
        done += 1
    return done


DEAD_LETTERS = table.register(
    table.Table(
        name="dead_letters",
        what="messages set aside (undecodable, refused whole, failed past their attempts), newest first, "
        "with the count of each reason; in the broker's Redis (the counters' with another broker)",
        module=__name__,
        keys=(table.StoredKey("ct:dead", "LIST"), table.StoredKey("ct:dead:reasons", "HASH")),
        tag="none",
        fed_by=(),
        writers=("store/lua/dead_letter.lua (the broker transport, the tasks)", "expire_dead_letters (beat, hourly)"),
        readers=("counters-tasks dead-letters", "health", "/metrics"),
        retention=table.Retention(
            "COUNTERS_DEAD_LETTER_DAYS, never more than COUNTERS_VISITOR_DAYS (0: the visitor days; the hourly "
            "expire_dead_letters), at most COUNTERS_DEAD_LETTER_MAX records",
            "COUNTERS_DEAD_LETTER_DAYS",
            kept_days,
        ),
        erasure=table.Erasure(
            "a message's arguments, IP addresses masked",
            False,
            "not by forget_visitor: the masked arguments hold no full IP, so no record can be told to be one "
            "visitor's by its IP (and a requeue keeps a masked record); counters-tasks dead-letters drop (a "
            "record), or its expiry after COUNTERS_DEAD_LETTER_DAYS",
        ),
    )
)
"""The dead letters (``core.table``)."""
