"""counters_tasks.integrations: the middleware."""
