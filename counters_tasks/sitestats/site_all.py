"""The site's all-time figures (``site_all``): page views and unique visitors of every site, in
SITE_SHARDS shards by visitor id (each its own slot, so no one key holds every visitor and the
hot all-time key is spread): a HASH ``pv``, ``uv`` and a SET (or HLL) of the shard's visitor ids,
never expiring. Written by ``store/lua/site_all.lua`` (``script_calls``, queued by ``site_day.queue_views``);
read by ``reads.site_visit_info``.
"""

from __future__ import annotations

from typing import Any

from ..core.table import Erasure, Retention, StoredKey, Table, register
from ..store import keys
from . import slots

SITE_SHARDS = 16
"""Site-wide all-time PV/UV is split over this many shards by visitor id (each its own slot)."""


def site_shard_of(visitor: str) -> int:
    return int(visitor) % SITE_SHARDS


def site_shard_tag(shard: int) -> str:
    """The slot of one shard of the all-time figures: the same for every site (a batch's views of
    several sites make one call a shard), each site's keys in it named for the site."""
    return keys.hash_tag("site-all", str(shard))


def site_all_totals(shard: int, site: str = "") -> str:
    """HASH pv, uv of one shard of the site's all-time totals (sum over shards = the site's)."""
    return f"{keys.prefix()}site:{{{site_shard_tag(shard)}}}:all:{keys.escape(keys.scoped(site, str(shard)))}"


def site_all_visitors(shard: int, mode: str, site: str = "") -> str:
    """SET (or HLL) of every visitor id ever seen whose id falls in this shard; never expires."""
    name = keys.escape(keys.scoped(site, str(shard)))
    return f"{keys.prefix()}site:{{{site_shard_tag(shard)}}}:{slots.uv_kind(mode)}:all:{name}"


SITE_ALL = register(
    Table(
        name="site_all",
        what="each site's page views and unique visitors of all time, in 16 shards by visitor id, "
        "with each shard's visitor ids",
        module=__name__,
        keys=(
            StoredKey("ct:site:{tag(shard)}:all:<shard>", "HASH"),
            StoredKey("ct:site:{tag(shard)}:<kind>:all:<shard>", "SET (or HLL)"),
        ),
        tag="per shard (16, every site's)",
        fed_by=("visit",),
        writers=("store/lua/site_all.lua",),
        readers=("sitestats.site_visit_info", "counters-tasks stats", "/api/stats", "counters-tasks demo"),
        retention=Retention(
            "for ever (never expires): all-time figures and visitors keep their own rule, not the retention "
            "tiers of a day's data (one visitor can be erased: forget_visitor)"
        ),
        erasure=Erasure(
            "visitor ids",
            True,
            "SREM of the visitor id from its shard's SET (shard: the id mod 16) and that shard's uv "
            "minus one when it was there (exact mode); with COUNTERS_UV_MODE=hll the shard's "
            "HyperLogLog cannot forget one visitor (an estimate, 0.81% standard error) (lua/forget_members.lua: sitestats/erase.py)",
            forget=slots.FORGET_ALL_TIME,
        ),
    )
)
"""The site's all-time figures (``core.table``)."""


def script_calls(
    by_shard: dict[int, dict[str, list[str]]], ttl: int, mode: str, message_id: str | None
) -> list[tuple[list[str], list[Any]]]:
    """The keys and arguments of one ``site_all`` call a shard of ``by_shard`` (shard -> site ->
    the visitor ids of its views, in order): a shard's slot is every site's, one call for all of
    them (``site_day.queue_views`` queues them)."""
    calls = []
    for shard, per_site in by_shard.items():
        script_keys, args = [], [ttl, mode]
        for site, ids in per_site.items():
            script_keys += [site_all_totals(shard, site), site_all_visitors(shard, mode, site)]
            args += [len(ids), *ids]
        if ttl and message_id is not None:
            script_keys.append(keys.site_seen(message_id, tag=site_shard_tag(shard)))
        calls.append((script_keys, args))
    return calls
