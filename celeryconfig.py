"""This deployment's Celery configuration: the package's defaults, and what operators change here.

Name it explicitly, so that no other module called ``celeryconfig`` is picked up by accident:

    celery -A counters_tasks --config celeryconfig worker -Q visits,maintenance
    celery -A counters_tasks --config celeryconfig beat

docker-compose.yml's services load it so, and so does the local stack (``make run``) in this
checkout (its ``config`` line and each process's log name the file loaded).

The values below come from the environment (README, Configuration); change a setting by
assigning it after the import, e.g. ``worker_concurrency = 4``.
"""

from counters_tasks.worker.celery_defaults import *  # noqa: F403  (the package's defaults)
