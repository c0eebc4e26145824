#!/usr/bin/env bash
# Run the suite of `make test` (without lint) on several Pythons, each in its own environment
# built from the same uv.lock (.venv-<version>):
#
#   hack/pythons.sh                 every Python 3.11 and later this machine has
#   hack/pythons.sh 3.12 3.13       these, failing when one is missing
#
# hack/find-python.sh finds each interpreter: `pythonX.Y` on the PATH (when it runs), else in
# pyenv's versions directory ($PYENV_ROOT, default ~/.pyenv). uv never downloads one (UV_PYTHON_DOWNLOADS=never):
# the machines this project runs on reach PyPI, not python-build-standalone's releases.
# Extra pytest arguments: PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac

UV="$(hack/uv.sh)"
export UV_PYTHON_DOWNLOADS=never

find_python() {  # <X.Y>: print the path of a working interpreter, or nothing
  hack/find-python.sh "$1" 2>/dev/null || true
}

if [[ $# -gt 0 ]]; then
  wanted=("$@")
  strict=1
else
  wanted=(3.11 3.12 3.13 3.14 3.15)
  strict=0
fi

declare -a tested=() missing=()
for v in "${wanted[@]}"; do
  python="$(find_python "$v")"
  if [[ -z "$python" ]]; then
    missing+=("$v")
    continue
  fi
  echo "== Python $v ($python)"
  UV_PROJECT_ENVIRONMENT=".venv-$v" "$UV" sync --locked --quiet --python "$python"
  # shellcheck disable=SC2086  # PYTEST_ARGS is a list of arguments
  ".venv-$v/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-}
  tested+=("$("$python" -c 'import platform; print(platform.python_version())')")
done
echo "pythons: the suite passed on Python ${tested[*]:-(none)}"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "pythons: not on this machine, so not tested: Python ${missing[*]}" >&2
  if [[ $strict -eq 1 || ${#tested[@]} -eq 0 ]]; then
    exit 1
  fi
fi
