"""``hack/check-names.py`` (run by ``make lint``): a module that defines a function or class of
its own name, or a class name defined twice, fails with one line per finding; a clean tree and
the product's own ``pkg/`` pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "check-names.py"


def check(*args: str | Path, cwd: Path = ROOT) -> tuple[int, list[str]]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not proc.stderr, proc.stderr
    return proc.returncode, proc.stdout.splitlines()


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "pkg/app/__init__.py": '"""An app."""\n',
    "pkg/app/readiness.py": "def judge_slots() -> None:\n    pass\n\n\nclass SlotVerdicts:\n    pass\n",
    "pkg/app/releases.py": "class Delete:\n    pass\n\n\ndef release() -> None:\n    pass\n",
    # A local of the module's name is no definition, and a method may share it.
    "pkg/app/gate.py": "class Gate:\n    def gate(self) -> None:\n        gate = 1\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert check("pkg", cwd=tree(tmp_path, CLEAN)) == (0, [])


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"pkg/app/gate.py": "import os\n\n\ndef gate() -> None:\n    pass\n"},
            ["pkg/app/gate.py:4: module gate defines a function gate"],
            id="a function of the module's name",
        ),
        pytest.param(
            {"pkg/app/loss.py": "async def loss() -> None:\n    pass\n"},
            ["pkg/app/loss.py:1: module loss defines a function loss"],
            id="an async function of the module's name",
        ),
        pytest.param(
            {"pkg/app/thing.py": "class thing:\n    pass\n"},
            ["pkg/app/thing.py:1: module thing defines a class thing"],
            id="a class of the module's name",
        ),
        pytest.param(
            {"pkg/app/demand/__init__.py": "def demand() -> None:\n    pass\n"},
            ["pkg/app/demand/__init__.py:1: module demand defines a function demand"],
            id="a package's __init__ defining the package's name",
        ),
        pytest.param(
            {
                "pkg/app/controller.py": "class Gated:\n    pass\n",
                "pkg/app/sub/gating.py": "\n\nclass Gated:\n    pass\n",
            },
            ["pkg/app/controller.py:1: class Gated is defined again at pkg/app/sub/gating.py:3"],
            id="one class name in two modules",
        ),
        pytest.param(
            {
                "pkg/app/a.py": "class Verdict:\n    pass\n",
                "pkg/app/b.py": "def f() -> None:\n    class Verdict:\n        pass\n",
                "pkg/app/c.py": "class Verdict:\n    pass\n",
            },
            ["pkg/app/a.py:1: class Verdict is defined again at pkg/app/b.py:2, pkg/app/c.py:1"],
            id="three times, one nested: one line",
        ),
        pytest.param(
            {
                "pkg/app/gate.py": "def gate() -> None:\n    pass\n",
                "pkg/app/x.py": "class Hold:\n    pass\n",
                "pkg/app/y.py": "class Hold:\n    pass\n",
            },
            [
                "pkg/app/gate.py:1: module gate defines a function gate",
                "pkg/app/x.py:1: class Hold is defined again at pkg/app/y.py:1",
            ],
            id="one line per finding",
        ),
    ],
)
def test_a_collision_fails_with_one_line_each(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    assert check("pkg", cwd=tree(tmp_path, {**CLEAN, **files})) == (1, expected)


def test_a_file_that_does_not_parse_is_a_finding(tmp_path: Path) -> None:
    code, lines = check("pkg", cwd=tree(tmp_path, {**CLEAN, "pkg/app/broken.py": "def (:\n"}))
    assert code == 1
    [line] = lines
    assert line.startswith("pkg/app/broken.py:1: cannot be read: "), line


def test_the_default_tree_is_pkg(tmp_path: Path) -> None:
    root = tree(tmp_path, {**CLEAN, "pkg/app/provision.py": "def provision() -> None: ...\n"})
    assert check(cwd=root) == (
        1,
        ["pkg/app/provision.py:1: module provision defines a function provision"],
    )


def test_a_missing_path_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "nowhere"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "no such path: nowhere" in proc.stderr


def test_the_products_pkg_passes() -> None:
    assert check("pkg") == (0, [])
