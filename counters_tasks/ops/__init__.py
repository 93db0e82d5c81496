"""Operator tools: how people see and steer a deployment.

- ``cli``: the ``counters-tasks`` command (queries, ``health``, ``serve``, ``run``, ``demo``), a
  package: its read commands (``cli.queries``), those of events, goals and funnels
  (``cli.event_commands``), the others (``cli.admin``), their tables and CSV (``cli.render``);
- ``views``: the JSON-ready answers the CLI prints and the dashboard serves (one source for both);
- ``event_views``: those of events, goals and funnels (issue 43, docs/events.md), and the
  definitions' commands' text arguments parsed (a funnel step ``event:signup[plan=pro]@10m``);
- ``web`` and ``static/``: the read-only web dashboard;
- ``connections``: the rules ``serve`` keeps its connections by (idle ones cannot shut it out);
- ``health``: Redis, broker, workers, beat and the beat jobs' last runs;
- ``metrics``: the Prometheus ``/metrics`` of the dashboard server, read from Redis and the
  broker at each scrape (docs/metrics.md);
- ``tables``: the stored tables from their declarations (``core.table``): ``counters-tasks tables``
  and ``counters-tasks table NAME``;
- ``demo``: the ``make demo`` burst of simulated visits and its report;
- ``importer``: ``counters-tasks import``, access logs and JSON lines through the batches, a
  package: reading the input (``importer.reading``), the formats (``importer.formats``), the
  import ledger (``importer.ledger``), the import (``importer.run``).

The top layer: it may import every other part of the package; nothing imports it.
"""
