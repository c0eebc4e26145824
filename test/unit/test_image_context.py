"""The Dockerfile's build context: everything it COPYs from the context is let through by
.dockerignore (which shuts out everything else), so `make image` cannot fail on a file the
context does not carry, and nothing but what it copies goes to the build."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def context_copies() -> set[str]:
    """The sources of every COPY that reads the build context (not ``--from=`` a stage)."""
    sources: set[str] = set()
    for line in (ROOT / "Dockerfile").read_text().splitlines():
        words = line.split()
        if not words or words[0] != "COPY" or any(w.startswith("--from") for w in words):
            continue
        args = [w for w in words[1:] if not w.startswith("--")]
        sources.update(a.rstrip("/") for a in args[:-1])
    return sources


def let_through() -> set[str]:
    """What .dockerignore re-includes after its leading ``*``."""
    lines = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*", ".dockerignore starts by shutting everything out"
    return {re.sub(r"^!|/$", "", line) for line in lines if line.startswith("!")}


def test_every_file_the_dockerfile_copies_is_in_the_build_context() -> None:
    copies = context_copies()
    assert copies, "the Dockerfile copies from its context"
    assert copies <= let_through(), f"not in the context: {sorted(copies - let_through())}"
    for source in copies:
        assert (ROOT / source).exists(), source


def test_nothing_else_goes_into_the_build_context() -> None:
    assert let_through() == context_copies()
