"""Helpers the tests share: real servers and clients, processes, the browser, exact models.

- ``servers``: clients of the test Redis (single or cluster), flushing, dumps, settings;
- ``concurrency``: a check in a forked child, threads at once;
- ``procs``: real ``celery worker`` / ``celery beat`` processes;
- ``browser``: headless Chromium over the DevTools protocol;
- ``demo_data``: data for the dashboard and CLI tests, written with the public API;
- ``visit_model``: the exact answer visits must give, and the check against Redis;
- ``faults``: private servers' helpers and the visit model of the fault tests.
- ``timing``: tests that measure time run alone under pytest-xdist (conftest's run hook).

Fixtures stay in the ``conftest.py`` files; everything here is plain functions and classes.
"""
