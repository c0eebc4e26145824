# syntax=docker/dockerfile:1
# The ome-manager image: `make image`, or `docker build -t ghcr.io/moirai-internal/ome-manager:1.3.0 .`
# (add `--build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD)` and the manager's start-up
# line and --version name the commit too).
#
# BASE is any Debian 12 image with a CPython 3.11 as `python3` on the PATH: the default,
# python:3.11-slim-bookworm, where a registry is reachable; hack/base-image.sh's, built from
# Debian's packages, where none is (make image chooses; docs/image.md says why the two are
# equivalent for the product).
#
# Two stages on the same base, so that the virtual environment's interpreter path holds in
# both. The first builds the product's wheel (package `ome` alone: the stage, ome_sim, is
# another distribution and never comes in) with the locked build backend, fetches every
# dependency's wheel from requirements/manager.txt, which is exported from uv.lock with
# hashes (pip refuses any file whose hash differs), and installs them, from those wheels only
# (no index), into /opt/ome. The second copies /opt/ome alone onto a fresh base and removes
# the base's own pip if it has one, so no pip, wheel, compiler, cache or source tree is in the
# image. It runs as uid 65532 (non-root) and needs no writable path but /tmp (the Deployment
# mounts an emptyDir there and makes the root read-only).

ARG BASE=python:3.11-slim-bookworm

FROM ${BASE} AS build
# Debian's own Python has neither pip nor ensurepip; the python images have both.
# hadolint ignore=DL3008
RUN if ! python3 -c 'import ensurepip' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3.11-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi
WORKDIR /src
COPY requirements ./requirements
# A build behind a TLS-intercepting proxy passes its CA bundle as the secret `ca-bundle`
# (make image passes the machine's); without it pip trusts its own.
RUN --mount=type=secret,id=ca-bundle \
    if [ -f /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi \
    && python3 -m venv /build \
    && /build/bin/pip install --no-cache-dir --require-hashes -r requirements/build.txt \
    && /build/bin/pip download --no-cache-dir --require-hashes --only-binary=:all: \
        -r requirements/manager.txt -d /wheels
COPY pyproject.toml README.md ./
COPY pkg ./pkg
RUN /build/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /product . \
    && python3 -m venv --without-pip /opt/ome \
    && /build/bin/pip --python /opt/ome/bin/python install --no-cache-dir --no-index \
        --find-links /wheels --require-hashes -r requirements/manager.txt \
    && /build/bin/pip --python /opt/ome/bin/python install --no-cache-dir --no-index --no-deps \
        /product/*.whl

FROM ${BASE}
ARG GIT_COMMIT=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/ome/bin:$PATH \
    HOME=/tmp \
    OME_GIT_COMMIT=$GIT_COMMIT
# The python images carry pip, setuptools and wheel; the manager needs none of them.
RUN if python3 -m pip --version >/dev/null 2>&1; then \
        python3 -m pip uninstall --no-cache-dir -y pip setuptools wheel; \
    fi
COPY --from=build /opt/ome /opt/ome
USER 65532:65532
EXPOSE 8443 8081 9443
ENTRYPOINT ["/opt/ome/bin/ome-manager"]
