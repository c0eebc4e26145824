#!/usr/bin/env bash
# make image: build the manager's image from the Dockerfile, tagged as the chart names it
# (ghcr.io/moirai-internal/ome-manager:<version>), with the commit as GIT_COMMIT.
#
#   hack/image.sh          build it (the layers are cached, so a second build is quick)
#   hack/image.sh --name   print the image's name
#   IMAGE_BASE=python:3.11-slim-bookworm hack/image.sh   build on the base given
#
# The container tool is hack/container-tools.sh's: Docker where an engine answers, else
# podman with runc. The base, unless IMAGE_BASE names one:
#   - the Dockerfile's default, python:3.11-slim-bookworm, when it is present or can be
#     pulled (a registry is reachable);
#   - else hack/base-image.sh's Debian 12 with Debian's Python 3.11, built from Debian's
#     packages and cached machine-wide (docs/image.md says why the two are equivalent).
# It says which base it used, and why, and writes it on the image (label ome.io/base).
# The machine's CA bundle goes to the build as the secret `ca-bundle`, for builds behind a
# TLS-intercepting proxy. The build's output goes to a log; its steps are shown as they
# start, and its last lines when it fails.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'image: %s\n' "$*" >&2; }

VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n1)"
NAME="ghcr.io/moirai-internal/ome-manager:$VERSION"
DEFAULT_BASE="python:3.11-slim-bookworm"

case "${1:-}" in
  "") ;;
  --name) echo "$NAME"; exit 0 ;;
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) say "unknown argument '$1' (try --help)"; exit 2 ;;
esac

started=$SECONDS
tool="$(hack/container-tools.sh)" || exit 3
read -r -a TOOL <<<"$tool"
engine="${TOOL[0]}"
say "container tool: $tool"

if [[ -n "${IMAGE_BASE:-}" ]]; then
  base="$IMAGE_BASE"
  why="IMAGE_BASE names it"
elif "${TOOL[@]}" image inspect "$DEFAULT_BASE" >/dev/null 2>&1; then
  base="$DEFAULT_BASE"
  why="the Dockerfile's default, already present"
elif "${TOOL[@]}" pull -q "docker.io/library/$DEFAULT_BASE" >/dev/null 2>&1; then
  base="$DEFAULT_BASE"
  why="the Dockerfile's default, pulled from Docker Hub"
elif [[ "$engine" == podman ]]; then
  say "no registry reachable for $DEFAULT_BASE: building the base from Debian's packages"
  base="$(hack/base-image.sh)"
  why="no registry reachable; Debian 12 and Debian's Python 3.11, built by hack/base-image.sh"
else
  say "cannot pull $DEFAULT_BASE, and hack/base-image.sh's base needs podman: set IMAGE_BASE"
  exit 3
fi
say "base: $base ($why)"

# As the manager names a checkout's commit: -dirty when pkg/ differs from HEAD.
commit="$(git rev-parse --short=12 HEAD 2>/dev/null || true)"
if [[ -n "$commit" ]] && ! git diff --quiet HEAD -- pkg; then
  commit="$commit-dirty"
fi
args=(build -t "$NAME" --build-arg "BASE=$base" --build-arg "GIT_COMMIT=$commit"
  --label "ome.io/base=$base")
if [[ "$engine" == podman ]]; then
  args+=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
fi
for bundle in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
  if [[ -n "$bundle" && -f "$bundle" ]]; then
    args+=(--secret "id=ca-bundle,src=$bundle")
    break
  fi
done

log="$(mktemp "${TMPDIR:-/tmp}/ome-image.XXXXXX")"
say "building $NAME (the build's output: $log)"
set +e
"${TOOL[@]}" "${args[@]}" . 2>&1 | tee "$log" | grep --line-buffered -E '^(\[[0-9]+/[0-9]+\] )?STEP [0-9]+/[0-9]+|^#[0-9]+ \[' \
  | sed -u "s/^\\(.\\{0,100\\}\\).*/image:   \\1/" >&2
code=${PIPESTATUS[0]}
set -e
if ((code != 0)); then
  tail -n 20 "$log" >&2
  say "the build failed (exit code $code); its whole output is in $log"
  exit 1
fi
rm -f "$log"
size="$("${TOOL[@]}" image inspect --format '{{.Size}}' "$NAME")"
say "built $NAME on $base in $((SECONDS - started)) s; $((size / 1000000)) MB"
echo "$NAME"
