#!/usr/bin/env bash
# The image's hashed requirements, exported from uv.lock (the Dockerfile installs from them):
#   requirements/manager.txt   what the product needs at run time (no stage, no test tools)
#   requirements/build.txt     the build backend that makes the product's wheel
#
#   hack/export-requirements.sh          write them (make lock runs it after uv lock)
#   hack/export-requirements.sh --check  fail if they, or uv.lock, are out of date (make lint)
set -euo pipefail
cd "$(dirname "$0")/.."

UV="$(hack/uv.sh)"
export_to() {  # <dir>
  "$UV" export --quiet --locked --no-default-groups --no-emit-workspace --no-header \
    --output-file "$1/manager.txt" >/dev/null
  "$UV" export --quiet --locked --only-group build --no-emit-workspace --no-header \
    --output-file "$1/build.txt" >/dev/null
}

case "${1:-}" in
  "")
    mkdir -p requirements
    export_to requirements
    echo "export-requirements: wrote requirements/manager.txt and requirements/build.txt" >&2
    ;;
  --check)
    WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-req.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    if ! export_to "$WORK" 2>"$WORK/err"; then
      cat "$WORK/err" >&2
      echo "export-requirements: uv.lock does not match pyproject.toml: run make lock" >&2
      exit 1
    fi
    for f in manager.txt build.txt; do
      if ! diff -u "requirements/$f" "$WORK/$f" >&2; then
        echo "export-requirements: requirements/$f is not what uv.lock gives: run make lock" >&2
        exit 1
      fi
    done
    ;;
  -h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) echo "export-requirements.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac
