"""The repository stands on its own: every symbolic link git tracks leads to a file inside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tracked_links() -> list[Path]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: no index to read the links from")
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-s"], capture_output=True, text=True, check=True
    ).stdout
    return [ROOT / line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("120000")]


def test_every_tracked_link_leads_to_a_file_in_the_repository() -> None:
    links = tracked_links()
    broken = [
        f"{link.relative_to(ROOT)} -> {link.readlink()}"
        for link in links
        if not link.resolve().is_file() or not link.resolve().is_relative_to(ROOT)
    ]
    assert not broken, "links that lead nowhere or out of the repository:\n" + "\n".join(broken)
    assert links, "the e2e suite's Slice CRD is a link: the check must see it"
