"""The store layer: everything that speaks to the counters' Redis.

- ``day_registry``: which site's days have data stored, per retention tier (the retention pass
  and forgetting a visitor walk it);
- ``tombstones``: the forgotten visitors' keyed digests, so that their items still on the broker
  are not counted back (``forgotten``);
- ``sweeps``: the bounded calls a table's retention sweep is made of (UNLINK or EXPIREAT in chunks,
  a HASH's sketches' HyperLogLogs found by HSCAN of it);
- ``page_sketch``: a page's visitors of a day in a few bytes (read here, written by its Lua twin),
  for a page's unique visitors over a range;
- ``client``: the per-process, connection-pooled client (single server or cluster), the
  transient errors, the read pipeline;
- ``scripts``: the Lua scripts of ``lua/`` (each with a KEYS/ARGV/returns header), loaded once
  per client, and ordered pipelines;
- ``keys``: the key schema and hash tags (documented in docs/keys.md);
- ``deployment``: the deployment's marker: its tag key (made only by writers), its key layout
  version, and a loss of Redis's data, detected and healed by every process within seconds;
- ``server``: what a server must be (Redis 6.2 or newer, ``maxmemory-policy noeviction``),
  read from INFO and judged for the worker's start, ``health`` and ``/metrics``;
- ``registry``: sharded registries of names, walked a page at a time;
- ``hll``: a client-side union of HyperLogLogs that live in different cluster slots.

It imports only ``counters_tasks.core`` and ``counters_tasks.errors``; the data modules above it
decide what to write, this layer how (the layers: docs/architecture.md).
"""
