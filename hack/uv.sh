#!/usr/bin/env bash
# Install a pinned uv into the tools cache and print its path:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/tools/uv-0.9.30/uv
#
#   hack/uv.sh          install it if it is missing, then print the path
#   hack/uv.sh --path   print the path only (it may not exist yet)
#
# uv installs the project from uv.lock (`make setup`) and writes the lock (`make lock`).
# It comes from PyPI (the wheel uv==0.9.30 for x86_64 Linux, pinned by its sha256), fetched by
# the machine's python3 -m pip and unpacked with Python's zipfile: nothing else is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

UV_VERSION=0.9.30
WHEEL_SHA256=4366dd740ac9ad3ec50a58868a955b032493bb7d7e6ed368289e6ced8bbc70f3
PYTHON="${BOOTSTRAP_PYTHON:-python3}"

DEST="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/tools/uv-$UV_VERSION"
UV="$DEST/uv"

case "${1:-}" in
  "") ;;
  --path) echo "$UV"; exit 0 ;;
  -h | --help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "uv.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

if [[ -x "$UV" ]]; then
  echo "$UV"
  exit 0
fi
if [[ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]]; then
  echo "uv.sh: the pinned wheel is for Linux x86_64, not $(uname -s) $(uname -m);" \
    "install uv $UV_VERSION yourself and put it at $UV" >&2
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-uv.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "uv.sh: fetching uv==$UV_VERSION from PyPI" >&2
echo "uv==$UV_VERSION --hash=sha256:$WHEEL_SHA256" >"$WORK/requirements.txt"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
  --platform manylinux_2_17_x86_64 --require-hashes -r "$WORK/requirements.txt" -d "$WORK"
"$PYTHON" - "$WORK" "$UV_VERSION" <<'PY'
"""Take the uv binary out of the wheel."""
import sys
import zipfile
from pathlib import Path

work, version = Path(sys.argv[1]), sys.argv[2]
[wheel] = work.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    (work / "uv").write_bytes(whl.read(f"uv-{version}.data/scripts/uv"))
PY
chmod +x "$WORK/uv"
got="$("$WORK/uv" --version)"
if [[ "$got" != "uv $UV_VERSION" ]]; then
  echo "uv.sh: the wheel holds '$got', not uv $UV_VERSION" >&2
  exit 1
fi
mkdir -p "$DEST"
mv "$WORK/uv" "$UV.partial"
mv "$UV.partial" "$UV"
echo "uv.sh: installed uv $UV_VERSION" >&2
echo "$UV"
