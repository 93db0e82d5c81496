"""Each page's all-time figures (``page_all``): a small HASH a path (scoped to its site) of
``pv``, ``uv`` and, in the exact mode, one empty field per visitor id that viewed it (an HLL
beside it in ``hll`` mode), in 256 tag groups of paths, expiring COUNTERS_PATH_KEEP_DAYS after the
path's latest view. Written by ``store/lua/path_all.lua`` (``script_calls``, queued
by ``site_day.queue_views``); read by ``reads.site_visit_info``.
"""

from __future__ import annotations

from typing import Any

from ..core import days
from ..core.settings import Settings
from ..core.table import Erasure, Retention, StoredKey, Table, register
from ..store import keys
from . import slots


def path_tag(path: str) -> str:
    return keys.group_tag("p", "path", path)


def path_totals(path: str, *, tag: str | None = None) -> str:
    """HASH of one path, all time: pv, uv, and (exact mode) one empty field per visitor id seen;
    expires COUNTERS_PATH_KEEP_DAYS after the path's latest view (0: kept for ever)."""
    return f"{keys.prefix()}path:{{{tag or path_tag(path)}}}:all:{keys.escape(path)}"


def path_visitors(path: str, *, tag: str | None = None) -> str:
    """HLL of one path's visitor ids, all time (``hll`` mode only); expires with its totals."""
    return f"{keys.prefix()}path:{{{tag or path_tag(path)}}}:hll:all:{keys.escape(path)}"


PAGE_ALL = register(
    Table(
        name="page_all",
        what="each page's page views and unique visitors of all time, with (exact mode) its visitor ids",
        module=__name__,
        keys=(
            StoredKey("ct:path:{group(path)}:all:<path>", "HASH"),
            StoredKey("ct:path:{group(path)}:hll:all:<path>", "HLL"),
        ),
        tag="per group of paths (256)",
        fed_by=("visit",),
        writers=("store/lua/path_all.lua",),
        readers=("sitestats.site_visit_info", "counters-tasks stats --path", "/api/stats?path="),
        retention=Retention(
            "COUNTERS_PATH_KEEP_DAYS after the path's latest view; for ever when 0 (all-time figures keep their own "
            "rule, not the retention tiers of a day's data)",
            "COUNTERS_PATH_KEEP_DAYS",
            lambda settings: settings.path_keep_days or None,
        ),
        erasure=Erasure(
            "visitor ids",
            True,
            "HDEL of the visitor id's field from each path's HASH (no index of a visitor's paths: a "
            "SCAN of the ct:path:* keys) and that path's uv minus one when it was there (exact mode); "
            "with COUNTERS_UV_MODE=hll a path's HyperLogLog cannot forget one visitor (an estimate, "
            "0.81% standard error) (SCAN MATCH, 500 keys a call, then lua/forget_field.lua: sitestats/erase.py)",
            forget=slots.FORGET_ALL_TIME,
        ),
    )
)
"""Each page's all-time figures (``core.table``)."""


def script_calls(
    by_group: dict[str, dict[str, list[str]]], ttl: int, settings: Settings, message_id: str | None
) -> list[tuple[list[str], list[Any]]]:
    """The keys and arguments of one ``path_all`` call a tag group of ``by_group`` (group ->
    scoped path -> the visitor ids of its views, in order; ``site_day.queue_views`` queues them)."""
    mode = settings.uv_mode
    kept = settings.path_keep_days * days.DAY
    calls = []
    for tag, per_path in by_group.items():
        script_keys = []
        args = [ttl, mode, kept, len(per_path)]
        for path, ids in per_path.items():
            script_keys.append(path_totals(path, tag=tag))
            if mode == "hll":
                script_keys.append(path_visitors(path, tag=tag))
            args += [len(ids), *ids]
        if ttl and message_id is not None:
            script_keys.append(keys.path_seen(message_id, tag=tag))
        calls.append((script_keys, args))
    return calls
