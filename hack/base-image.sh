#!/usr/bin/env bash
# The manager image's base when no registry is reachable: Debian 12 (bookworm) with its own
# CPython 3.11, built with debootstrap from Debian's packages and imported into podman.
#
#   hack/base-image.sh           build it if podman does not have it, then print its name
#   hack/base-image.sh --check   exit 0 if podman has it, 1 if not; build nothing
#   hack/base-image.sh --name    print its name
#
# Why it can stand in for python:3.11-slim-bookworm (the Dockerfile's default base): both are
# Debian 12 with glibc 2.36 and a CPython 3.11. The product is pure Python, and every
# compiled dependency in requirements/manager.txt is a cp311 manylinux wheel, which needs
# only glibc; so the same wheels install into both, and the same code runs. What differs:
# CPython's patch release (Debian's 3.11.2 against the image's newest 3.11), its place
# (/usr/bin rather than /usr/local/bin; the Dockerfile calls `python3` from the PATH), and
# that Debian's Python has no pip or ensurepip (the Dockerfile's build stage installs
# python3.11-venv from Debian when it needs them; the runtime stage needs neither).
#
# The root file system is cached machine-wide as a tarball, like the kube binaries, so a
# fresh clone and CI reuse it:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/base/bookworm-python3.11.tar
# debootstrap runs in a temporary directory and the tarball is moved in only when whole.
# A first build takes about 75 s (docs/deploy.md); a warm one only imports the tarball (a few
# seconds), or does nothing when podman already has the image.
#
# Needs root (debootstrap), debootstrap and podman; hack/container-tools.sh installs them.
set -euo pipefail

SUITE=bookworm
PACKAGES=python3-minimal,python3.11-minimal,libpython3.11-stdlib,ca-certificates
NAME="localhost/ome-base/python:3.11-${SUITE}"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/ome-tpu-slices/base"
TARBALL="$CACHE/${SUITE}-python3.11.tar"

say() { printf 'base-image: %s\n' "$*" >&2; }

has_image() { podman image exists "$NAME" 2>/dev/null; }

case "${1:-}" in
  "") ;;
  --check) has_image && exit 0 || exit 1 ;;
  --name) echo "$NAME"; exit 0 ;;
  -h | --help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) say "unknown argument '$1' (try --help)"; exit 2 ;;
esac

if has_image; then
  echo "$NAME"
  exit 0
fi

# The Debian mirror apt already uses (deb822 or one-line sources), else Debian's own.
mirror() {
  local m
  m="$(grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | awk '{print $2}' | grep -v security | head -n1 || true)"
  if [[ -z "$m" ]]; then
    m="$(grep -hsE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '{print $2}' | grep -v security | head -n1 || true)"
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

if [[ ! -s "$TARBALL" ]]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "debootstrap is not installed (hack/container-tools.sh installs it)"
    exit 3
  fi
  if ((EUID != 0)); then
    say "debootstrap needs root to build the base image; run as root, or use Docker with a registry"
    exit 3
  fi
  mkdir -p "$CACHE"
  work="$(mktemp -d "$CACHE/.build.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  started=$SECONDS
  say "debootstrap $SUITE ($PACKAGES) from $(mirror); about 75 s the first time"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$work/root" "$(mirror)" \
    >"$work/debootstrap.log" 2>&1 || {
    say "debootstrap failed; its last lines:"
    tail -n 15 "$work/debootstrap.log" >&2
    exit 1
  }
  # What an image needs none of: apt's lists and caches, documentation and man pages.
  rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin \
    "$work/root/var/cache/apt/archives/"*.deb "$work/root/usr/share/doc/"* \
    "$work/root/usr/share/man/"* "$work/root/var/log/"*
  tar -C "$work/root" --numeric-owner -cf "$work/root.tar" .
  mv "$work/root.tar" "$TARBALL"
  say "built $TARBALL in $((SECONDS - started)) s"
fi

say "importing $TARBALL as $NAME"
podman import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  "$TARBALL" "$NAME" >/dev/null
echo "$NAME"
