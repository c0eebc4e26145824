"""The product's wheel holds the product alone, and installs and runs without the stage.

The wheels are built as the Dockerfile builds the product's (from a copy of what it copies,
with the locked build backend, no index), and installed into an empty environment with the
product's locked dependencies only, as the image has them. Everything comes from uv's cache,
which `make setup` filled: no network.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import ome

ROOT = Path(__file__).resolve().parents[2]
STAGE_ONLY = ("aiohttp", "jsonschema")


def uv() -> str:
    path = subprocess.run(
        [str(ROOT / "hack" / "uv.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    return path


def run(*cmd: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stderr}{proc.stdout}"
    return proc.stdout


def build_wheel(src: Path, out: Path) -> Path:
    run(uv(), "build", "--wheel", "--offline", "--no-build-isolation", "--python",
        str(ROOT / ".venv" / "bin" / "python"), "--out-dir", str(out), str(src))  # fmt: skip
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def product_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("product-src")
    shutil.copy(ROOT / "pyproject.toml", src)
    shutil.copy(ROOT / "README.md", src)
    shutil.copytree(ROOT / "pkg", src / "pkg", ignore=shutil.ignore_patterns("*.egg-info"))
    return build_wheel(src, tmp_path_factory.mktemp("product-dist"))


def metadata(wheel: Path) -> tuple[list[str], email.message.Message, str]:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        [entry] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        return names, email.message_from_bytes(z.read(meta)), z.read(entry).decode()


def requirement_names(meta: email.message.Message) -> set[str]:
    return {
        r.split(";")[0].split("[")[0].strip().split(" ")[0].rstrip("<>=~!0123456789.,").lower()
        for r in meta.get_all("Requires-Dist") or []
    }


def test_the_product_wheel_holds_no_stage_module_and_no_ome_sim_command(
    product_wheel: Path,
) -> None:
    names, meta, entry_points = metadata(product_wheel)
    assert meta["Name"] == "ome-tpu-slices"
    assert meta["Version"] == ome.__version__
    assert not [n for n in names if n.startswith("ome_sim") or n.startswith("ome/sim")]
    assert "ome/entrypoints/manager.py" in names
    assert "ome/cli/plugin.py" in names
    assert "ome-manager = ome.entrypoints.manager:main" in entry_points
    assert "kubectl-ome = ome.cli.plugin:main" in entry_points
    assert "ome-sim" not in entry_points
    required = requirement_names(meta)
    assert "kubernetes" in required
    assert not required & set(STAGE_ONLY), required
    assert "Requires-Python: >=3.11" in str(meta)


def test_the_stage_wheel_holds_ome_sim_and_pins_the_product(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    src = tmp_path_factory.mktemp("stage-src")
    shutil.copy(ROOT / "stage" / "pyproject.toml", src)
    shutil.copytree(ROOT / "stage" / "ome_sim", src / "ome_sim")
    wheel = build_wheel(src, tmp_path_factory.mktemp("stage-dist"))
    names, meta, entry_points = metadata(wheel)
    assert meta["Name"] == "ome-sim"
    assert meta["Version"] == ome.__version__
    assert "ome_sim/gke/crds/slices.accelerator.gke.io.yaml" in names
    assert not [n for n in names if n.startswith("ome/")]
    assert "ome-sim = ome_sim.cli:main" in entry_points
    assert f"ome-tpu-slices=={ome.__version__}" in meta.get_all("Requires-Dist")
    assert set(STAGE_ONLY) <= requirement_names(meta)


def test_the_product_wheel_installs_and_runs_without_the_stage(
    product_wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    # The product's locked dependencies alone (no dev tools, no workspace member), as the
    # image's requirements/manager.txt has them; then the wheel, without resolving again.
    run(uv(), "sync", "--locked", "--offline", "--no-default-groups", "--no-install-workspace",
        "--quiet", "--python", str(ROOT / ".venv" / "bin" / "python"),
        env={"UV_PROJECT_ENVIRONMENT": str(venv)})  # fmt: skip
    run(uv(), "pip", "install", "--offline", "--no-deps", "--quiet", "--python",
        str(venv / "bin" / "python"), str(product_wheel))  # fmt: skip
    bin_ = venv / "bin"
    clean = {"PATH": "/usr/bin:/bin", "OME_GIT_COMMIT": ""}
    assert run(str(bin_ / "ome-manager"), "--version", env=clean) == (
        f"ome-manager {ome.__version__}\n"
    )
    assert run(str(bin_ / "kubectl-ome"), "version", env=clean) == (
        f"kubectl-ome {ome.__version__}\n"
    )
    assert not (bin_ / "ome-sim").exists()
    installed = run(uv(), "pip", "list", "--python", str(bin_ / "python"), "--format", "freeze")
    names = {line.split("==")[0].lower() for line in installed.split()}
    assert "ome-tpu-slices" in names
    assert "ome-sim" not in names
    assert "jsonschema" not in names
    # aiohttp is there only as the kubernetes client's own requirement (kubernetes 36 and
    # later require it for their asyncio client), never as the product's.
    kube_requires = run(str(bin_ / "python"), "-c",
        "from importlib.metadata import requires; print(requires('kubernetes'))")  # fmt: skip
    assert ("aiohttp" in names) == ("aiohttp" in kube_requires)
    proc = subprocess.run([str(bin_ / "python"), "-c", "import ome_sim"], capture_output=True)
    assert proc.returncode != 0
