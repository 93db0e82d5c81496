"""The deployment's marker in Redis: its identity, its key layout, its tag key, and data loss.

A deployment's data is keyed with its tag key (``keys``), kept in Redis as ``ct:tagkey``.
If Redis loses its data while processes run (a restart without persistence, ``FLUSHALL``, a
failover to an empty replica, an evicted key), processes that cached one tag key and processes
that made another would split the figures for good. So:

- Only writers make the tag key (``SET NX``, first writer wins); a reader that finds none uses
  none (a throwaway key: there can be no data under any tag) and looks again next time.
- The marker ``ct:deployment`` (HASH ``id``, ``layout``, ``created``; after a loss ``lost_at``,
  ``lost_by``, ``previous``) is written with the tag key. Every process checks it at most every
  ``CHECK_EVERY`` seconds, on its normal Redis use (two commands in one round trip). A writer
  that finds it gone puts back the tag key it holds (``SET NX``: whoever comes first, all end on
  one key) under a new ``id``, noting the loss; any process that finds another ``id`` than it
  saw logs the loss at ERROR and takes Redis's tag key. Every write is confirmed after it is
  made (``confirm_written``, one GET): one made with a tag key that lost to another is made
  again under the winner, so no write lands where readers do not look. ``health`` and
  ``/metrics`` report ``lost_at`` (``status``).
- ``layout`` is the version of the key layout (``LAYOUT``). A process whose layout differs
  refuses to read or write (``LayoutMismatch``) and the worker refuses to start;
  ``counters-tasks migrate`` (``migrate``) moves the data from one layout to the next. The step
  from 1 to 2 records ``migrated_at`` and the layout-1 settings its markers need (``upgrade``).

A pinned tag key (``COUNTERS_TAG_KEY``, what ``make run`` and compose set) is kept in Redis too:
a writer with the pin makes ``ct:tagkey`` with it (and puts it back after a loss), so a process
without the pin (a shell that did not source the stack's env, an app outside compose) reads the
same figures. A pin that differs from the key in Redis is refused (``TagKeyMismatch``) for reads
and writes alike: such a process would read zeros and write where no reader looks. The marker is
kept and checked all the same, so a loss is reported with a pin too. ``describe`` says whether this
process can see the deployment's data (``visible``), which ``health`` checks.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core import table
from ..core.settings import get_settings
from ..errors import CountersError, TagKeyChanged
from . import server
from .client import RedisClient, as_str, read_pipeline

if TYPE_CHECKING:
    from redis.typing import EncodableT, FieldT

LAYOUT = 2
"""The key layout this package reads and writes (docs/keys.md). 1: the layout of 0.1 (tag-keyed
groups, one HASH per counter), the first with a marker; a deployment with ``ct:tagkey`` and no
marker is of it. 2 (issue 42): the approximate rows' sketches in Redis's HyperLogLog, and a
message's ``site_day`` calls cut in fixed parts named ``<id>/v<n>`` (layout 1's ``<id>/d<n>`` were
cut by the views' who-visits values, which settings and versions changed). Layout 1's register
sketches are read as they are until their days leave retention."""


@dataclass(frozen=True)
class Upgrade:
    """The last step from key layout 1 to 2, while its layout-1 dedupe markers may still be in
    Redis: what a layout-2 write needs to find which views of a message a layout-1 worker applied
    (``sitestats/upgrade.py``). ``client_tables``: the layout-1 workers' COUNTERS_CLIENT_TABLES (the
    old cut depended on it); ``until``: the migration's time plus their COUNTERS_DEDUPE_TTL."""

    migrated_at: float
    until: float
    client_tables: bool


def _layout_1_to_2(conn: Any) -> None:
    """Key layout 1 -> 2: converts nothing (layout 1's sketches are read as they are until their
    days leave retention). It records in the marker ``migrated_at`` and what layout 1's cut of a
    message needs to be recomputed (``layout1_client_tables``, ``layout1_dedupe_ttl``: this
    process's settings, which are to be the layout-1 workers'), so that for the dedupe TTL a
    layout-2 write skips the views a layout-1 worker applied (``upgrade``)."""
    settings = get_settings()
    conn.hset(
        marker_name(),
        mapping={
            "migrated_at": repr(time.time()),
            "migrated_by": process_name(),
            "layout1_client_tables": "on" if settings.client_tables else "off",
            "layout1_dedupe_ttl": settings.dedupe_ttl,
        },
    )


MIGRATIONS: dict[int, Callable[[Any], None]] = {1: _layout_1_to_2}
"""``{n: step}``: the step that moves a deployment's data from layout n to n + 1."""

CHECK_EVERY = 2.0
"""Seconds between two checks of the marker by one process (per client)."""

LOSS_REPORTED_FOR = 24 * 3600.0
"""Seconds after a data loss during which ``health`` counts it as a problem (then as a note)."""

log = logging.getLogger(__name__)


class DeploymentMismatch(CountersError):
    """This process and the deployment in Redis disagree: nothing is read or written (the worker
    refuses to start), so no figure is read as zero or written where no reader looks."""


class LayoutMismatch(DeploymentMismatch):
    """Redis holds another key layout than this package's."""


class TagKeyMismatch(DeploymentMismatch):
    """``COUNTERS_TAG_KEY`` is pinned here to another key than the deployment's in Redis."""


def tag_key_name() -> str:
    """STRING: the deployment's tag key (32 hex digits), made by the first writer."""
    return f"{get_settings().key_prefix}tagkey"


def marker_name() -> str:
    """HASH: the deployment's marker (``id``, ``layout``, ``created``, ``lost_at``...)."""
    return f"{get_settings().key_prefix}deployment"


def process_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Held:
    """What one process knows of one client's deployment."""

    prefix: str
    tag_key: bytes | None = None
    deployment_id: str | None = None
    checked_at: float = float("-inf")
    server_checked: bool = False
    marker: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_held: weakref.WeakKeyDictionary[Any, Held] = weakref.WeakKeyDictionary()
_unreferenceable: dict[int, Held] = {}


def _state(conn: RedisClient) -> Held:
    prefix = get_settings().key_prefix
    try:
        held = _held.get(conn)
    except TypeError:  # a client that cannot be weakly referenced
        held = _unreferenceable.get(id(conn))
    if held is None or held.prefix != prefix:
        held = Held(prefix)
        try:
            _held[conn] = held
        except TypeError:
            _unreferenceable[id(conn)] = held
    return held


def tag_key_for(conn: RedisClient, write: bool) -> bytes:
    """The tag key to make ``conn``'s deployment's keys with, checking the marker when due
    (see the module docstring). ``write``: the caller is about to write, so it may make the
    tag key and the marker, put them back after a loss, and note the loss."""
    held = _state(conn)
    if _due(held, write):
        with held.lock:
            if _due(held, write):  # not checked meanwhile by another thread
                _check(conn, held, write)
    pinned = get_settings().tag_key
    if pinned:
        return pinned.encode()
    return held.tag_key if held.tag_key is not None else _throwaway_key()


def confirm_written(conn: RedisClient, used: bytes) -> None:
    """After a write whose keys were made with tag key ``used``: return when it is still the
    deployment's (one GET), else check the deployment now, putting ``used`` back if Redis has
    none, and raise ``TagKeyChanged`` when another tag key won (the write is invisible and is to
    be made again). Between two checks a process writes with the tag key it holds, so without
    this a process that never held one could make a new key after a loss while another still
    wrote under the old one, and split the figures."""
    if get_settings().tag_key:
        return
    found = conn.get(tag_key_name())
    if found is not None and as_str(found).encode() == used:
        return
    held = _state(conn)
    with held.lock:
        _check(conn, held, write=True)
    if held.tag_key != used:
        raise TagKeyChanged(
            f"a write was made with a tag key Redis no longer holds (its data was lost and "
            f"{tag_key_name()} made again by another process): it is to be made again"
        )


def _due(held: Held, write: bool) -> bool:
    """A check is due every CHECK_EVERY seconds, and before a writer's first write."""
    return time.monotonic() - held.checked_at >= CHECK_EVERY or (write and held.deployment_id is None)


def _throwaway_key() -> bytes:
    """A key no data is under: what a reader uses while the deployment has no tag key."""
    return secrets.token_hex(16).encode()


def queue_read(pipe: Any) -> None:
    """Queue the reads of the tag key and the marker on ``pipe`` (two replies: ``parse`` them)."""
    pipe.get(tag_key_name())
    pipe.hgetall(marker_name())


def parse(tag: Any, marker: Any) -> tuple[bytes | None, dict[str, str]]:
    """The replies of ``queue_read`` as (tag key or None, marker fields as text)."""
    return (None if tag is None else as_str(tag).encode()), {as_str(k): as_str(v) for k, v in marker.items()}


def _read(conn: RedisClient) -> tuple[bytes | None, dict[str, str]]:
    pipe = read_pipeline(conn)
    queue_read(pipe)
    return parse(*pipe.execute())


def _check(conn: RedisClient, held: Held, write: bool) -> None:
    if write and not held.server_checked:  # once per client: never a half-applied write on Redis 6.0
        server.refuse_too_old(conn)
        held.server_checked = True
    tag, marker = _read(conn)
    if marker.get("id"):
        _refuse_other_layout(marker)  # before anything is written
    pinned = get_settings().tag_key
    if write and (not marker.get("id") or tag is None):
        tag, marker = _make(conn, held, tag, marker)
    if pinned and tag is not None and tag != pinned.encode():
        raise TagKeyMismatch(tag_key_mismatch_message())
    elif not marker.get("id") and held.deployment_id is not None:
        log.error(
            "counters-tasks: the deployment marker %s is gone from Redis (its data was lost?); "
            "the next write puts it back",
            marker_name(),
        )
    if marker.get("id"):
        _refuse_other_layout(marker)
        if held.deployment_id is not None and marker["id"] != held.deployment_id:
            log.error(
                "counters-tasks: Redis holds another deployment than before (%s, was %s): its data was "
                "lost or replaced at %s; this process now uses its tag key",
                marker["id"],
                held.deployment_id,
                marker.get("lost_at", "an unknown time"),
            )
            if write and "lost_at" not in marker:
                _record_loss(conn, held.deployment_id)
        held.deployment_id = marker["id"]
    held.marker = marker
    if tag is not None:
        if held.tag_key is not None and tag != held.tag_key:
            log.error("counters-tasks: the deployment's tag key changed in Redis; this process now uses it")
        held.tag_key = tag
    # a reader of a deployment with no tag key yet looks again on its next call
    held.checked_at = time.monotonic() if held.tag_key is not None or pinned else float("-inf")


def _make(
    conn: RedisClient, held: Held, tag: bytes | None, marker: dict[str, str]
) -> tuple[bytes | None, dict[str, str]]:
    """Make, or put back, the tag key (the pinned one, else the one this process holds, else a
    new one) and the marker: SET NX and HSETNX, so concurrent writers end on one of each."""
    pinned = get_settings().tag_key
    if tag is None:
        if held.tag_key is not None:
            log.error(
                "counters-tasks: the tag key %s is gone from Redis; putting back the one this process holds",
                tag_key_name(),
            )
        made = pinned.encode() if pinned else held.tag_key or secrets.token_hex(16).encode()
        conn.set(tag_key_name(), made, nx=True)
    name = marker_name()
    if not marker.get("id") and conn.hsetnx(name, "id", secrets.token_hex(8)):
        fields: dict[FieldT, EncodableT] = {
            "layout": LAYOUT,
            "created": repr(time.time()),
            "created_by": process_name(),
        }
        if held.deployment_id is not None:  # this process saw the deployment before: its data went
            fields.update(lost_at=repr(time.time()), lost_by=process_name(), previous=held.deployment_id)
            log.error(
                "counters-tasks: Redis lost the deployment's data (its marker %s is gone); figures "
                "before now are lost. The tag key is put back; recorded as a data loss.",
                name,
            )
        conn.hset(name, mapping=fields)
    return _read(conn)


def _record_loss(conn: RedisClient, previous: str) -> None:
    conn.hset(marker_name(), mapping={"lost_at": repr(time.time()), "lost_by": process_name(), "previous": previous})


def _refuse_other_layout(marker: dict[str, str]) -> None:
    layout = int(marker.get("layout") or LAYOUT)
    if layout != LAYOUT:
        raise LayoutMismatch(layout_message(layout))


def tag_key_mismatch_message() -> str:
    return (
        f"COUNTERS_TAG_KEY is set here to another tag key than the deployment's in Redis ({tag_key_name()}): "
        f"this process would read zeros and write where no reader looks. Use the writers' value (the stack of "
        f"`counters-tasks run` keeps it in .counters-tasks/tag-key) or unset COUNTERS_TAG_KEY here: without it, "
        f"the key is read from Redis"
    )


def hidden_message() -> str:
    return (
        f"Redis holds a deployment (its marker {marker_name()}) but no tag key ({tag_key_name()}), and "
        f"COUNTERS_TAG_KEY is not set here: this process cannot see its data and reads zeros. Its writers pin "
        f"COUNTERS_TAG_KEY (an older counters-tasks did not keep a pinned key in Redis, or the key was deleted): "
        f"set the writers' COUNTERS_TAG_KEY here (`counters-tasks run` keeps it in .counters-tasks/tag-key), or "
        f"let a writer of this version write once, which puts the key in Redis"
    )


def layout_message(found: int) -> str:
    if found > LAYOUT:
        return (
            f"Redis holds the counters in key layout {found}, newer than this counters-tasks's layout "
            f"{LAYOUT}: upgrade counters-tasks in every process of the deployment"
        )
    return (
        f"Redis holds the counters in key layout {found}, older than this counters-tasks's layout "
        f"{LAYOUT}: stop the workers and run `counters-tasks migrate`"
    )


def upgrade(conn: RedisClient, now: float | None = None) -> Upgrade | None:
    """The step from layout 1 to 2 (``Upgrade``) while its layout-1 markers may still live, as
    this process last read the marker (every CHECK_EVERY seconds, on its Redis use); else None."""
    marker = _state(conn).marker
    if not marker.get("migrated_at") or not marker.get("layout1_dedupe_ttl"):
        return None
    migrated_at = float(marker["migrated_at"])
    until = migrated_at + int(marker["layout1_dedupe_ttl"])
    if (time.time() if now is None else now) >= until:
        return None
    return Upgrade(migrated_at, until, marker.get("layout1_client_tables") == "on")


def ensure(conn: RedisClient) -> dict[str, str]:
    """Check the deployment at once as a writer (making its marker if new): what a worker does
    when it starts. Raises ``LayoutMismatch``; returns the marker."""
    held = _state(conn)
    with held.lock:
        _check(conn, held, write=True)
    return _read(conn)[1]


def status(conn: RedisClient, now: float | None = None) -> dict[str, Any]:
    """The deployment as health and ``/metrics`` report it (``describe``), read now."""
    return describe(*_read(conn), now=now)


def describe(tag: bytes | None, marker: dict[str, str], now: float | None = None) -> dict[str, Any]:
    """``ok`` (the layout is this package's, this process can see the data, and no data loss
    within LOSS_REPORTED_FOR), ``layout`` (None: no marker yet), ``lost_at`` (the last data loss
    detected, or None), ``recent_loss``, ``layout_ok``, ``has_tag_key``, ``visible`` (this
    process reads the data that is there: its pin, if any, is the deployment's key, and without
    a pin Redis holds the key of a deployment that has a marker), ``problem`` (why not, or None)
    and ``warning`` (a pinned key Redis does not hold: processes without the pin see nothing)."""
    now = time.time() if now is None else now
    lost_at = float(marker["lost_at"]) if marker.get("lost_at") else None
    layout = int(marker["layout"]) if marker.get("layout") else None
    pinned = get_settings().tag_key
    problem = warning = None
    if pinned and tag is not None and tag != pinned.encode():
        problem = tag_key_mismatch_message()
    elif not pinned and tag is None and marker.get("id"):
        problem = hidden_message()
    elif pinned and tag is None and marker.get("id"):
        warning = (
            f"Redis holds no tag key ({tag_key_name()}): processes without COUNTERS_TAG_KEY read zeros "
            f"until a writer of this version writes (it puts the key back)"
        )
    recent_loss = lost_at is not None and now - lost_at < LOSS_REPORTED_FOR
    return {
        "id": marker.get("id"),
        "layout": layout,
        "package_layout": LAYOUT,
        "layout_ok": layout in (None, LAYOUT),
        "created": float(marker["created"]) if marker.get("created") else None,
        "has_tag_key": tag is not None or bool(pinned),
        "visible": problem is None,
        "problem": problem,
        "warning": warning,
        "lost_at": lost_at,
        "lost_by": marker.get("lost_by"),
        "recent_loss": recent_loss,
        "ok": layout in (None, LAYOUT) and problem is None and not recent_loss,
    }


def migrate(conn: RedisClient) -> str:
    """Move the deployment's data to this package's layout, step by step (``MIGRATIONS``).
    Returns what was done; raises ``LayoutMismatch`` when Redis is newer than the package or a
    step is missing. Run it with the workers stopped."""
    tag, marker = _read(conn)
    adopted = ""
    if not marker.get("id"):
        if tag is None:
            return "nothing to migrate: this Redis holds no counters-tasks deployment yet"
        # the layout of 0.1 without its marker: marked as layout 1, then moved on step by step
        if conn.hsetnx(marker_name(), "id", secrets.token_hex(8)):
            conn.hset(marker_name(), mapping={"layout": 1, "created": repr(time.time()), "created_by": process_name()})
        marker, adopted = _read(conn)[1], "a deployment of 0.1 found (marker written, layout 1); "
    layout = int(marker.get("layout") or LAYOUT)
    if layout > LAYOUT:
        raise LayoutMismatch(layout_message(layout))
    done = []
    for step in range(layout, LAYOUT):
        if step not in MIGRATIONS:
            raise LayoutMismatch(f"no migration from key layout {step} to {step + 1} in this counters-tasks")
        MIGRATIONS[step](conn)
        conn.hset(marker_name(), "layout", step + 1)
        done.append(f"{step} -> {step + 1}")
    if not done:
        return f"{adopted}the deployment is at layout {LAYOUT}: nothing to migrate"
    return f"{adopted}migrated the key layout {', '.join(done)}"


DEPLOYMENT = table.register(
    table.Table(
        name="deployment",
        what="the deployment's tag key (every hash tag is made with it) and its marker (id, key layout, losses)",
        module=__name__,
        keys=(table.StoredKey("ct:tagkey", "STRING"), table.StoredKey("ct:deployment", "HASH")),
        tag="none",
        fed_by=(),
        writers=("the deployment's first write (keys.bound(conn, write=True))", "counters-tasks migrate"),
        readers=("every process, every 2 s of its Redis use", "health"),
        retention=table.Retention("never deleted"),
        erasure=table.Erasure.none("a key and the deployment's history only"),
    )
)
"""The deployment's keys (``core.table``)."""
