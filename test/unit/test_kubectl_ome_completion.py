"""``kubectl ome completion bash|zsh``: the script is valid bash, and sourced in bash it
completes what a user types: subcommands, the flags of the command typed so far, the choices
of ``-o``, ``--component`` and the shell, and the contexts of the line's own kubeconfig
(through kubectl). Zsh runs the same script through ``bashcompinit``; zsh is not installed
here, so its script is run by bash with that one zsh builtin stubbed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PLUGIN = Path(sys.executable).parent / "kubectl-ome"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="no bash")


def script(shell: str) -> str:
    proc = subprocess.run(
        [str(PLUGIN), "completion", shell], capture_output=True, text=True, timeout=60, check=True
    )
    assert proc.stderr == ""
    return proc.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "kubectl-ome.bash"
    path.write_text(script("bash"))
    return path


def complete(path: Path, *words: str, prelude: str = "") -> list[str]:
    """What bash offers for the command line ``words`` (the last one is being typed), with the
    script at ``path`` sourced, through the function ``complete -p`` names."""
    line = " ".join(f"'{w}'" for w in words)
    program = f"""{prelude}
source '{path}'
spec="$(complete -p kubectl-ome)"
function="${{spec#*-F }}"; function="${{function%% *}}"
COMP_WORDS=({line}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))
"$function"
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    assert BASH is not None
    proc = subprocess.run(
        [BASH, "--norc", "-c", program], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def test_the_bash_script_is_valid_bash(bash_script: Path) -> None:
    assert BASH is not None
    subprocess.run([BASH, "-n", str(bash_script)], check=True, timeout=60)
    shellcheck = Path(sys.executable).parent / "shellcheck"  # make setup installs it
    if shellcheck.exists():
        proc = subprocess.run(
            [str(shellcheck), "-s", "bash", str(bash_script)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stdout


def test_it_completes_subcommands(bash_script: Path) -> None:
    assert complete(bash_script, "kubectl-ome", "sl") == ["slices"]
    assert complete(bash_script, "kubectl-ome", "") == [
        "instance",
        "version",
        "slices",
        "capacity",
        "plan",
        "completion",
    ]
    assert complete(bash_script, "kubectl-ome", "ca") == ["capacity"]
    assert complete(bash_script, "kubectl-ome", "-n", "team", "instance", "") == ["status"]
    assert complete(bash_script, "kubectl-ome", "completion", "") == ["bash", "zsh"]


def test_it_completes_the_flags_of_the_command_typed(bash_script: Path) -> None:
    assert complete(bash_script, "kubectl-ome", "slices", "--w") == ["--watch"]
    flags = complete(bash_script, "kubectl-ome", "slices", "-")
    assert {"-w", "--watch", "-o", "--output", "-A", "--context", "--kubeconfig"} <= set(flags)
    status = complete(bash_script, "kubectl-ome", "instance", "status", "--")
    assert "--component" in status and "--watch" not in status
    capacity = complete(bash_script, "kubectl-ome", "capacity", "--")
    assert "--accelerator" in capacity and "--watch" not in capacity
    assert complete(bash_script, "kubectl-ome", "capacity", "-o", "w") == ["wide"]
    plan = complete(bash_script, "kubectl-ome", "plan", "--")
    assert "--filename" in plan and "--output" not in plan


def test_it_completes_the_values_of_a_flag(bash_script: Path) -> None:
    assert complete(bash_script, "kubectl-ome", "slices", "-o", "") == [
        "table", "wide", "json", "yaml",
    ]  # fmt: skip
    assert complete(bash_script, "kubectl-ome", "slices", "-o", "y") == ["yaml"]
    line = ("kubectl-ome", "instance", "status", "svc", "0", "--component", "")
    assert complete(bash_script, *line) == ["engine", "decoder", "router"]
    # A flag's value never counts as a command: -n's value is no subcommand.
    assert complete(bash_script, "kubectl-ome", "-n", "slices", "sl") == ["slices"]


def test_it_completes_the_contexts_of_the_kubeconfig_on_the_line(
    bash_script: Path, tmp_path: Path
) -> None:
    assert shutil.which("kubectl"), "kubectl is on the PATH here and in CI; it reads the contexts"
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {"name": n, "context": {"cluster": "c", "user": "u"}}
                    for n in ("prod-east", "prod-west", "dev")
                ],
                "current-context": "dev",
            }
        )
    )
    line = ("kubectl-ome", "--kubeconfig", str(kubeconfig), "slices", "--context", "prod")
    assert complete(bash_script, *line) == ["prod-east", "prod-west"]
    # --flag=value: bash splits the word at "=".
    line = ("kubectl-ome", "--kubeconfig", "=", str(kubeconfig), "--context", "=", "d")
    assert complete(bash_script, *line) == ["dev"]


def test_the_zsh_script_runs_the_same_completion(tmp_path: Path) -> None:
    text = script("zsh")
    assert text.splitlines()[0] == "#compdef kubectl-ome"
    assert "bashcompinit" in text
    path = tmp_path / "_kubectl-ome"
    path.write_text(text)
    stubs = "autoload() { :; }; bashcompinit() { :; }"  # zsh's, here in bash
    assert complete(path, "kubectl-ome", "sl", prelude=stubs) == ["slices"]


def test_completion_needs_no_cluster(tmp_path: Path) -> None:
    proc = subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(tmp_path / "missing"), "completion", "bash"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0 and proc.stdout.startswith("# bash completion for kubectl-ome")
