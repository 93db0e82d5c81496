"""counters_tasks.worker: batches, their consumer, dead letters."""
