"""Celery configuration of counters-tasks (loaded by ``counters_tasks.app`` when first used).

Values come from the environment through ``counters_tasks.settings`` (see README, Configuration).
"""

import os
from datetime import timedelta

from celery.schedules import crontab
from kombu import Queue

from counters_tasks.settings import get_settings

_settings = get_settings()

broker_url = _settings.broker_url
broker_connection_retry_on_startup = True
# Redelivery: an unacked message comes back after this many seconds; the dedupe markers
# (COUNTERS_DEDUPE_TTL) outlive it, so a redelivered message is never applied twice.
broker_transport_options = {"visibility_timeout": 3600}

# JSON only: a pickled message is refused by the worker.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
result_accept_content = ["json"]
event_serializer = "json"

# Counting tasks return nothing worth storing.
task_ignore_result = True
result_backend = None

timezone = "UTC"
enable_utc = True

# Flower watches the workers' task events. The producer's "task-sent" event is off: it is a
# second publish per .delay() (measured: 2,700 -> 4,400 calls/s with it off) and Flower shows
# received, started and succeeded without it.
worker_send_task_events = True
task_send_sent_event = False

# Each worker process may hold this many unacknowledged messages: enough for the per-visit
# batches of record_visit (COUNTERS_WORKER_BATCH) to fill before their flush interval.
worker_prefetch_multiplier = max(4, 2 * _settings.worker_batch)

task_queues = (Queue("visits"), Queue("maintenance"))
task_default_queue = "visits"
task_routes = {
    "counters_tasks.clean_counters": {"queue": "maintenance"},
    "counters_tasks.rotate_rankings": {"queue": "maintenance"},
    "counters_tasks.precompute_expected": {"queue": "maintenance"},
}

# Each job expires before its next run is due, so a missed run is skipped, not piled up.
# COUNTERS_CLEAN_EVERY (seconds) replaces the cleaner's every-minute crontab: for tests and demos.
_clean_every = float(os.environ.get("COUNTERS_CLEAN_EVERY") or 0)

beat_schedule = {
    "clean-counters": {
        "task": "counters_tasks.clean_counters",
        "schedule": timedelta(seconds=_clean_every) if _clean_every else crontab(),  # every minute
        "options": {"expires": _clean_every or 55},
    },
    "rotate-rankings": {
        "task": "counters_tasks.rotate_rankings",
        "schedule": crontab(minute=0),  # hourly, at :00
        "options": {"expires": 3300},
    },
    # Daily at 23:00 in COUNTERS_TIMEZONE, achieved by running hourly and letting the task decide:
    # each run fixes today's figure when missing, and the run in the local 23:xx hour fixes
    # tomorrow's. Celery's crontab matches hours in the app's ``timezone`` (UTC here), and
    # ``crontab(nowfun=...)`` only changes what "now" is, not that frame, so a crontab for 23:00
    # would drift by the zone's offset and by DST; hourly runs hit local 23:xx exactly once a day
    # in every zone (half-hour offsets included), and a missed run is caught up by the next one
    # (or by the day's first counted visit, which fixes a missing figure the same way).
    "precompute-expected": {
        "task": "counters_tasks.precompute_expected",
        "schedule": crontab(minute=0),  # hourly; the task fixes tomorrow's figure at local 23:xx
        "options": {"expires": 3300},
    },
}

# Highly available beat: with COUNTERS_BEAT_SCHEDULER=redbeat (extra ``[ha]``), run a beat on
# several hosts; celery-redbeat keeps the schedule in the broker's Redis and lets only the holder
# of a lock send jobs. The holder renews it every tick (at most COUNTERS_BEAT_MAX_INTERVAL
# seconds apart); when it dies, another beat takes over within COUNTERS_BEAT_LOCK_TIMEOUT plus
# one tick. Without it, run exactly one beat (the default scheduler has no lock).
if (os.environ.get("COUNTERS_BEAT_SCHEDULER") or "").lower() == "redbeat":
    beat_scheduler = "redbeat.RedBeatScheduler"
    redbeat_redis_url = broker_url
    redbeat_key_prefix = "redbeat:"
    redbeat_redis_options = {}  # not the broker's transport options (redbeat's deprecated fallback)
    redbeat_lock_timeout = float(os.environ.get("COUNTERS_BEAT_LOCK_TIMEOUT") or 30)
    beat_max_loop_interval = float(os.environ.get("COUNTERS_BEAT_MAX_INTERVAL") or 5)
