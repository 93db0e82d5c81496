"""The package's Celery configuration (``counters_tasks.app`` loads it when first needed).

Values come from the environment through ``counters_tasks.core.settings`` (README,
Configuration). A deployment's own module (the repository's ``celeryconfig.py``, named with
``celery --config``) starts from these with ``from counters_tasks.worker.celery_defaults import *``.
"""

import ssl
from datetime import timedelta

from celery.schedules import crontab
from kombu import Queue

from ..core.settings import SOCKET_BROKER_SCHEME, get_settings, redis_py_url

_settings = get_settings()

broker_url = _settings.broker_url
broker_connection_retry_on_startup = True
# Redelivery: a message not acknowledged (its worker died, even by SIGKILL) is put back in its
# queue by any worker's restore sweep once COUNTERS_VISIBILITY_TIMEOUT (default 45 s) passed;
# the sweep runs every ``restore_interval`` (4 s by default), so it runs again within a minute.
# The longest retry countdown (30 s) is below it, and the dedupe markers (COUNTERS_DEDUPE_TTL,
# checked in settings) outlive both, so a redelivered message is never applied twice.
# See docs/reliability.md.
broker_transport_options = {
    "visibility_timeout": _settings.visibility_timeout,
    "unacked_restore_interval": _settings.restore_interval,
    "unacked_restore_throttle": 1,  # every sweep scans (the default scans every 10th)
    # a worker killed while it held the restore lock blocks sweeps until it expires
    "unacked_mutex_expire": min(300, _settings.visibility_timeout),
}
# A worker killed while taking a message (between kombu's BRPOP and its unacked entry) lost it:
# this transport pops and marks in one Lua call (counters_tasks/worker/broker.py).
if _settings.broker_url.startswith(("redis://", "rediss://")):
    broker_transport = "counters_tasks.worker.broker:Transport"
elif _settings.broker_url.startswith(SOCKET_BROKER_SCHEME + "://"):  # a unix socket: the same, see SocketTransport
    broker_url = _settings.broker_url.removeprefix("redis+")
    broker_transport = "counters_tasks.worker.broker:SocketTransport"
# rediss://: verify the server's certificate (kombu's default for rediss without options is
# CERT_NONE). ``ssl_*`` query parameters of the broker URL (e.g. ``?ssl_ca_certs=/ca.pem``)
# take precedence, as they do for the counters client (redis-py reads the same parameters).
if _settings.broker_url.startswith("rediss://"):
    broker_use_ssl = {"ssl_cert_reqs": ssl.CERT_REQUIRED}

# Every task message is checked before Celery handles it, on any broker: a malformed one is set
# aside in the dead letters, never able to stop the worker (counters_tasks/worker/consumer.py).
worker_consumer = "counters_tasks.worker.consumer:Consumer"

# JSON only: a pickled message is refused by the worker.
task_serializer = "json"
result_serializer = "json"
accept_content = ["json"]
result_accept_content = ["json"]
event_serializer = "json"

# Counting tasks return nothing worth storing: no result is kept, and an AsyncResult asked for a
# state or value says so (worker/results.py; docs/tasks.md, "What .delay() returns").
task_ignore_result = True
result_backend = "counters_tasks.worker.results:NoResults"

timezone = "UTC"
enable_utc = True

# Task events only when someone watches (Celery's own default): each message of a worker-side batch
# costs three task-event publishes (received, started, succeeded: worker/batch_consumer.py) when they are on.
# Flower turns them on in every worker when it connects (its enable_events broadcast, repeated
# every few seconds), as do `-E` and `celery control enable_events`. The producer's "task-sent"
# task event stays off: a second publish per .delay() (measured: 2,700 -> 4,400 calls/s with it off),
# and Flower shows received, started and succeeded without it.
worker_send_task_events = False
task_send_sent_event = False

# Each worker process may hold this many unacknowledged messages: enough for the per-visit
# batches of record_visit (COUNTERS_WORKER_BATCH) to fill before their flush interval. A lower
# limit only makes batches smaller: a buffer holding the whole limit is applied at once.
worker_prefetch_multiplier = max(4, 2 * _settings.worker_batch)

task_queues = (Queue("visits"), Queue("maintenance"))
task_default_queue = "visits"
task_routes = {
    "counters_tasks.clean_counters": {"queue": "maintenance"},
    "counters_tasks.rotate_rankings": {"queue": "maintenance"},
    "counters_tasks.precompute_expected": {"queue": "maintenance"},
    "counters_tasks.expire_dead_letters": {"queue": "maintenance"},
    "counters_tasks.make_day_tops": {"queue": "maintenance"},
    "counters_tasks.forget_visitor": {"queue": "maintenance"},  # an operator's erasure (worker.forget)
    "counters_tasks.apply_retention": {"queue": "maintenance"},
}

# Each job expires before its next run is due, so a missed run is skipped, not piled up.
# COUNTERS_CLEAN_EVERY (seconds) replaces the cleaner's every-minute crontab: for tests and demos.
_clean_every = _settings.clean_every

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
    "make-day-tops": {
        "task": "counters_tasks.make_day_tops",
        "schedule": crontab(minute=15),  # hourly, at :15: each site's days that ended (its own zone)
        "options": {"expires": 3300},
    },
    "expire-dead-letters": {
        "task": "counters_tasks.expire_dead_letters",
        "schedule": crontab(minute=30),  # hourly, at :30: dead letters older than COUNTERS_DEAD_LETTER_DAYS
        "options": {"expires": 3300},
    },
    "apply-retention": {
        "task": "counters_tasks.apply_retention",
        "schedule": crontab(minute=45),  # hourly, at :45: the site's days past COUNTERS_VISITOR_DAYS, _AGGREGATE_DAYS
        "options": {"expires": 3300},
    },
}

# Highly available beat: with COUNTERS_BEAT_SCHEDULER=redbeat (extra ``[ha]``), run a beat on
# several hosts; celery-redbeat keeps the schedule in the broker's Redis and lets only the holder
# of a lock send jobs. The holder renews it every tick (at most COUNTERS_BEAT_MAX_INTERVAL
# seconds apart); when it dies, another beat takes over within COUNTERS_BEAT_LOCK_TIMEOUT plus
# one tick. Without it, run exactly one beat (the default scheduler has no lock).
if _settings.beat_scheduler == "redbeat":
    beat_scheduler = "redbeat.RedBeatScheduler"
    redbeat_redis_url = redis_py_url(_settings.broker_url)  # redbeat opens it with redis-py
    redbeat_key_prefix = "redbeat:"
    redbeat_redis_options: dict[str, object] = {}  # not the broker's transport options (redbeat's deprecated fallback)
    redbeat_lock_timeout = _settings.beat_lock_timeout
    beat_max_loop_interval = _settings.beat_max_interval
