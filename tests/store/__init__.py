"""counters_tasks.store: client, keys, deployment, server checks, sketches."""
