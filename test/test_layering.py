"""Product code never imports the simulator: ``ome_sim`` sits to one side of the layers."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pkg" / "ome"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    package = ".".join(path.relative_to(PKG.parent).with_suffix("").parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                names.add(".".join([*base, node.module or ""]).rstrip("."))
            elif node.module:
                names.add(node.module)
    return names


def test_no_product_module_imports_ome_sim() -> None:
    offenders = []
    for path in PKG.rglob("*.py"):
        bad = sorted(n for n in _imports(path) if n == "ome_sim" or n.startswith("ome_sim."))
        if bad:
            offenders.append(f"{path.relative_to(PKG.parent)} imports {', '.join(bad)}")
    assert not offenders, "\n".join(offenders)
    assert any(PKG.rglob("*.py")), "the check must see the package"
    assert not (PKG / "sim").exists(), "the stage lives in stage/ome_sim, not in the product"
