"""The code that docs/commands.md and docs/architecture.md point to exists: every
``module:function`` they name (a method as ``Class.method``), and every module, is found in
pkg/ or stage/ by reading the source, so that a rename that forgets the docs fails here."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ("docs/commands.md", "docs/architecture.md")
#: Where each top-level package's source is.
SOURCES = {"ome": ROOT / "pkg", "ome_sim": ROOT / "stage"}
#: A code span that names a module, and perhaps a name in it: `ome.cli.plugin:main`.
REFERENCE = re.compile(r"`((?:ome|ome_sim)(?:\.[a-z_][a-z0-9_]*)*)(?::([A-Za-z_][\w.]*))?`")


def references() -> list[tuple[str, str, str]]:
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        found += [(page, m[1], m[2] or "") for m in REFERENCE.finditer(text)]
    return found


def module_file(module: str) -> Path | None:
    top, *rest = module.split(".")
    base = SOURCES[top].joinpath(top, *rest)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """What a module or class body defines: functions, classes, assignments, imports."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = node
    return names


@cache
def defined(module: str) -> dict[str, ast.AST]:
    path = module_file(module)
    assert path is not None
    return _names(ast.parse(path.read_text()).body)


def resolves(module: str, name: str) -> bool:
    scope = defined(module)
    for part in name.split("."):
        node = scope.get(part)
        if node is None:
            return False
        scope = _names(node.body) if isinstance(node, ast.ClassDef) else {}
    return True


def test_the_pages_name_code() -> None:
    assert len(references()) > 100, "the pattern no longer finds the pages' references"


@pytest.mark.parametrize(
    ("page", "module", "name"), sorted(set(references())), ids=lambda v: v or "-"
)
def test_each_reference_exists(page: str, module: str, name: str) -> None:
    assert module_file(module) is not None, f"{page}: no module {module}"
    if name:
        assert resolves(module, name), f"{page}: {module} defines no {name}"


def test_a_reference_to_nothing_fails() -> None:
    assert module_file("ome.cli.nothing") is None
    assert not resolves("ome.cli.plugin", "no_such_function")
    assert not resolves("ome.controllers.slices.act", "SliceActor.no_such_method")
    assert resolves("ome.controllers.slices.act", "SliceActor.apply_gate_plan")
