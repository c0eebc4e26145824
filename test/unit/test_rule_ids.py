"""The rule-ID check of ``make lint`` (hack/check-rule-ids.py), run as make runs it: on a tree
of our own, where a cited known ID passes and an unknown one fails with its path and line,
on look-alikes that are no citations, and on the repository itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "hack" / "check-rule-ids.py"

#: IDs no heading defines, and look-alikes, spelt in halves: the check reads this file too,
#: which must not cite them itself.
Z9, Q1, Q7, G3_1 = "Z" + "9", "Q" + "1", "Q" + "7", "G3" + ".1"
N3, R4 = "N" + "3", "R" + "4"

RULES = """\
# Rules

## B. Shape

### B6. The demand of an Instance

1. First.
2. Second.
   1. Not a step of B6: a sub-item.
3. Third.

## G. Release

### G3. The sweep of unwanted Slices

Wanted slots.
"""
#: The citations the rules page above makes itself: its two headings, and B6 in an item.
RULES_CITE = 3


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *args], capture_output=True, text=True, timeout=60
    )


def tree(tmp_path: Path, files: dict[str, str], rules: str = RULES) -> Path:
    for name, text in {"docs/rules.md": rules, **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


GOOD_MODULE = '''\
"""The sweep (G3), from the demand (B6.2)."""

# B6.3 and G3's wanted slots.
X = 1
'''


def test_a_cited_known_id_passes(tmp_path: Path) -> None:
    root = tree(tmp_path, {"pkg/ome/sweep.py": GOOD_MODULE, "README.md": "As G3 says.\n"})
    done = run("--root", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"check-rule-ids: {4 + 1 + RULES_CITE} citations in 3 files resolve to the 2 rules of "
        "docs/rules.md"
    ]


def test_a_scratch_docstring_citing_z9_fails_with_its_path_and_line(tmp_path: Path) -> None:
    scratch = f'"""Scratch.\n\n{Z9}: a rule nobody wrote.\n"""\n'
    root = tree(tmp_path, {"pkg/ome/sweep.py": GOOD_MODULE, "pkg/ome/scratch.py": scratch})
    done = run("--root", str(root))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [f"pkg/ome/scratch.py:3: {Z9}"]
    assert done.stderr == (
        "check-rule-ids: 1 rule ID does not resolve to exactly one heading of docs/rules.md\n"
    )


@pytest.mark.parametrize(
    ("name", "text", "unresolved"),
    [
        pytest.param("docs/a.md", "See B6.3, then B6.4.\n", ["docs/a.md:1: B6.4"], id="no step 4"),
        pytest.param("test/t.py", f"x = 1  # G3, {G3_1}\n", [f"test/t.py:1: {G3_1}"], id="none"),
        pytest.param("docs/a.md", "x\nG4: none.\n", ["docs/a.md:2: G4"], id="markdown"),
        pytest.param("charts/v.yaml", f"a: 1  # {Q1}\n", [f"charts/v.yaml:1: {Q1}"], id="yaml"),
        pytest.param("hack/x.sh", "# E3/E7\n", ["hack/x.sh:1: E3", "hack/x.sh:1: E7"], id="a pair"),
        pytest.param("test/t.py", 'x = f"{y} (H2)"\n', ["test/t.py:1: H2"], id="an f-string"),
        pytest.param("test/t.py", 'param(id="B6.2 two topologies")\n', [], id="a pytest id"),
        pytest.param("stage/s.py", f'"""Broken: {Q7}\n', [f"stage/s.py:1: {Q7}"], id="not python"),
    ],
)
def test_what_counts_as_a_citation(
    tmp_path: Path, name: str, text: str, unresolved: list[str]
) -> None:
    done = run("--root", str(tree(tmp_path, {name: text})))
    if unresolved:
        assert (done.returncode, done.stdout.splitlines()) == (1, unresolved), done.stderr
    else:
        assert done.returncode == 0, done.stdout + done.stderr


LOOK_ALIKES = '''\
"""TPU v5p and tpu7x on 2x2x1 and 4x4x4 hosts; p99 and P99 latency; 0xA1 and #A1B2C3;
E2E tests; Z07:00 offsets; R0; {N3} fields; A-B3-C paths; a.B3 attributes."""

NAME = "node gke-tpu-pool-node-3"
REASON = "VALUE"
PATTERN = r"[-.+a-zA-Z0-9]*"
'''


def test_look_alikes_are_no_citations(tmp_path: Path) -> None:
    module = LOOK_ALIKES.replace("NAME", N3).replace("VALUE", R4)
    docs = "P50, P95 and P99; H100 and A100.\n"
    done = run("--root", str(tree(tmp_path, {"pkg/ome/names.py": module, "docs/p.md": docs})))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"check-rule-ids: {RULES_CITE} citations in 3 files")


def test_an_id_defined_twice_fails(tmp_path: Path) -> None:
    done = run("--root", str(tree(tmp_path, {}, RULES + "\n### G3. Again\n")))
    assert done.returncode == 1
    assert done.stdout.splitlines() == ["docs/rules.md:18: G3 is defined again (first at line 14)"]


def test_what_make_and_pip_leave_is_not_read(tmp_path: Path) -> None:
    cited = f"{Z9}\n"
    root = tree(
        tmp_path,
        {
            "pkg/ome_x.egg-info/PKG-INFO": cited,
            "pkg/ome/__pycache__/m.txt": cited,
            "pkg/.cache/m.txt": cited,
            "pkg/ome/blob.bin": f"{Z9}\0",
        },
    )
    done = run("--root", str(root))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_repository_passes() -> None:
    done = run()
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("check-rule-ids: ")


def test_help() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "docs/rules.md" in done.stdout
    assert "path:line: ID" in done.stdout
