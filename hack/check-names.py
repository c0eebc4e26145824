#!/usr/bin/env python3
"""Names that need no alias: fail when a module defines a top-level function or class named
like the module itself (``gate.py`` defining ``gate``), or when one class name is defined in
two places, in the trees given (``make lint`` gives ``pkg``). One line per finding, exit 1.

A module named like its own function is shadowed by the first local of that name, so every
import of it gets an alias; two classes of one name get one at the first module that needs
both. Written by hand with the standard library's ``ast``: neither ruff nor mypy checks a
module's name against what it defines, nor class names across modules.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def modules(roots: Iterable[Path]) -> Iterator[Path]:
    """Every ``.py`` file under the roots (or a root that is one), in path order."""
    for root in roots:
        yield from [root] if root.is_file() else sorted(root.rglob("*.py"))


def module_name(path: Path) -> str:
    """The name a file is imported by: its stem, or its package's for ``__init__.py``."""
    return path.parent.name if path.name == "__init__.py" else path.stem


def findings(roots: Iterable[Path]) -> list[str]:
    """The findings, each ``path:line: what``, sorted by path and line."""
    out: list[tuple[str, int, str]] = []
    classes: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for path in modules(roots):
        shown = str(path)
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=shown)
        except SyntaxError as e:
            out.append((shown, e.lineno or 0, f"cannot be read: {e.msg}"))
            continue
        except UnicodeDecodeError as e:
            out.append((shown, 0, f"cannot be read: {e}"))
            continue
        name = module_name(path)
        for node in tree.body:
            if isinstance(node, DEFINITIONS) and node.name == name:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                out.append((shown, node.lineno, f"module {name} defines a {kind} {name}"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes[node.name].append((shown, node.lineno))
    for cls, places in classes.items():
        if len(places) > 1:
            (first, line), *others = sorted(places)
            elsewhere = ", ".join(f"{p}:{n}" for p, n in others)
            out.append((first, line, f"class {cls} is defined again at {elsewhere}"))
    return [f"{path}:{line}: {what}" for path, line, what in sorted(out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hack/check-names.py",
        description=(
            "Fail when a module defines a top-level function or class of its own name, or a "
            "class name is defined twice, in the given trees: one line per finding, exit 1."
        ),
    )
    parser.add_argument(
        "roots", nargs="*", type=Path, default=[Path("pkg")], metavar="PATH",
        help="directories or .py files to check (default: pkg)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.exists()]
    if missing:
        parser.error(f"no such path: {', '.join(missing)}")
    found = findings(args.roots)
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
