# The two commands a newcomer needs are `make run` and `make test`; both set themselves up.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test lint run stress clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python -m ome.api.crdgen --check config/crd

test: setup lint
	$(BIN)/python -m pytest

# A mass delete and re-create of 200 services, twice (about three minutes on two cores); CI
# runs it after `make test`. STRESS_SERVICES=50 makes it quicker.
stress: setup
	$(BIN)/python -m pytest test/stress

# ARGS passes flags to ome-sim run, e.g. make run ARGS="--slice-ready-timeout 20s".
run: setup
	$(BIN)/ome-sim run --kubeconfig .ome/kubeconfig $(ARGS)

clean:
	rm -rf $(VENV) .ome .pytest_cache .mypy_cache .ruff_cache
