"""What one test could leave in this process that the next would see: the package's Celery app
configured for another broker, and the process's shared ``VisitRecorder`` closed.

The package's Celery app reads its configuration once, at its first use, from the settings of
that moment, and makes its broker pool once: Celery has no public way back. So no test changes
it here: this process's app is configured once, at the first test, from the session's settings
(``configure_once``), and ``check_unchanged`` fails a test that left it pointing elsewhere. A test
that needs the app under another broker or configuration (a dead broker, RabbitMQ, a deployment's
``celeryconfig``) runs that part in a process of its own (``tests/support/procs.py``'s
``run_python``, a worker, a web server), with the settings it needs in that process's environment.

The process's shared ``VisitRecorder`` outlives the test too: a test that closes it (as a SIGTERM
does) would leave later tests a closed one, so each test ends with a new one
(``renew_the_shared_recorder``: the package's public ``renew_shared_recorder``).
"""

from __future__ import annotations

from counters_tasks.app import package_app
from counters_tasks.recorder import renew_shared_recorder, shared_recorder

_session: dict[str, str] = {}
"""The broker the app was configured with at its first use in this process."""


def configure_once() -> str:
    """The package's Celery app configured (at the first call: from the settings of that moment,
    the session's, and its producer pool made); its broker URL."""
    app = package_app()
    broker = str(app.conf.get("broker_url"))  # as configured (``conf.broker_url`` reads CELERY_BROKER_URL first)
    assert app.producer_pool is not None
    _session.setdefault("broker_url", broker)
    return broker


def check_unchanged() -> None:
    """Fail when the app's configured broker is no longer the one it was configured with (a test
    changed ``app.conf`` in this process and left it so: the tests after it would send elsewhere)."""
    broker = str(package_app().conf.get("broker_url"))
    assert broker == _session["broker_url"], (
        f"the package's Celery app now has the broker {broker!r}, not the session's {_session['broker_url']!r}:"
        " a test that needs another broker or configuration runs it in a process of its own"
    )


def renew_the_shared_recorder(timeout: float = 2.0) -> bool:
    """Close the process's shared recorder (sending what it holds, ``timeout`` seconds at most) and
    put a new one in its place, so the next test starts with an empty, open one; True when it had
    nothing left unsent."""
    current = shared_recorder()
    sent_all = current.close(timeout=timeout)
    renew_shared_recorder(current)
    return sent_all
