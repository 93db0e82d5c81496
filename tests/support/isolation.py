"""What one test leaves in this process that the next would see, undone (``tests/conftest.py``'s
``isolated_app_and_recorder`` runs these around every test).

The package's Celery app reads its configuration once, from ``counters_tasks.worker.celery_defaults``,
which reads the settings when first imported, and makes its broker pool once: a test that points
``CELERY_BROKER_URL`` at a dead or private broker and uses the app froze that broker into it for
every later test ("Connection refused" in tests/worker/test_batch_apply.py run after
tests/test_recorder.py). The process's shared ``VisitRecorder`` outlives the test too: a test that
closes it (as a SIGTERM does) left later tests a closed one.
"""

from __future__ import annotations

import sys

from celery.app.base import PendingConfiguration
from celery.app.utils import Settings
from kombu import pools

from counters_tasks.app import PACKAGE_DEFAULTS, package_app
from counters_tasks.recorder import renew_shared_recorder, shared_recorder

CONFIG_MODULES = (PACKAGE_DEFAULTS, "celeryconfig")
"""The modules the app may be configured from (each reads the settings at import): forgotten with
the configuration, so the next one is read from the settings of that time."""


def forget_app_configuration() -> None:
    """The package's Celery app as if never configured: its next use reads the configuration from
    the settings of that moment (a test that sets ``CELERY_BROKER_URL`` before using the app, as
    the RabbitMQ tests do, gets its broker; any later test gets its own settings' broker again),
    and makes a new broker pool.

    Celery has no public way back, so this does what its constructor and its after-fork reset do:
    kombu's registry of pools (by broker) closed and emptied (``kombu.pools.reset``), the app's
    broker pool and AMQP helper (its queues, router and producer pool) dropped, and a pending
    configuration in place of the loaded one, holding only the constructor's own arguments
    (``include``): a change a test made to ``app.conf`` before it was loaded is not kept for the
    next one, and the package's ``on_configure`` handler chooses the module again."""
    app = package_app()
    pools.reset()
    app._pool = None  # as Celery._after_fork: made again from the next configuration's broker
    del app.amqp  # a kombu cached_property: made again, bound to the new configuration
    app._preconf = {key: value for key, value in app._preconf.items() if key in app._preconf_set_by_auto}
    app.conf = Settings(PendingConfiguration(app._preconf, app._finalize_pending_conf), prefix=app.namespace)
    app.configured = False
    for name in CONFIG_MODULES:
        sys.modules.pop(name, None)


def renew_the_shared_recorder(timeout: float = 2.0) -> bool:
    """Close the process's shared recorder (sending what it holds, ``timeout`` seconds at most) and
    put a new one in its place, so the next test starts with an empty, open one; True when it had
    nothing left unsent."""
    current = shared_recorder()
    sent_all = current.close(timeout=timeout)
    renew_shared_recorder(current)
    return sent_all
