"""counters_tasks.events: events with properties, goals and funnels (issue 43)."""
