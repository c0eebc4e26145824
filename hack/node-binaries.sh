#!/usr/bin/env bash
# Build a pinned Kubernetes node: kubelet, kube-proxy, containerd (+ shim and ctr), crictl and
# the static pause binary, for the real node of `ome-sim run --node real` (runc containers,
# CNI networking, kube-proxy Services) against the control plane of hack/kube-binaries.sh.
#
#   hack/node-binaries.sh           build what is missing, then print the directory
#   hack/node-binaries.sh --check   exit 0 if everything is built, 1 if not; build nothing
#   hack/node-binaries.sh --dir     print the directory the binaries go to
#
# The versions are pinned here and nowhere else:
# - Kubernetes v1.37.2 (kubelet, kube-proxy): the version of hack/kube-binaries.sh, so the
#   node and the control plane agree. Built the same way: a small module of its own requires
#   k8s.io/kubernetes and replaces each staging module with its published twin at v0.37.2
#   (`go install k8s.io/kubernetes/cmd/kubelet@...` cannot work, the staging replaces are
#   local paths).
# - containerd v2.4.2 (containerd, containerd-shim-runc-v2, ctr): the newest 2.x the Go proxy
#   serves whose go.mod asks for no newer Go than the machine's (go 1.26.6 <= go1.26.8).
#   Tested with the kubelet v1.37.2 above on cgroup v1 with Debian's runc 1.1.
# - cri-tools v1.37.0 (crictl), the release line of Kubernetes 1.37.
# - pause 3.10.2: the C program in k8s.io/kubernetes@v1.37.2's build/pause/linux/pause.c (the
#   TAG of build/pause/Makefile), linked statically with gcc. Nothing can be pulled here, so
#   the sandbox image is made locally from this binary (ome_sim.node, docs/image.md).
# All Go binaries are built with CGO_ENABLED=0 (static; containerd skips its btrfs snapshotter,
# which needs cgo; the shim is built with the no_grpc tag as containerd's Makefile does).
# runc, the CNI plugins, iptables and conntrack come from Debian (apt: runc,
# containernetworking-plugins, iptables, conntrack) and are not built here.
#
# The binaries go to a machine-wide cache, so a fresh clone and CI reuse them:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/node/k8s-v1.37.2_containerd-v2.4.2_crictl-v1.37.0_pause-3.10.2/
# They are built in a temporary directory and moved in only when all are built, so an
# interrupted build leaves nothing half-made behind. Measured on two cores (go1.26.8), with
# the Go module cache already filled: 4m53s with an empty Go build cache (kubelet 3m28s,
# kube-proxy 8s, containerd + shim + ctr 53s, crictl 19s); 1m59s right after
# hack/kube-binaries.sh, whose build cache kubelet and kube-proxy mostly share (module
# downloads on an empty module cache come on top, not timed). A warm run is a no-op.
set -euo pipefail

KUBE_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
CONTAINERD_VERSION=v2.4.2
CRITOOLS_VERSION=v1.37.0
PAUSE_VERSION=3.10.2
GO_MIN=1.26.6

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/node"
DEST="$CACHE_ROOT/k8s-${KUBE_VERSION}_containerd-${CONTAINERD_VERSION}_crictl-${CRITOOLS_VERSION}_pause-${PAUSE_VERSION}"
BINARIES=(kubelet kube-proxy containerd containerd-shim-runc-v2 ctr crictl pause)

say() { printf 'node-binaries: %s\n' "$*" >&2; }

# shellcheck source=hack/lib/gobuild.sh
. "${0%/*}/lib/gobuild.sh"
cached_or_go_on "$@"

command -v gcc >/dev/null 2>&1 || { say "needs gcc on the PATH"; exit 3; }
need_go "containerd $CONTAINERD_VERSION's go.mod"
work_dir ome-node-build

# tool_module DIR MODULE VERSION PACKAGE...: a module that requires MODULE@VERSION and imports
# PACKAGE... from a tools.go, tidied.
tool_module() {
  local dir=$1 module=$2 version=$3
  shift 3
  mkdir -p "$dir"
  printf 'module ome.local/%s\n\ngo %s\n\nrequire %s %s\n' "$(basename "$dir")" "$GO_MIN" "$module" "$version" >"$dir/go.mod"
  tools_go "$dir" "$@"
  say "[$(elapsed)] resolving $module@$version (go mod tidy)"
  (cd "$dir" && go mod tidy)
}

say "building kubelet/kube-proxy $KUBE_VERSION, containerd $CONTAINERD_VERSION, crictl $CRITOOLS_VERSION, pause $PAUSE_VERSION with go$go_version into $DEST"
mkdir -p "$WORK/bin"

# --- kubelet and kube-proxy ---------------------------------------------------------------
kube_module "$WORK/node-binaries" kubelet kube-proxy
build_one "$WORK/node-binaries" k8s.io/kubernetes/cmd/kubelet "$WORK/bin/kubelet" "$KUBE_LDFLAGS"
build_one "$WORK/node-binaries" k8s.io/kubernetes/cmd/kube-proxy "$WORK/bin/kube-proxy" "$KUBE_LDFLAGS"

# --- pause ----------------------------------------------------------------------------------
say "[$(elapsed)] compiling pause $PAUSE_VERSION (static, gcc)"
gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-ome" \
  -o "$WORK/bin/pause" "$KUBE_SRC/build/pause/linux/pause.c"
strip "$WORK/bin/pause" 2>/dev/null || true

# --- containerd, containerd-shim-runc-v2, ctr ---------------------------------------------
CMOD="$WORK/containerd"
CPKG=github.com/containerd/containerd/v2
tool_module "$CMOD" "$CPKG" "$CONTAINERD_VERSION" "$CPKG/cmd/containerd" "$CPKG/cmd/containerd-shim-runc-v2" "$CPKG/cmd/ctr"
ctr_ldflags="-s -w -X $CPKG/version.Version=$CONTAINERD_VERSION -X $CPKG/version.Package=$CPKG"
build_one "$CMOD" "$CPKG/cmd/containerd" "$WORK/bin/containerd" "$ctr_ldflags" "urfave_cli_no_docs osusergo netgo"
build_one "$CMOD" "$CPKG/cmd/containerd-shim-runc-v2" "$WORK/bin/containerd-shim-runc-v2" "$ctr_ldflags" "urfave_cli_no_docs osusergo netgo no_grpc"
build_one "$CMOD" "$CPKG/cmd/ctr" "$WORK/bin/ctr" "$ctr_ldflags" "urfave_cli_no_docs osusergo netgo"

# --- crictl ---------------------------------------------------------------------------------
TMOD="$WORK/critools"
tool_module "$TMOD" sigs.k8s.io/cri-tools "$CRITOOLS_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
build_one "$TMOD" sigs.k8s.io/cri-tools/cmd/crictl "$WORK/bin/crictl" \
  "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRITOOLS_VERSION#v}"

# --- install ------------------------------------------------------------------------------
{
  echo "kubernetes $KUBE_VERSION"
  echo "staging $STAGING_VERSION"
  echo "containerd $CONTAINERD_VERSION"
  echo "cri-tools $CRITOOLS_VERSION"
  echo "pause $PAUSE_VERSION"
  echo "go go$go_version"
} >"$WORK/bin/VERSIONS"
install_built
