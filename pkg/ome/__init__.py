"""OME on-demand TPU slice provisioning for OMENative inference services.

The product is this package alone. The stage it is tried on (the embedded API server, the
provider simulator, ``ome-sim``) is the separate distribution ``ome-sim`` (package
``ome_sim``), which this package never imports.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from importlib import metadata as _metadata
from pathlib import Path

try:
    __version__ = _metadata.version("ome-tpu-slices")
except _metadata.PackageNotFoundError:  # pragma: no cover - run from a tree not installed
    __version__ = "0.0.0"

#: Set in the image at build time (``docker build --build-arg GIT_COMMIT=...``).
COMMIT_ENV = "OME_GIT_COMMIT"


def user_agent(program: str) -> str:
    """The User-Agent a program of this project sends: ``<program>/<version>``."""
    return f"{program}/{__version__}"


def source_commit() -> str | None:
    """The git commit this code was built from, if known: ``$OME_GIT_COMMIT`` (the image's
    build argument), else, when the package runs from a checkout (an editable install), that
    checkout's HEAD as git prints it (12 hex digits, ``-dirty`` after it when files differ).
    None when neither is there, as in a wheel installed from an index."""
    baked = os.environ.get(COMMIT_ENV, "").strip()
    if baked:
        return baked
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists() or not (root / "pkg" / "ome").is_dir():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", "pkg"],
            capture_output=True,
            timeout=5,
            check=False,
        ).returncode
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty == 1 else head or None


def version_line(program: str) -> str:
    """What ``--version`` prints: ``<program> <version>``, and ``(commit <c>)`` when known."""
    commit = source_commit()
    return f"{program} {__version__}" + (f" (commit {commit})" if commit else "")


class VersionAction(argparse.Action):
    """``--version`` that asks git for the commit only when it is given (argparse's own
    ``version`` action takes a string built up front, which would run git on every start)."""

    def __init__(self, option_strings: list[str], dest: str, program: str = "", **kwargs: object):
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version"
        )
        self.program = program

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(version_line(self.program or parser.prog) + "\n")
        parser.exit()
