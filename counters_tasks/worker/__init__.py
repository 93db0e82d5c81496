"""The worker side: what runs inside ``celery worker`` and ``celery beat`` besides the tasks.

- ``celery_defaults``: the package's Celery configuration (queues, routes, JSON only, the beat
  schedule, reliability options), built from ``core.settings``;
- ``task_bases``: the bases of the package's tasks: ``CountingTask`` and ``counting`` (the
  delivery rules of a counting task), ``MaintenanceTask`` (a beat job), ``WorkerBatches`` (a task
  whose messages the worker buffers and applies in batches);
- ``batch_consumer``: how the worker's main process buffers those messages and runs them as
  batches (our own, replacing celery-batches): acknowledged after the batch, a task event for
  every message, and ``MaskedRequest``, which shows task arguments with IP addresses masked;
- ``batch_apply``: what a batch of per-item messages does: applied together, refused one by one;
- ``kind_tasks``: a kind's Celery tasks made from its declaration (``core.kind``);
- ``claims``: how such a batch is applied as one group and each message still at most once
  (claimed for the batch with its entries journaled, so whoever meets a message of a batch
  interrupted half way finishes the batch);
- ``broker``: the Redis broker transport that never loses a message a killed worker was taking,
  and sets aside what it cannot hand to Celery;
- ``kombu_redis_adapter``: kombu's Redis transport as ``broker`` builds on it, the one module
  that reaches kombu's private names (public hooks for the channel's consume command, one more
  connection watched by its poller);
- ``consumer``: the worker's consumer, which checks every task message before Celery handles it,
  whatever the broker, and sets aside what Celery would raise on or drop;
- ``prefork_pool_adapter``: Celery's prefork pool as the consumer closes on it, the one module that
  reaches Celery's and billiard's private names (the jobs a pool process is already taking, which
  a warm shutdown must wait for rather than drop);
- ``dead_letters``: messages set aside (undecodable, malformed, oversize, or failing for good),
  with their reasons, for operators to list, requeue or drop;
- ``maintenance``: the beat jobs' cluster-wide lock and their last-run statuses, and beat's start;
- ``retention``: the retention pass (beat's ``apply_retention``): each table's data of the site's
  days past its tier's horizon removed, a longer horizon re-timed, what it removed counted;
- ``results``: the app's result backend, which keeps none and says so when a result is asked for;
- ``forget``: ``forget_visitor``: one visitor forgotten from every table that declares a forgetter,
  with the audit of erasures (``forget_audit``);
- ``table_modules``: the data and worker modules that declare a stored table, imported for what
  walks every table (retention, forgetting a visitor).

It imports the data modules, ``store`` and ``core``; nothing here imports ``tasks``, ``app``,
``local`` or ``ops``.
"""
