"""counters_tasks.local: the local servers."""
