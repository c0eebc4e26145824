#!/usr/bin/env bash
# Print the path of a working Python interpreter:
#
#   hack/find-python.sh 3.13     Python 3.13: `python3.13` on the PATH when it runs, else
#                                pyenv's (${PYENV_ROOT:-~/.pyenv}/versions/3.13.*), whose
#                                shims run only the version pyenv has selected
#   hack/find-python.sh PATH     that interpreter, if it runs
#
# It fails, saying so in one line, when there is none.
set -euo pipefail

case "${1:-}" in
  -h | --help | "") sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; [[ -n "${1:-}" ]]; exit ;;
esac
want="$1"
if [[ "$want" == */* ]]; then
  if "$want" --version >/dev/null 2>&1; then
    echo "$want"
    exit 0
  fi
  echo "find-python: $want does not run" >&2
  exit 1
fi
if candidate="$(command -v "python$want")" && "$candidate" --version >/dev/null 2>&1; then
  echo "$candidate"
  exit 0
fi
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want"; do
  if [[ -x "$candidate" ]] && "$candidate" --version >/dev/null 2>&1; then
    echo "$candidate"
    exit 0
  fi
done
echo "find-python: no Python $want on the PATH or in pyenv's versions" >&2
exit 1
