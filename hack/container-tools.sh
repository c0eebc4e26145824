#!/usr/bin/env bash
# The container tool that `make image`, `make image-test` and `make e2e-kube` use, found or
# set up, printed as the command to run (one line, words separated by spaces):
#
#   hack/container-tools.sh            e.g. "docker" or "podman --runtime /usr/sbin/runc"
#   hack/container-tools.sh --engine   "docker" or "podman" only
#
# 1. A Docker whose engine answers (`docker info`), as on a laptop.
# 2. Else podman with runc: installed from Debian's packages when missing (podman, runc,
#    buildah, debootstrap, and what a real node needs beside them: the CNI plugins,
#    iptables and conntrack; root and apt-get needed). runc is asked for by path: the default
#    runtime, crun, fails on hosts whose cgroups are v1 or hybrid ("cgroups in hybrid mode
#    not supported"), as this project's CI machines' are.
# Fails in one line, exit code 3, when neither can be found or set up.
#
# Containers started through podman here also need `--ulimit nofile=1024:1024 --ulimit
# nproc=1024:1024`: podman's default raises the hard limits, which needs CAP_SYS_RESOURCE,
# and machines without it (these CI machines) fail with "setrlimit RLIMIT_NOFILE: Operation
# not permitted". hack/image.sh and ome_sim.containers.RUN_FLAGS pass them.
set -euo pipefail

say() { printf 'container-tools: %s\n' "$*" >&2; }

engine_only=0
case "${1:-}" in
  "") ;;
  --engine) engine_only=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) say "unknown argument '$1' (try --help)"; exit 2 ;;
esac

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo docker
  exit 0
fi

runc_path() { command -v runc || { [[ -x /usr/sbin/runc ]] && echo /usr/sbin/runc; } || true; }

have_all() {
  command -v podman >/dev/null 2>&1 && [[ -n "$(runc_path)" ]] &&
    command -v debootstrap >/dev/null 2>&1 && [[ -x /usr/lib/cni/bridge ]] &&
    command -v iptables >/dev/null 2>&1 && command -v conntrack >/dev/null 2>&1
}

if ! have_all; then
  if ((EUID == 0)) && command -v apt-get >/dev/null 2>&1; then
    say "installing podman, runc, buildah, debootstrap, the CNI plugins, iptables and conntrack from Debian's packages (about a minute)"
    log="$(mktemp)"
    install() {
      DEBIAN_FRONTEND=noninteractive apt-get install -y \
        podman runc buildah debootstrap uidmap slirp4netns fuse-overlayfs \
        containernetworking-plugins iptables conntrack >>"$log" 2>&1
    }
    # Once more after apt-get update when the package lists are stale or missing.
    if ! install && ! { apt-get update >>"$log" 2>&1 && install; }; then
      tail -n 5 "$log" >&2
      rm -f "$log"
      say "no container tool: no working Docker engine, and apt-get could not install podman (above)"
      exit 3
    fi
    rm -f "$log"
  fi
fi

if ! command -v podman >/dev/null 2>&1 || [[ -z "$(runc_path)" ]]; then
  say "no container tool: no working Docker engine (docker info), and no podman with runc (install podman and runc, or run as root on Debian to have them installed)"
  exit 3
fi

if ((engine_only)); then
  echo podman
else
  echo "podman --runtime $(runc_path)"
fi
