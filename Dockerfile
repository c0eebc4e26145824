# syntax=docker/dockerfile:1
# The ome-manager image: `docker build -t ghcr.io/moirai-internal/ome-manager:1.3.0 .`
# (add `--build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD)` and the manager's start-up
# line and --version name the commit too).
#
# Two stages. The first builds the product's wheel (package `ome` alone: the stage, ome_sim,
# is another distribution and never comes in) with the locked build backend, and fetches every
# dependency's wheel from requirements/manager.txt, which is exported from uv.lock with hashes
# (pip refuses any file whose hash differs). The second installs them into a virtual
# environment on a fresh slim Python, from those wheels only (no index), mounted for the one
# RUN that needs them, so no wheel, compiler, pip cache or source tree is left in the image.
# It runs as uid 65532 (non-root) and needs no writable path but /tmp (the Deployment mounts
# an emptyDir there and makes the root read-only).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY requirements ./requirements
RUN pip install --no-cache-dir --require-hashes -r requirements/build.txt \
    && pip download --no-cache-dir --require-hashes --only-binary=:all: \
        -r requirements/manager.txt -d /wheels
COPY pyproject.toml README.md ./
COPY pkg ./pkg
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /product .

FROM python:3.11-slim-bookworm
ARG GIT_COMMIT=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/ome/bin:$PATH \
    OME_GIT_COMMIT=$GIT_COMMIT
# The venv has no pip of its own; the base image's pip installs into it, from /wheels only.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    --mount=type=bind,from=build,source=/product,target=/product \
    --mount=type=bind,from=build,source=/src/requirements,target=/requirements \
    python -m venv --without-pip /opt/ome \
    && pip --python /opt/ome/bin/python install --no-cache-dir --no-index \
        --find-links /wheels --require-hashes -r /requirements/manager.txt \
    && pip --python /opt/ome/bin/python install --no-cache-dir --no-index --no-deps \
        /product/*.whl \
    && groupadd --gid 65532 ome \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ome
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["/opt/ome/bin/ome-manager"]
