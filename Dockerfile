# syntax=docker/dockerfile:1
# The ome-manager image: `docker build -t ghcr.io/moirai-internal/ome-manager:1.3.0 .`
#
# Two stages. The first builds wheels: the project's and every dependency's. The second
# installs them into a virtual environment on a fresh slim Python, from those wheels only
# (no index), mounted for the one RUN that needs them, so no wheel, compiler, pip cache or
# source tree is left in the image. It runs as uid 65532 (non-root) and needs no writable
# path but /tmp (the Deployment mounts an emptyDir there and makes the root read-only).

FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY pkg ./pkg
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/ome/bin:$PATH
# The venv has no pip of its own; the base image's pip installs into it, from /wheels only.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/ome \
    && pip --python /opt/ome/bin/python install --no-cache-dir --no-index \
        --find-links /wheels ome-tpu-slices==0.1.0 \
    && groupadd --gid 65532 ome \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ome
USER 65532:65532
EXPOSE 8080 8081 9443
ENTRYPOINT ["/opt/ome/bin/ome-manager"]
