# The two commands of README.md: `make run` (the local stack) and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
VISITS ?= 5000
PYTEST_ARGS ?=

.PHONY: install run demo test test-cluster lint bench screenshots

install:
	@VENV=$(VENV) scripts/bootstrap.sh

run: install
	$(BIN)/counters-tasks run

demo: install
	$(BIN)/counters-tasks demo --visits $(VISITS)

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)
	$(BIN)/ruff check .

# A private 3-master Redis Cluster on loopback ports: the data modules' tests, the worker on the
# cluster, scale-out checks and a failover; torn down afterwards.
test-cluster: install
	$(BIN)/python scripts/test-cluster.py $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/counters.py

screenshots: install
	COUNTERS_UPDATE_DOCS=1 $(BIN)/python -m pytest -q tests/test_dashboard_page.py tests/test_readme_cli.py
