#!/usr/bin/env bash
# Build pinned kube-apiserver, kube-controller-manager and etcd from their Go modules, for the
# real control plane of the tests (`ome-sim run --control-plane kube`, `make e2e-kube`).
#
#   hack/kube-binaries.sh           build what is missing, then print the directory
#   hack/kube-binaries.sh --check   exit 0 if all three are built, 1 if not; build nothing
#   hack/kube-binaries.sh --dir     print the directory the binaries go to
#
# The versions are pinned here and nowhere else:
# - Kubernetes v1.37.2, the newest release the Go module proxy serves whose go.mod asks for
#   no newer Go than the machine's (go 1.26.0; the machine has go1.26.8).
# - etcd v3.7.3, the server module of the etcd client line that Kubernetes v1.37 requires
#   (go.etcd.io/etcd/client/v3 v3.7.0). It is built from go.etcd.io/etcd/server/v3 through a
#   three-line main rather than taken from a PyPI wheel: the proxy serves it for exactly the
#   version we want, it shares the Go toolchain and build cache with the Kubernetes build,
#   and no PyPI package ships an etcd 3.7 binary for linux/amd64 that we could pin.
#
# `go install k8s.io/kubernetes/cmd/...@v1.37.2` cannot work: Kubernetes' go.mod replaces
# each k8s.io/* staging module with a local path. So this builds from a small module of its
# own that requires k8s.io/kubernetes and replaces each staging module (the replace block of
# that version's go.mod) with its published twin at v0.37.2 (hack/lib/gobuild.sh, which
# hack/node-binaries.sh shares).
#
# The binaries go to a machine-wide cache, so a fresh clone and CI reuse them:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/kube/v1.37.2/
# They are built in a temporary directory and moved in only when all three are built, so an
# interrupted build leaves nothing half-made behind. A first build takes about 7 minutes on
# two cores (docs/control-plane.md); a warm one is a no-op.
set -euo pipefail

KUBE_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
GO_MIN=1.26.0

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/kube"
DEST="$CACHE_ROOT/$KUBE_VERSION"
BINARIES=(etcd kube-apiserver kube-controller-manager)

say() { printf 'kube-binaries: %s\n' "$*" >&2; }

# shellcheck source=hack/lib/gobuild.sh
. "${0%/*}/lib/gobuild.sh"
cached_or_go_on "$@"

if ! command -v go >/dev/null 2>&1; then
  say "needs Go >= $GO_MIN on the PATH to build kube-apiserver, kube-controller-manager and etcd $KUBE_VERSION; without it the embedded cluster (the default) is what runs" >&2
  exit 3
fi
go_version="$(go env GOVERSION)"
go_version="${go_version#go}"
if [[ "$(printf '%s\n%s\n' "$GO_MIN" "$go_version" | sort -V | head -n1)" != "$GO_MIN" ]]; then
  say "needs Go >= $GO_MIN to build Kubernetes $KUBE_VERSION, found go$go_version; the embedded cluster (the default) is what runs" >&2
  exit 3
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ome-kube-build.XXXXXX")"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

say "building Kubernetes $KUBE_VERSION and etcd $ETCD_VERSION with go$go_version into $DEST"
mkdir -p "$WORK/bin"

# --- kube-apiserver and kube-controller-manager -------------------------------------------
kube_module "$WORK/kube-binaries" kube-apiserver kube-controller-manager
build_one "$WORK/kube-binaries" k8s.io/kubernetes/cmd/kube-apiserver "$WORK/bin/kube-apiserver" "$KUBE_LDFLAGS"
build_one "$WORK/kube-binaries" k8s.io/kubernetes/cmd/kube-controller-manager "$WORK/bin/kube-controller-manager" "$KUBE_LDFLAGS"

# --- etcd ---------------------------------------------------------------------------------
EMOD="$WORK/etcd"
mkdir -p "$EMOD"
cat >"$EMOD/go.mod" <<EOF
module ome.local/etcd

go $GO_MIN

require go.etcd.io/etcd/server/v3 $ETCD_VERSION
EOF
cat >"$EMOD/main.go" <<'EOF'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
EOF
say "[$(elapsed)] resolving go.etcd.io/etcd/server/v3@$ETCD_VERSION"
(cd "$EMOD" && go mod tidy)
build_one "$EMOD" . "$WORK/bin/etcd" "-s -w"

# --- install ------------------------------------------------------------------------------
{
  echo "kubernetes $KUBE_VERSION"
  echo "staging $STAGING_VERSION"
  echo "etcd $ETCD_VERSION"
  echo "go go$go_version"
} >"$WORK/bin/VERSIONS"
install_built
