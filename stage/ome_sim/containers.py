"""The container tool, as the stage runs containers: hack/container-tools.sh's choice (a
Docker whose engine answers, else podman with runc), and the flags every ``run`` needs here.

podman's default ``run`` raises the containers' hard rlimits, which needs CAP_SYS_RESOURCE;
machines without it (these CI machines) fail with ``setrlimit RLIMIT_NOFILE: Operation not
permitted``, so `RUN_FLAGS` sets them to what the kubelet's containerd gives a container.
"""

from __future__ import annotations

import functools
import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RUN_FLAGS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


class ContainerToolError(RuntimeError):
    """No Docker engine and no podman with runc (hack/container-tools.sh's one line)."""


@functools.cache
def tool() -> tuple[str, ...]:
    """The container tool's command, e.g. ``("podman", "--runtime", "/usr/sbin/runc")``."""
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "container-tools.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise ContainerToolError(proc.stderr.strip().splitlines()[-1] if proc.stderr else "none")
    return tuple(shlex.split(proc.stdout.strip()))


def run_flags() -> tuple[str, ...]:
    """What ``run`` needs on this tool beyond the caller's flags."""
    return RUN_FLAGS if tool()[0] == "podman" else ()


def hack(script: str, *args: str) -> str:
    """What a hack/ script that only reports (``--name``, ``--dir``) prints."""
    out = subprocess.run(
        ["bash", str(ROOT / "hack" / script), *args], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def image_name() -> str:
    """The manager's image as hack/image.sh tags it."""
    return hack("image.sh", "--name")


def inspect(ref: str) -> dict[str, Any]:
    """``image inspect`` of ``ref``, or {} when the tool has no such image."""
    proc = subprocess.run(
        [*tool(), "image", "inspect", ref], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return {}
    data = json.loads(proc.stdout)
    return data[0] if data else {}
