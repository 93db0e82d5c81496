"""counters_tasks.core: settings, paths, sources, sites, validation."""
