"""A worker batch of per-item messages applied as one group, each message still at most once.

``record_visit`` and ``incr_ranking`` arrive one message per item. Applied each under its own
dedupe id, a visit made seven Lua calls, each with its own marker and checks (~85 Redis commands
a visit). A worker batch is now applied as a ``record_visits`` chunk is, under one id:

1. ``claim`` (Lua ``batch_claim``, one call per claim group): each message not claimed yet is
   claimed for a new batch (its claim key holds the batch id) and the entries claimed (message
   id, the prepared item as JSON) are journaled under that id, in the same step. A message
   claimed before names the batch that holds it.
2. The caller applies each batch's entries deduplicated under the batch id (its chunks and calls
   under ids made from it): the new batch, and every earlier batch named, read from its journal.
3. ``done`` deletes the journals of the batches applied in full.

Why this is exact: a batch's entries are fixed when it is claimed (its journal and its claims are
written by one script), so every application of a batch makes the same calls under the same
markers. A worker killed half way through one leaves calls made (skipped when made again) and
calls not made: the redelivery of any of its messages finds the claim and applies the batch from
its journal before that message is acknowledged. A claim whose journal is gone is a message
applied (a journal goes only once its batch was applied in full).

On one Redis server every claim and journal shares one hash tag; on Redis Cluster message ids
hash into ``CLAIM_GROUPS_CLUSTER`` groups, each claimed (and applied) as its own batch. Claims
and journals expire after ``COUNTERS_DEDUPE_TTL``, like the markers (a message redelivered later
than that is applied again; the redelivery window is far shorter).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..core import table
from ..core.settings import get_settings
from ..payloads import MARKERS
from ..store import keys
from ..store.client import RedisClient, as_str, is_cluster, read_pipeline
from ..store.scripts import WritePlan, run_script

Entry = tuple[str, Any]
"""(message id, the prepared item as JSON-able data)."""


def claim_groups(conn: RedisClient) -> int:
    return keys.CLAIM_GROUPS_CLUSTER if is_cluster(conn) else 1


def batch_group(batch_id: str) -> int:
    """The claim group of a batch (its id is ``<kind>.<group>.<random>``)."""
    return int(batch_id.split(".")[1])


def claim(conn: RedisClient, kind: str, entries: list[Entry]) -> tuple[list[tuple[str, list[Entry]]], list[str]]:
    """Claim the messages of ``entries`` for new batches of ``kind`` (one a claim group; a message
    id met twice counts once), journaling what each claimed: ``(the new batches as (batch id,
    entries claimed), the earlier batches that hold the others)``. One round trip."""
    with keys.bound(conn, write=True):  # (no tag key in a claim's keys: nothing to confirm once written)
        plan = WritePlan(conn)
        outcome = _plan_claims(plan, kind, entries)
        plan.run()
        return outcome()


def _plan_claims(
    plan: WritePlan, kind: str, entries: list[Entry]
) -> Callable[[], tuple[list[tuple[str, list[Entry]]], list[str]]]:
    """``claim``'s script calls queued on ``plan``, and how to read what they claimed once sent."""
    conn = plan.conn
    groups = claim_groups(conn)
    ttl = get_settings().dedupe_ttl
    by_group: dict[int, dict[str, Any]] = defaultdict(dict)
    for message_id, item in entries:
        by_group[keys.claim_group(message_id, groups)].setdefault(message_id, item)
    planned = [(f"{kind}.{group}.{uuid.uuid4().hex}", group, list(part.items())) for group, part in by_group.items()]

    def queue(pipe: Any) -> None:
        for batch_id, group, part in planned:
            script_keys = [keys.batch_journal(batch_id, group), *(keys.message_claim(m, group) for m, _i in part)]
            texts = [json.dumps(entry, separators=(",", ":")) for entry in part]
            run_script(conn, "batch_claim", script_keys, [ttl, batch_id, *texts], client=pipe)

    replies: list[Any] = []
    plan.add(queue, replies.extend)

    def outcome() -> tuple[list[tuple[str, list[Entry]]], list[str]]:
        new: list[tuple[str, list[Entry]]] = []
        earlier: dict[str, None] = {}
        for (batch_id, _group, part), owners in zip(planned, replies, strict=True):
            mine = [entry for entry, owner in zip(part, owners, strict=True) if not owner]
            if mine:
                new.append((batch_id, mine))
            earlier.update(dict.fromkeys(as_str(owner) for owner in owners if owner))
        return new, list(earlier)

    return outcome


def journaled(conn: RedisClient, batch_ids: list[str]) -> list[tuple[str, list[Entry]]]:
    """The earlier batches still journaled, as ``(batch id, its entries)``; one round trip (a
    batch without a journal was applied in full)."""
    if not batch_ids:
        return []
    pipe = read_pipeline(conn)
    for batch_id in batch_ids:
        pipe.get(keys.batch_journal(batch_id, batch_group(batch_id)))
    return [
        (batch_id, [(m, item) for m, item in json.loads(text)])
        for batch_id, text in zip(batch_ids, pipe.execute(), strict=True)
        if text is not None
    ]


def batches(
    conn: RedisClient, kind: str, entries: list[Entry]
) -> tuple[list[tuple[str, list[Entry]]], list[tuple[str, list[Entry]]], int]:
    """``claim`` ``entries``, then every batch to apply, as ``(batch id, its entries)``: the new
    ones, and each earlier one still journaled (its worker died before it was applied: its items
    were prepared then); and how many of ``entries`` were applied before (their batch's journal
    is gone: duplicates, for the metrics)."""
    new, earlier = claim(conn, kind, entries)
    found = journaled(conn, earlier)
    pending = {message_id for _batch, part in new + found for message_id, _item in part}
    return new, found, len({message_id for message_id, _item in entries} - pending)


def done(conn: RedisClient, batch_ids: list[str]) -> None:
    """Forget the journals of batches applied in full (one DEL a key: they may be in several slots)."""
    if not batch_ids:
        return
    pipe = read_pipeline(conn)
    for batch_id in batch_ids:
        pipe.delete(keys.batch_journal(batch_id, batch_group(batch_id)))
    pipe.execute()


CLAIMS = table.register(
    table.Table(
        name="claims",
        what="which worker batch applies a message, and each batch's journal of prepared items until it is applied",
        module=__name__,
        keys=(
            table.StoredKey("ct:claim:{m<n>}:<message id>", "STRING"),
            table.StoredKey("ct:journal:{m<n>}:<batch id>", "STRING"),
        ),
        tag="the message id's claim group",
        fed_by=(),
        writers=("store/lua/batch_claim.lua (a worker's claimed batch)", "claims.done (the journal, once applied)"),
        readers=("claims.batches (a batch retried after its worker died)",),
        retention=MARKERS.retention,  # (kept as the markers are: the window a redelivery must fall in)
        erasure=table.Erasure(
            "visitor ids in a journal's prepared visits, for the minutes a batch is being applied",
            False,
            "not by forget_visitor: a journal lives for the seconds its batch is applied (deleted then); one left "
            "by a dead worker expires with COUNTERS_DEDUPE_TTL, and the worker that finishes its batch checks "
            "each journaled item against the forgotten visitors again (store.tombstones, Kind.recheck)",
        ),
    )
)
"""The worker batches' claims and journals (``core.table``)."""
