"""The repository stands on its own: every symbolic link in it leads to a file inside it."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What make and git keep beside the sources (environments, caches, the run's files).
NOT_SOURCES = {"__pycache__", "build", "dist"}  # and every hidden one but .ci


def links() -> list[Path]:
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [
            d for d in dirs if d not in NOT_SOURCES and (not d.startswith(".") or d == ".ci")
        ]
        found += [Path(top) / f for f in files if (Path(top) / f).is_symlink()]
    return found


def test_every_link_leads_to_a_file_in_the_repository() -> None:
    found = links()
    broken = [
        f"{link.relative_to(ROOT)} -> {link.readlink()}"
        for link in found
        if not link.resolve().is_file() or not link.resolve().is_relative_to(ROOT)
    ]
    assert not broken, "links that lead nowhere or out of the repository:\n" + "\n".join(broken)
    assert ROOT / "test/e2e/crds/slices.accelerator.gke.io.yaml" in found, "the check must see it"
