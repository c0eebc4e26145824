# The two commands a newcomer needs are `make run` and `make test`; both set themselves up.
SHELL := /bin/bash
# The Python `make setup` builds .venv on: by default the first Python 3.11 or later on the
# PATH (python3 here); PYTHON=3.13 (or a path) asks for another, found by hack/find-python.sh.
PYTHON ?=
VENV := .venv
BIN := $(VENV)/bin
UV := $(shell hack/uv.sh --path)
# uv uses the Pythons on this machine and never downloads one.
export UV_PYTHON_DOWNLOADS := never

.PHONY: setup lock version unit test pythons lint run stress long bench soak soak-check e2e-kube \
	kube-binaries crds clean image image-test kind-e2e chart-schema alerts

# The product and the stage, editable, with the test tools, exactly as uv.lock has them
# (--locked: it fails when pyproject.toml and the lock disagree; `make lock` mends that).
# uv itself comes pinned from PyPI (hack/uv.sh). Quick when nothing changed.
setup:
	@hack/uv.sh >/dev/null
	@$(if $(PYTHON),python="$$(hack/find-python.sh $(PYTHON))" || exit 1;) \
	log="$$(mktemp)"; \
	if ! $(UV) sync --locked --no-progress $(if $(PYTHON),--python "$$python") 2>"$$log"; then \
	  grep -v '^Resolved' "$$log" >&2; rm -f "$$log"; \
	  echo "make setup: uv sync failed (above); when uv.lock does not match a" \
	       "pyproject.toml, make lock mends it" >&2; \
	  exit 1; \
	fi; rm -f "$$log"

# Refresh uv.lock after a change to a pyproject.toml, and the image's hashed requirements
# that are exported from it (requirements/); `make lint` fails when they are out of date.
lock:
	@hack/uv.sh >/dev/null
	$(UV) lock
	hack/export-requirements.sh

# The one version, from the product's pyproject.toml into every other place that names it:
# make version VERSION=1.4.0 (hack/version.sh says where).
version:
	@test -n "$(VERSION)" || { echo "usage: make version VERSION=x.y.z" >&2; exit 2; }
	hack/version.sh $(VERSION)
	$(MAKE) lock

lint: setup
	hack/export-requirements.sh --check
	hack/version.sh --check
	$(BIN)/deptry pkg
	cd stage && ../$(BIN)/deptry .
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	$(BIN)/python hack/check-rule-ids.py
	$(BIN)/python hack/check-names.py pkg
	$(BIN)/python -m ome.api.crdgen --check config/crd
	$(BIN)/python -m ome.entrypoints.chartschema --check charts/ome-resources/values.schema.json
	for script in hack/*.sh hack/lib/*.sh .ci/run; do bash -n "$$script" || exit 1; done
	$(BIN)/shellcheck hack/*.sh hack/lib/*.sh .ci/run
	$(BIN)/hadolint Dockerfile
	"$$(hack/helm.sh)" lint --strict charts/ome-resources
	"$$(hack/helm.sh)" lint --strict charts/ome-resources -f config/samples/values.yaml

# The quick loop: the unit, fuzz and pure-core suites (no API server, no manager, no cluster;
# the embedded API server's own pure parts included), on every core; under a minute.
UNIT_TESTS := test/unit test/fuzz stage/tests/unit test/test_layering.py \
	$(addprefix stage/tests/sim/test_,jsonpath.py patch.py schema.py selectors.py \
	store_indexes.py tables.py)
# pytest-xdist runs the suites in several processes: in `make test` each test file in one, and
# all of test/e2e in one (its files share their `ome-sim run`; conftest.py says how). `make unit`
# starts one per core, as its tests compute; `make test` two per core, as most of its tests wait
# on an API server, a manager or the clock. UNIT_WORKERS=0 (TEST_WORKERS=0) runs them in one
# process.
CORES := $(shell getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
UNIT_WORKERS ?= $(CORES)
TEST_WORKERS ?= $(shell echo $$((2 * $(CORES))))
XDIST = -n $(1) --dist loadfile

# Python writes its bytecode caches (__pycache__, which git ignores) in the test runs even where
# the environment says not to (PYTHONDONTWRITEBYTECODE, set in many images): else each worker,
# and each process a test starts, compiles the product, its dependencies and the rewritten
# tests anew (a tenth of the CPU time of `make unit`).
unit test pythons: PYTHONDONTWRITEBYTECODE :=

# The unit suites share no fixture across files, so `make unit` hands out single tests as workers
# free up (--dist worksteal), which keeps its one long fuzz file from ending the run alone.
unit: setup
	$(BIN)/python -m pytest -n $(UNIT_WORKERS) --dist worksteal $(UNIT_TESTS)

# Lint, and every suite of pyproject.toml's testpaths (the unit ones too), as CI runs them;
# the 20 slowest tests are listed at the end.
test: setup lint
	$(BIN)/python -m pytest $(call XDIST,$(TEST_WORKERS)) --durations=20

# The manager's image from the Dockerfile, tagged as the chart names it, with Docker, or else
# podman and runc (installed when missing); its base is python:3.11-slim-bookworm where a
# registry is reachable, else one built from Debian's packages (hack/image.sh says which).
image:
	hack/image.sh

# The e2e suite on a kind cluster (a laptop with Docker, or podman with
# KIND_EXPERIMENTAL_PROVIDER=podman); hack/kind-e2e.sh says what it does.
kind-e2e: setup
	hack/kind-e2e.sh

# The image run as the chart runs it: uid 65532, read-only root, no compiler or pip,
# --version, check-config, and its cold start to /readyz against a cluster.
image-test: setup image
	$(BIN)/python -m pytest test/image

# The suite of `make test` (without lint) on every Python 3.11+ this machine has, each in its
# own environment from the same lock (.venv-<version>), on every core as `make test` runs it.
# PYTHONS="3.12 3.13" names them (and fails when one is missing). hack/pythons.sh says more.
pythons:
	PYTEST_ARGS="$(call XDIST,$(TEST_WORKERS)) $(PYTEST_ARGS)" hack/pythons.sh $(PYTHONS)

# A mass delete and re-create of 200 services, twice (about three minutes on two cores); CI
# runs it after `make test`. STRESS_SERVICES=50 makes it quicker.
stress: setup
	$(BIN)/python -m pytest test/stress

# The scenarios that take minutes of real time (test/long): the manager's watches answering
# 410 for a minute and dropped for two, teardowns deferred for three and five minutes, and a
# minute of chip time (about 12 minutes on two cores; each prints what it measured). CI runs
# it after `make test`.
long: setup
	$(BIN)/python -m pytest -rP test/long

# The e2e suite (test/e2e) on a real control plane: etcd, kube-apiserver and
# kube-controller-manager built from their Go modules (hack/e2e-kube.sh says how). The first
# run builds them (about 7 minutes on two cores, cached machine-wide); then about 5 minutes.
# Without Go it says so and succeeds; `make test` never needs it.
# Provisioning at scale (ome-sim bench): about 8 minutes on two cores; ARGS=--quick runs the
# CI's 2-minute version. The JSON report goes to .ome/bench/.
bench: setup
	$(BIN)/ome-sim bench $(ARGS)

# A chaos soak (ome-sim soak): SOAK_MINUTES of faults and load (default 5), then at most 2
# minutes to converge and a short metrics probe (about SOAK_MINUTES + 1.5 minutes in all).
# SOAK_SEED replays a run's plan (its seed is printed first). The report goes to .ome/soak/.
SOAK_MINUTES ?= 5
soak: setup
	$(BIN)/ome-sim soak --minutes $(SOAK_MINUTES) $(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(ARGS)

# Each of the soak's checkers can fail: short soaks with one protection of the manager turned
# off at a time (stage/tests/soak; about 6 minutes on two cores, 2 of them the leak check
# waiting out its convergence budget).
soak-check: setup
	$(BIN)/python -m pytest stage/tests/soak

e2e-kube: setup
	BIN=$(BIN) hack/e2e-kube.sh

# The chart's alerts: Prometheus' promtool built from its Go module (hack/promtool.sh; about
# 5 minutes the first time, cached machine-wide), then `promtool check rules` and `promtool
# test rules` (test/alerts/alerts_test.yaml fires and clears each alert); seconds when warm.
alerts: setup
	hack/promtool.sh >/dev/null
	OME_REQUIRE_PROMTOOL=1 $(BIN)/python -m pytest test/unit/test_alerts.py

# Regenerate config/crd from pkg/ome/api/v1beta1.py, and the chart's copies of them
# (test/unit/test_chart.py fails when the two differ).
crds: setup
	$(BIN)/python -m ome.api.crdgen config/crd
	cp config/crd/ome.io_*.yaml charts/ome-resources/crds/

# Regenerate charts/ome-resources/values.schema.json (the tpuSliceProvisioning block's part from
# the manager's parser; `make lint` fails when it is stale).
chart-schema: setup
	$(BIN)/python -m ome.entrypoints.chartschema charts/ome-resources/values.schema.json

# Build (once) the control plane binaries into ~/.cache/ome-tpu-slices/kube/<version>/.
kube-binaries:
	hack/kube-binaries.sh

# ARGS passes flags to ome-sim run, e.g. make run ARGS="--slice-ready-timeout 20s".
run: setup
	$(BIN)/ome-sim run --kubeconfig .ome/kubeconfig $(ARGS)

clean:
	rm -rf $(VENV) .venv-3.* .ome .pytest_cache .mypy_cache .ruff_cache
