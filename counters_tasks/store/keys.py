"""The one place where Redis key names are made.

Every key starts with ``COUNTERS_KEY_PREFIX``. Keys that one Lua call touches together share a
hash tag ``{...}`` derived from a hash of the user string (a counter name, board, day) keyed
with the deployment's tag key, so on Redis Cluster each call stays in one slot, load spreads
over slots, and no client can compute, let alone pick, the slot of a path it sends. The tag key
is generated once per deployment by its first writer and kept in Redis (``tag_key_name``,
``store.deployment``; ``COUNTERS_TAG_KEY`` pins it), independent of ``COUNTERS_SECRET``, so rotating the secret moves no key. Entry points
that are given a client make their keys within ``bound(conn)`` (``bound(conn, write=True)`` to
write, calling ``confirm_written`` after); a key made outside any raises ``DeploymentNotBound``
unless ``COUNTERS_TAG_KEY`` pins the tag key. User strings that appear in a key at all appear percent-escaped after the tag, for
readability only. ``docs/keys.md`` documents every key made here.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from datetime import date
from urllib.parse import quote

from ..core.settings import get_settings
from ..errors import DeploymentNotBound
from .client import RedisClient
from .deployment import confirm_written, marker_name, tag_key_for, tag_key_name  # noqa: F401  (made there)

TAG_GROUPS = 256
"""Counters, and apart from them paths, hash into this many tag groups. A batch then makes one
Lua call (and one dedupe marker) per group it touches rather than one per counter or path,
while the load still spreads over 256 slots of each kind."""


def prefix() -> str:
    return get_settings().key_prefix


@functools.lru_cache(maxsize=8192)
def escape(text: str) -> str:
    """Percent-escape a user string for use inside a key (braces, spaces, ``*``... never raw)."""
    return quote(text, safe="/:@!$&'()+,;=-._~")


# --- the deployment's tag key ---------------------------------------------------------------

_bound: ContextVar[tuple[str, bytes] | None] = ContextVar("counters_tasks_deployment", default=None)
"""(key prefix, tag key) of the deployment bound by the innermost ``bound`` block, if any."""


@contextlib.contextmanager
def bound(conn: RedisClient, write: bool = False) -> Iterator[bytes]:
    """Within the block, keys are made with the tag key of ``conn``'s deployment
    (``deployment.tag_key_for``: read from Redis, checked every few seconds, made only by a
    writer; ``COUNTERS_TAG_KEY`` when set), which the block is given. ``write``: the block
    writes (then it calls ``confirm_written`` with the key once the write is made). Every entry
    point given a client opens one; the binding ends with the block (the one before it is back),
    so a function that forgot its own cannot make keys with another deployment's."""
    key = tag_key_for(conn, write)
    token = _bound.set((prefix(), key))
    try:
        yield key
    finally:
        _bound.reset(token)


def tag_key() -> bytes:
    """The key of every hash tag: the deployment of the innermost ``bound`` block, else the
    pinned ``COUNTERS_TAG_KEY`` (the same for every deployment this process reaches: each
    ``bound`` checks that Redis holds no other). Neither: ``DeploymentNotBound``, never a guess
    (the keys of another deployment would read zeros and write where no reader looks)."""
    current = _bound.get()
    if current is not None and current[0] == prefix():
        return current[1]
    pinned = get_settings().tag_key
    if pinned:
        return pinned.encode()
    raise DeploymentNotBound(
        "a key was made with no deployment bound: open keys.bound(conn) around the code that makes "
        "keys (every public function given a client does), or pin COUNTERS_TAG_KEY"
    )


def digest(kind: str, text: str, size: int = 8) -> bytes:
    """``size`` bytes of BLAKE2b of ``text``, keyed with the tag key, personalized by ``kind``."""
    return _digest(tag_key(), kind, text, size)


def _digest(key: bytes, kind: str, text: str, size: int) -> bytes:
    return hashlib.blake2b(
        text.encode("utf-8", "surrogatepass"), digest_size=size, key=key, person=kind.encode()[:16]
    ).digest()


def group_tag(letter: str, kind: str, text: str) -> str:
    """The tag of the group (one of TAG_GROUPS) that a user string of one kind hashes into."""
    return _group_tag(tag_key(), letter, kind, text)


@functools.lru_cache(maxsize=65536)
def _group_tag(key: bytes, letter: str, kind: str, text: str) -> str:
    return f"{letter}{int.from_bytes(_digest(key, kind, text, 4), 'big') % TAG_GROUPS}"


def hash_tag(kind: str, text: str) -> str:
    """The hash tag (without braces) for one user string of one kind: 16 hex digits."""
    return digest(kind, text).hex()


def chunk_ids(message_id: str | None, count: int, separator: str = "#") -> list[str | None]:
    """The dedupe ids of the ``count`` parts of one message (chunks of a batch, calls of a
    chunk): ``<message id><separator><n>``, the same every time the message is delivered.
    A message without an id has parts without ids (no dedupe)."""
    return [None if message_id is None else f"{message_id}{separator}{n}" for n in range(count)]


# --- sites ------------------------------------------------------------------------------------

SITE_SEPARATOR = "\x1f"
"""Between a site's name and a user string in a scoped name: a control character, which no name,
path or board may hold (``core.validation``), so a scoped name never equals a user's own."""


def scoped(site: str, text: str) -> str:
    """``text`` (a counter name, path, board, day) of site ``site`` (a scope, ``core.sites``):
    ``text`` itself for the default site (the keys of a one-site deployment), else
    ``<site>\x1f<text>`` (``<site>%1F<text>`` in a key): its own keys, hashed into their own tags."""
    return f"{site}{SITE_SEPARATOR}{text}" if site else text


def unscoped(site: str, name: str) -> str | None:
    """The user string of a scoped name when it belongs to site ``site``, else None."""
    if not site:
        return None if SITE_SEPARATOR in name else name
    head = f"{site}{SITE_SEPARATOR}"
    return name[len(head) :] if name.startswith(head) else None


# --- worker batches of per-item messages ---------------------------------------------------

CLAIM_GROUPS_CLUSTER = 16
"""Claim groups on Redis Cluster (one on a single server): a worker batch is claimed, and applied,
as one sub-batch per group its message ids hash into, each sub-batch in one slot."""


def claim_group(message_id: str, groups: int) -> int:
    """The claim group of a message id (0 when there is one group)."""
    return 0 if groups == 1 else int.from_bytes(digest("claim", message_id, 4), "big") % groups


def message_claim(message_id: str, group: int) -> str:
    """STRING: the id of the worker batch that applies this per-item message (a TTL)."""
    return f"{prefix()}claim:{{m{group}}}:{escape(message_id)}"


def batch_journal(batch_id: str, group: int) -> str:
    """STRING: the entries (JSON) a worker batch claimed, written with its claims, deleted once it
    is applied (a TTL otherwise)."""
    return f"{prefix()}journal:{{m{group}}}:{escape(batch_id)}"


# --- multi-precision counters -------------------------------------------------------------


def counter_tag(name: str) -> str:
    return group_tag("c", "counter", name)


def counter_member(name: str) -> str:
    """How a counter is named inside its group's due index (the escaped name, as in its key)."""
    return escape(name)


def counter_hash(name: str, *, tag: str | None = None) -> str:
    """HASH of one counter, every precision: field ``bucket_start // precision * 10 + precision index`` ->
    total (an integer field, so a small hash stays a compact listpack)."""
    return f"{counter_hash_head(tag or counter_tag(name))}{counter_member(name)}"


def counter_hash_head(tag: str) -> str:
    """What a counter's hash name is before its escaped name (the cleaner builds names from it)."""
    return f"{prefix()}cnt:{{{tag}}}:h:"


DUE_SUBSETS = 64
"""Each counter group's due index is split into this many ZSETs (by a hash of the name), so each
stays under 128 members, a compact listpack, up to ~2 million counters (~35 bytes a counter
instead of ~120 in a skiplist)."""


def counter_subset(name: str) -> int:
    """Which of its group's due ZSETs a counter is in."""
    return digest("due", name, 2)[1] % DUE_SUBSETS


def counter_due(tag: str) -> str:
    """ZSET: the group's due summary, subset number -> the earliest due time in that subset."""
    return f"{prefix()}cnt:{{{tag}}}:due"


def counter_due_head(tag: str) -> str:
    """What a group's due ZSETs are named before their subset number."""
    return f"{prefix()}cnt:{{{tag}}}:due:"


def counter_due_subset(tag: str, subset: int) -> str:
    """ZSET of the counters of one subset of a group that hold samples: escaped name -> the
    earliest time one of its samples leaves the window (what the cleaner takes, and what
    ``known_counters`` lists)."""
    return f"{counter_due_head(tag)}{subset}"


def counter_scan(tag: str) -> str:
    """HASH escaped counter name -> the HSCAN cursor where the cleaner goes on in a counter too
    big to clean in one call (back-filled samples); the field goes when its scan ends."""
    return f"{prefix()}cnt:{{{tag}}}:scan"


CounterWriteKeys = tuple[str, str, str, str, int]
"""What a write of one counter names (``counter_write_keys``): its tag group, hash, due ZSET,
member in that ZSET and subset number."""


def counter_write_keys(name: str) -> CounterWriteKeys:
    """What a write of counter ``name`` needs: its tag group, its hash, its due ZSET, its member
    there and its subset number. Cached: this is the hot path of every write."""
    return _counter_write_keys(prefix(), tag_key(), name)


@functools.lru_cache(maxsize=65536)
def _counter_write_keys(_prefix: str, _key: bytes, name: str) -> CounterWriteKeys:
    tag, subset = counter_tag(name), counter_subset(name)
    return tag, counter_hash(name, tag=tag), counter_due_subset(tag, subset), counter_member(name), subset


def counter_groups() -> list[str]:
    """Every counter tag group (``TAG_GROUPS`` of them)."""
    return [f"c{n}" for n in range(TAG_GROUPS)]


def counter_seen(message_id: str, *, tag: str) -> str:
    """STRING marker: this message was already applied to the counters of this tag group
    (dedupe, with a TTL)."""
    return f"{prefix()}cnt:{{{tag}}}:seen:{escape(message_id)}"


def import_ledger() -> str:
    """HASH ``c:<chunk digest>`` or ``v:<visit digest>`` -> epoch seconds when ``counters-tasks
    import`` applied it: what a later import of the same lines skips (one slot, ``{imports}``)."""
    return f"{prefix()}import:{{imports}}"


def refusal_counts() -> str:
    """HASH reason -> items refused for it (bad input, closed day, future, board settings, malformed)."""
    return f"{prefix()}refused:{{refused}}"


def refusal_seen(message_id: str) -> str:
    """STRING marker: this message's refusals were counted (dedupe, with a TTL)."""
    return f"{prefix()}refused:{{refused}}:seen:{escape(message_id)}"


def skip_counts() -> str:
    """HASH "<route>:<reason>" -> requests that were not page views (``skips``: the middleware's,
    sent with the recorder's batches, and the importer's lines)."""
    return f"{prefix()}skipped:{{skipped}}"


def skip_day_counts(day: date, site: str = "") -> str:
    """HASH "<route>:<reason>" -> requests of one site's local day that were not page views
    (``skips``; kept COUNTERS_DAY_TOTALS_DAYS like the day's totals): in the ``{skipped}`` slot,
    so one call adds a message's skips to every day it names and to the all-time counts."""
    return f"{prefix()}skipped:{{skipped}}:day:{day_label(day, site)}"


def skip_seen(message_id: str) -> str:
    """STRING marker: this message's skip counts were added (dedupe, with a TTL)."""
    return f"{prefix()}skipped:{{skipped}}:seen:{escape(message_id)}"


def throughput() -> str:
    """HASH of the workers' cumulative totals (``counters_tasks.throughput``): ``applied:<kind>``,
    ``duplicate:<kind>``, ``batch:<kind>:<bucket>``, ``batch_sum:<kind>``, ``newest_ts``."""
    return f"{prefix()}throughput:{{throughput}}"


def dead_letters() -> str:
    """LIST on the broker: the dead letters, one a message set aside (newest first, COUNTERS_DEAD_LETTER_MAX)."""
    return f"{prefix()}dead"


def dead_letter_reasons() -> str:
    """HASH on the broker: reason -> messages ever set aside for it."""
    return f"{prefix()}dead:reasons"


def lock(job: str) -> str:
    """STRING lock held while a beat job runs (with a TTL)."""
    return f"{prefix()}lock:{job}"


def job_stats(job: str) -> str:
    """HASH about the last run of a beat job (when, how long, result)."""
    return f"{prefix()}job:{job}"


# --- sliding-window rankings --------------------------------------------------------------
# Every key of one board shares the board's hash tag, so each ranking script stays in one slot.
# The slot hashes are named ``ranking_slot_parts(...)[0] + str(slot) + [1]``: the rotation and
# read scripts build them from the slot index inside the call (same tag, so same cluster slot).


def board_tag(name: str) -> str:
    return hash_tag("board", name)


def ranking_meta(name: str, *, tag: str | None = None) -> str:
    """HASH of one board: fixed settings (period, interval), watermark, rotation point, stats."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:meta:{escape(name)}"


def ranking_top(name: str, *, tag: str | None = None) -> str:
    """ZSET member -> minus its total over the live slots (so ZRANGE gives the ranking order)."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:top:{escape(name)}"


def ranking_slots(name: str, *, tag: str | None = None) -> str:
    """ZSET of the slot numbers (score = slot) whose hashes are live: the board's slot index."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:slots:{escape(name)}"


def ranking_slot_parts(name: str, *, tag: str | None = None) -> tuple[str, str]:
    """The two halves of a slot hash's name, around the slot number."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:s:", f":{escape(name)}"


def ranking_slot(name: str, slot: int, *, tag: str | None = None) -> str:
    """HASH member -> amount added during one time slot of one board (with a safety-net TTL)."""
    head, tail = ranking_slot_parts(name, tag=tag)
    return f"{head}{int(slot)}{tail}"


def ranking_rebuild_top(name: str, *, tag: str | None = None) -> str:
    """ZSET: the totals being recomputed by a rebuild (renamed over the top ZSET when done)."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:rebuild:{escape(name)}"


def ranking_rebuild_done(name: str, *, tag: str | None = None) -> str:
    """SET: the members a rebuild has computed so far."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:rebuilt:{escape(name)}"


def ranking_seen(name: str, message_id: str, *, tag: str | None = None) -> str:
    """STRING marker: this message was already applied to this board (dedupe, with a TTL)."""
    t = tag or board_tag(name)
    return f"{prefix()}rank:{{{t}}}:seen:{escape(message_id)}"


BOARD_REGISTRY_SHARDS = 16
"""The board registry is split over this many zsets (each its own slot) to spread writes."""


def board_registry_shard_of(name: str) -> int:
    return digest("boards", name, 2)[0] % BOARD_REGISTRY_SHARDS


def board_registry(shard: int) -> str:
    """ZSET of board names (score 0), one of BOARD_REGISTRY_SHARDS: what the rotation job walks."""
    return f"{prefix()}boards:{{b{shard}}}"


def board_registries() -> list[str]:
    """Every shard of the board registry."""
    return [board_registry(shard) for shard in range(BOARD_REGISTRY_SHARDS)]


# --- site PV/UV --------------------------------------------------------------------------
# The site's tables make their own keys (``counters_tasks.sitestats``: a module a table, its slots
# in ``sitestats.slots``); what stays here is what other keys share: a day's label (the uniques'
# and skips' days too), a path's digest (a day's pairs, a page's scope) and the site slots'
# dedupe markers.


def day_label(day: date, site: str = "") -> str:
    """How a site's day appears in its keys (and is hashed into their tag): ``YYYY-MM-DD``, after
    ``<site>%1F`` for a site other than the default one."""
    return escape(scoped(site, day.isoformat()))


def site_seen(message_id: str, *, tag: str) -> str:
    """STRING marker: this message was already applied in this site slot (dedupe, with a TTL)."""
    return f"{prefix()}site:{{{tag}}}:seen:{escape(message_id)}"


def path_digest(path: str) -> str:
    """8 characters naming a path inside a day's pairs SET (48 bits of a hash: two paths of one
    day share it with odds of about one in 10^8 at a million paths)."""
    return _path_digest(tag_key(), path)


@functools.lru_cache(maxsize=65536)
def _path_digest(key: bytes, path: str) -> str:
    return base64.urlsafe_b64encode(_digest(key, "pair", path, 6)).decode()


def path_seen(message_id: str, *, tag: str) -> str:
    """STRING marker: this message was already applied to the paths of this tag group (dedupe, TTL)."""
    return f"{prefix()}path:{{{tag}}}:seen:{escape(message_id)}"


# --- visitors right now (``counters_tasks.live``) -------------------------------------------


def live_tag(site: str = "") -> str:
    """One slot per site for its minutes, so ``PFCOUNT`` of a window is one command anywhere."""
    return hash_tag("live", scoped(site, "now"))


def live_minute(site: str, minute: int) -> str:
    """HLL of the visitor ids of site ``site`` (a scope) seen in minute ``minute`` (epoch // 60),
    kept a few minutes (``live.KEEP_SECONDS``)."""
    return f"{prefix()}live:{{{live_tag(site)}}}:{escape(scoped(site, str(int(minute))))}"


# --- daily unique visitors -------------------------------------------------------------
# One slot per day (tag of the day): the count, the expected figure and every shard of that day,
# so SADD and INCR run in one Lua call.


def uniques_tag(day: date, site: str = "") -> str:
    return hash_tag("uniques", scoped(site, day.isoformat()))


def uniques_count(day: date, *, tag: str | None = None, site: str = "") -> str:
    """STRING: exact number of distinct session ids seen on ``day``."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:count:{day_label(day, site)}"


def uniques_expected(day: date, *, tag: str | None = None, site: str = "") -> str:
    """STRING: the day's expected-uniques figure, fixed once (first writer wins)."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:expected:{day_label(day, site)}"


def uniques_shard(day: date, shard: int, *, tag: str | None = None, site: str = "") -> str:
    """SET of at most 512 integer ids (so an intset); a full shard continues in levels of sets
    (``uniques_level_set``, made inside ``unique_visit.lua``)."""
    [key] = uniques_shards(day, [shard], tag=tag, site=site)
    return key


def uniques_shards(day: date, shards: Iterable[int], *, tag: str | None = None, site: str = "") -> list[str]:
    """The ``uniques_shard`` keys of ``shards`` of one day, the day's part of them made once (a
    call names up to 64)."""
    head = f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:shard:{day_label(day, site)}:"
    return [f"{head}{shard}" for shard in shards]


def uniques_level_set(shard_key: str, level: int, index: int) -> str:
    """SET of at most 512 ids: set ``index`` (0 .. 2^level - 1) of level ``level`` of a shard."""
    return f"{shard_key}:L{level}:{index}"


def uniques_levels(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH shard number -> the deepest level of sets that shard of ``day`` uses (absent: none)."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:levels:{day_label(day, site)}"


def uniques_overflow(day: date, *, tag: str | None = None, site: str = "") -> str:
    """HASH shard number -> how many overflow sets ``<shard key>:<k>`` that shard of ``day`` has:
    the layout of 0.1, still read (never written) until those days expire."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:overflow:{day_label(day, site)}"


def uniques_open(day: date, *, tag: str | None = None, site: str = "") -> str:
    """STRING: the epoch second the day's shards go, living until then; a day with a count but
    without it is closed."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:open:{day_label(day, site)}"


def uniques_seen(day: date, message_id: str, *, tag: str | None = None, site: str = "") -> str:
    """STRING marker: this message was already applied to this day's uniques (dedupe, TTL)."""
    return f"{prefix()}uniq:{{{tag or uniques_tag(day, site)}}}:seen:{escape(message_id)}"


# --- dashboard API tokens ---------------------------------------------------------------


def api_tokens() -> str:
    """HASH of the dashboard's read-only API tokens: SHA-256 (hex) of a token -> JSON ``{name,
    created, scope, site}``; never a token itself (``ops.views``: created, listed, revoked by
    ``counters-tasks tokens``, one HGET per request that presents one)."""
    return f"{prefix()}tokens:{{tokens}}"
