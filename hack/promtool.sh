#!/usr/bin/env bash
# Build Prometheus' promtool, pinned, for `make lint` and the tests of the chart's alert
# rules (`promtool check rules`, `promtool test rules`).
#
#   hack/promtool.sh           build it when missing, then print the directory it is in
#   hack/promtool.sh --check   exit 0 if it is built, 1 if not; build nothing
#   hack/promtool.sh --dir     print the directory it goes to
#
# Prometheus v3.16.0 is the Go module github.com/prometheus/prometheus v0.316.0 (its Go
# module versions are 0.<minor>.<patch>), whose go.mod asks for go 1.26.7. Its go.mod has no
# replace block, so a module that requires it and imports cmd/promtool from a tools.go builds
# it as `go build` would in Prometheus' own tree; the version stamps are those of its
# Makefile (github.com/prometheus/common/version).
#
# The binary goes to a machine-wide cache, so a fresh clone and CI reuse it:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/promtool/v3.16.0/
# Measured on two cores (go1.26.8), the Go module cache empty: 5m20s (1,003 packages). A
# warm run is a no-op.
set -euo pipefail

PROMETHEUS_VERSION=v3.16.0
PROMETHEUS_MODULE_VERSION=v0.316.0
GO_MIN=1.26.7

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/promtool"
DEST="$CACHE_ROOT/$PROMETHEUS_VERSION"
BINARIES=(promtool)

say() { printf 'promtool: %s\n' "$*" >&2; }

# shellcheck source=hack/lib/gobuild.sh
. "${0%/*}/lib/gobuild.sh"
cached_or_go_on "$@"

need_go "Prometheus $PROMETHEUS_VERSION's go.mod"
work_dir ome-promtool-build

mod="$WORK/promtool"
mkdir -p "$mod" "$WORK/bin"
printf 'module ome.local/promtool\n\ngo %s\n\nrequire github.com/prometheus/prometheus %s\n' \
  "$GO_MIN" "$PROMETHEUS_MODULE_VERSION" >"$mod/go.mod"
tools_go "$mod" github.com/prometheus/prometheus/cmd/promtool
say "[$(elapsed)] resolving github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION (go mod tidy)"
(cd "$mod" && go mod tidy)

v=github.com/prometheus/common/version
build_one "$mod" github.com/prometheus/prometheus/cmd/promtool "$WORK/bin/promtool" \
  "-s -w -X $v.Version=${PROMETHEUS_VERSION#v} -X $v.Branch=HEAD -X $v.BuildUser=ome -X $v.BuildDate=19700101-00:00:00"
printf 'prometheus %s (module %s)\n' "$PROMETHEUS_VERSION" "$PROMETHEUS_MODULE_VERSION" >"$WORK/bin/VERSIONS"
install_built
