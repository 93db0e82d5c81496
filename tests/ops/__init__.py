"""counters_tasks.ops: the CLI, the importer, the dashboard and its API, metrics."""
