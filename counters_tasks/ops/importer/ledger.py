"""The import ledger (``keys.import_ledger``): what a line's page view is, as the ledger knows it,
so that importing the same lines again counts nothing twice, also long after the message ids'
dedupe markers expired.

The ledger holds ``c:<digest>`` for a chunk of ``CHUNK`` page views all applied, and
``v:<digest>`` for each page view applied in a chunk that was not: the last chunk of an input
(fewer than ``CHUNK``; a log that has grown since is then imported for its new lines only) or a
chunk with refused lines (those are tried again by the next import, e.g. once a refusal's cause
is gone). Chunks are cut the same way only for the same sequence of page views: the same lines
with other options (``--all``, ``--format``), or behind other lines, make other chunks.

Here: a visit's identity (``canonical``: its JSON without its source), the digests of chunks and
visits (``content_digest``) and the ledger fields of a chunk's visits (``visit_fields``). The
ledger's reads and writes are ``run.Importer``'s, around each chunk it applies.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from ...core import table

SOURCE_FIELDS = frozenset({"referrer", "utm", "user_agent", "language"})
"""A visit's source and who made it: derived from the same line as the rest, so left out of what
its ids hash (a log imported before sources or user agents were kept is not counted again; its
days have none)."""


def canonical(visit: dict[str, Any]) -> str:
    """The canonical JSON of a visit dict (sorted keys, no spaces, ASCII, without its source):
    what its ids hash."""
    return json.dumps({k: v for k, v in visit.items() if k not in SOURCE_FIELDS}, sort_keys=True, separators=(",", ":"))


def content_digest(text: str) -> str:
    """32 hex digits of a BLAKE2b digest (of a chunk's or a visit's canonical text)."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16, person=b"ct-import").hexdigest()


def visit_fields(ordinal: int, texts: list[str]) -> list[str]:
    """The ledger fields of the visits of chunk number ``ordinal`` (``texts``: their canonical JSON):
    ``v:<digest of the chunk number, the visit and how many equal visits come before it in the chunk>``,
    the same for a chunk that has grown since (a log written to since its last import)."""
    seen: Counter[str] = Counter()
    fields = []
    for text in texts:
        fields.append("v:" + content_digest(f"{ordinal}\n{seen[text]}\n{text}"))
        seen[text] += 1
    return fields


IMPORT_LEDGER = table.register(
    table.Table(
        name="import_ledger",
        what="the chunks of access-log lines imported (a digest of their content each): importing again counts nothing twice",
        module=__name__,
        keys=(table.StoredKey("ct:import:{imports}", "HASH"),),
        tag="{imports}",
        fed_by=(),
        writers=("counters-tasks import",),
        readers=("counters-tasks import",),
        retention=table.Retention(
            "COUNTERS_DAY_TOTALS_DAYS after its latest import", "COUNTERS_DAY_TOTALS_DAYS", lambda s: s.day_totals_days
        ),
        erasure=table.Erasure(
            "nothing of a visitor", False, "digests of chunks of 500 lines: no line can be read back from one"
        ),
    )
)
"""The import ledger (``core.table``)."""
