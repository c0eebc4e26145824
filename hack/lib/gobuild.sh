# shellcheck shell=bash
# What hack/kube-binaries.sh and hack/node-binaries.sh share: building pinned Go programs
# from their modules, with progress, into a temporary directory that is moved into the
# machine-wide cache only when everything is built. Sourced, never run; the sourcing script
# defines say() and sets KUBE_VERSION, STAGING_VERSION, GO_MIN, BINARIES and DEST first, and
# WORK before it builds.

have_all() {
  local b
  for b in "${BINARIES[@]}"; do
    [[ -x "$DEST/$b" ]] || return 1
  done
  [[ -f "$DEST/VERSIONS" ]]
}

# cached_or_go_on "$@": the scripts' command line. --check (exit 0 when all are built, 1
# when not), --dir (print $DEST), --help (the script's lines 2-8); with no argument, print
# $DEST and exit when all are built, else return, to build.
cached_or_go_on() {
  case "${1:-}" in
    "") ;;
    --check) have_all && exit 0 || exit 1 ;;
    --dir) echo "$DEST"; exit 0 ;;
    -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) say "unknown argument '$1' (try --help)"; exit 2 ;;
  esac
  if have_all; then
    echo "$DEST"
    exit 0
  fi
}

# need_go WHY: exit 3 unless a Go of at least $GO_MIN is on the PATH (WHY says whose go.mod
# asks for it); sets go_version.
need_go() {
  command -v go >/dev/null 2>&1 || { say "needs go on the PATH"; exit 3; }
  go_version="$(go env GOVERSION)"
  go_version="${go_version#go}"
  if [[ "$(printf '%s\n%s\n' "$GO_MIN" "$go_version" | sort -V | head -n1)" != "$GO_MIN" ]]; then
    say "needs Go >= $GO_MIN ($1), found go$go_version"
    exit 3
  fi
}

# work_dir NAME: WORK, a temporary directory for the build, removed when the script exits.
work_dir() {
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")"
  # shellcheck disable=SC2064 # expanded now, on purpose: this directory, whatever WORK becomes
  trap "rm -rf '$WORK'" EXIT
}

# tools_go DIR PACKAGE...: a tools.go in DIR that imports each PACKAGE, so that `go mod
# tidy` resolves them and `go build` can build them.
tools_go() {
  local dir=$1 p
  shift
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
    printf ')\n'
  } >"$dir/tools.go"
}

gobuild_started=$SECONDS
elapsed() {
  printf '%dm%02ds' $(((SECONDS - gobuild_started) / 60)) $(((SECONDS - gobuild_started) % 60))
}

export GOFLAGS="${GOFLAGS:-} -mod=mod -trimpath"
export GOTOOLCHAIN=local
export CGO_ENABLED=0

# build_one MODULE_DIR PACKAGE OUTPUT [LDFLAGS [TAGS]]: go build with a progress line every
# 200 packages compiled, out of the package's stale dependency count.
build_one() {
  local dir=$1 pkg=$2 out=$3 ldflags=${4:-} tags=${5:-}
  local total done_=0 line
  total="$( (cd "$dir" && go list -tags "$tags" -deps -f '{{if .Stale}}x{{end}}' "$pkg") | grep -c x || true)"
  say "[$(elapsed)] compiling $(basename "$out"): $total packages"
  (cd "$dir" && go build -v -tags "$tags" -ldflags "$ldflags" -o "$out" "$pkg" 2>&1) | while IFS= read -r line; do
    case "$line" in
      *.go:[0-9]*) printf '%s\n' "$line" >&2 ;;
      *)
        done_=$((done_ + 1))
        if ((done_ % 200 == 0)); then
          say "[$(elapsed)] $(basename "$out"): $done_/$total packages compiled"
        fi
        ;;
    esac
  done
  [[ -x "$out" ]] || { say "building $pkg failed (see the lines above)"; exit 1; }
  say "[$(elapsed)] built $(basename "$out")"
}

# kube_module DIR COMMAND...: a module that requires k8s.io/kubernetes@$KUBE_VERSION and
# imports k8s.io/kubernetes/cmd/COMMAND... `go install k8s.io/kubernetes/cmd/...@v` cannot
# work: Kubernetes' go.mod replaces each k8s.io/* staging module with a local path, so this
# module replaces each (the replace block of that version's go.mod) with its published twin
# at $STAGING_VERSION. Sets KUBE_SRC to the downloaded source of k8s.io/kubernetes, and
# KUBE_LDFLAGS to the version stamps `kubectl version` and /version read.
kube_module() {
  local dir=$1 json gomod m minor p
  shift
  mkdir -p "$dir"
  say "[$(elapsed)] fetching the replace block of k8s.io/kubernetes@$KUBE_VERSION"
  json="$(cd "$dir" && GOFLAGS='' go mod download -json "k8s.io/kubernetes@$KUBE_VERSION")"
  gomod="$(sed -n 's/.*"GoMod": "\(.*\)",*/\1/p' <<<"$json")"
  KUBE_SRC="$(sed -n 's/.*"Dir": "\(.*\)",*/\1/p' <<<"$json")"
  [[ -f "$gomod" && -d "$KUBE_SRC" ]] || { say "could not download k8s.io/kubernetes@$KUBE_VERSION"; exit 1; }
  local staging
  mapfile -t staging < <(sed -n '/^replace (/,/^)/p' "$gomod" | awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}')
  ((${#staging[@]} > 0)) || { say "no staging modules found in $gomod"; exit 1; }
  {
    echo "module ome.local/$(basename "$dir")"
    echo
    echo "go $GO_MIN"
    echo
    echo "require k8s.io/kubernetes $KUBE_VERSION"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do
      echo "	$m => $m $STAGING_VERSION"
    done
    echo ")"
  } >"$dir/go.mod"
  tools_go "$dir" "${@/#/k8s.io/kubernetes/cmd/}"
  say "[$(elapsed)] resolving ${#staging[@]} staging modules at $STAGING_VERSION (go mod tidy)"
  (cd "$dir" && go mod tidy)
  minor="${KUBE_VERSION#v1.}"
  minor="${minor%%.*}"
  KUBE_LDFLAGS="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    KUBE_LDFLAGS+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    KUBE_LDFLAGS+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
}

# install_built: move $WORK/bin into $DEST, whole, and print $DEST.
install_built() {
  mkdir -p "$(dirname "$DEST")"
  rm -rf "$DEST.partial"
  mv "$WORK/bin" "$DEST.partial"
  rm -rf "$DEST"
  mv "$DEST.partial" "$DEST"
  say "[$(elapsed)] done: $DEST"
  echo "$DEST"
}
