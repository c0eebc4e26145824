#!/usr/bin/env bash
# The project's one version is the product's, in pyproject.toml ([project] version). This
# writes it into every other place that names it, or checks that they all agree:
#   stage/pyproject.toml           the stage's version, and its pin of the product
#   charts/ome-resources/Chart.yaml  the chart's version and appVersion
#   config/manager/manager.yaml    the manager image's tag
#   README.md, docs/deploy.md, charts/ome-resources/README.md and values.yaml,
#   config/samples/values.yaml, Dockerfile   the commands and comments that quote it
#
#   hack/version.sh X.Y.Z    set the version to X.Y.Z everywhere (make version VERSION=X.Y.Z,
#                            which then runs make lock)
#   hack/version.sh --check  fail, naming each place, when one disagrees (make lint)
set -euo pipefail
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") echo "version.sh: give X.Y.Z or --check (try --help)" >&2; exit 2 ;;
esac

exec python3 - "$1" <<'PY'
"""Each place that names the version: a file and a pattern whose group 1 is the version."""
import re
import sys
import tomllib
from pathlib import Path

VERSION = r"([0-9]+\.[0-9]+\.[0-9]+(?:[-.+a-zA-Z0-9]*)?)"
PLACES = [
    ("stage/pyproject.toml", r'(?m)^version = "' + VERSION + '"$'),
    ("stage/pyproject.toml", r'"ome-tpu-slices==' + VERSION + '"'),
    ("charts/ome-resources/Chart.yaml", r"(?m)^version: " + VERSION + "$"),
    ("charts/ome-resources/Chart.yaml", r'(?m)^appVersion: "' + VERSION + '"$'),
    ("config/manager/manager.yaml", r"(?m)image: ghcr\.io/moirai-internal/ome-manager:" + VERSION + "$"),
    ("README.md", r"--namespace ome --version " + VERSION + " "),
    ("docs/deploy.md", r"ome-manager:" + VERSION + " "),
    ("charts/ome-resources/README.md", r"--namespace ome --version " + VERSION + " "),
    ("charts/ome-resources/README.md", r"chart's `appVersion` \(`" + VERSION + r"`\)"),
    ("charts/ome-resources/values.yaml", r"the chart's appVersion \(" + VERSION + r"\)"),
    ("config/samples/values.yaml", r"--namespace ome --version " + VERSION + " "),
    ("Dockerfile", r"ome-manager:" + VERSION + " "),
]

arg = sys.argv[1]
truth = tomllib.loads(Path("pyproject.toml").read_text())["project"]["version"]
if arg != "--check":
    # X.Y.Z only: Python normalizes a pre-release (1.4.0-rc1 -> 1.4.0rc1), Helm and image
    # tags do not, and the five places must print the same string.
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", arg):
        sys.exit(f"version.sh: {arg!r} is not a release version X.Y.Z")
    text = Path("pyproject.toml").read_text()
    text, n = re.subn(r'(?m)^version = "' + re.escape(truth) + '"$', f'version = "{arg}"', text, 1)
    if n != 1:
        sys.exit("version.sh: no [project] version line in pyproject.toml")
    Path("pyproject.toml").write_text(text)
bad = []
for name, pattern in PLACES:
    path = Path(name)
    text = path.read_text()
    found = [m for m in re.finditer(pattern, text)]
    if not found:
        bad.append(f"{name}: nothing matches {pattern!r}")
        continue
    if arg == "--check":
        bad += [f"{name}: says {m.group(1)}, not {truth}" for m in found if m.group(1) != truth]
        continue
    for m in reversed(found):
        text = text[: m.start(1)] + arg + text[m.end(1) :]
    path.write_text(text)
if bad:
    print("version.sh: the version in pyproject.toml is " + truth + "; elsewhere:", file=sys.stderr)
    for line in bad:
        print("  " + line, file=sys.stderr)
    sys.exit(1)
if arg != "--check":
    print(f"version.sh: {truth} -> {arg} in pyproject.toml and {len(PLACES)} other places", file=sys.stderr)
PY
