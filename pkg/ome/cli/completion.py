"""``kubectl ome completion bash|zsh``: a shell script that completes kubectl-ome's commands,
flags and their values, generated from the command line's own parser so that the two cannot
drift.

Written by hand: argcomplete and shtab, the libraries that do this for argparse, are not among
the project's dependencies, and the script is small. Zsh runs the bash script through its
``bashcompinit`` emulation, as many tools' zsh completions do, so one function serves both.

What it completes: subcommands, then the flags of the command typed so far (after ``-``); the
choices of a flag or argument that has them (``-o``, ``--component``, ``completion``'s shell);
kubeconfig files; and, through ``kubectl`` with the line's own ``--kubeconfig``,
``--context`` and ``--namespace``, contexts, namespaces and InferenceServices.

Pure: the parser in, the script's text out.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ome.api.v1beta1 import COMPONENTS

SHELLS = ("bash", "zsh")

#: The completion function, and the command it completes.
FUNCTION = "_kubectl_ome"
COMMAND = "kubectl-ome"

#: Values no parser's ``choices`` lists: what each destination completes with. A kind in
#: capitals is read live (``_DYNAMIC``); a tuple is a fixed list of words.
_VALUES: dict[str, str | tuple[str, ...]] = {
    "kubeconfig": "FILE",
    "filename": "FILE",
    "context": "CONTEXT",
    "namespace": "NAMESPACE",
    "ome_namespace": "NAMESPACE",
    "component": COMPONENTS,
    "name": "INFERENCESERVICE",
    "service": "INFERENCESERVICE",
}

#: The bash that fills ``COMPREPLY`` for each live kind, from ``$cur`` and the line's
#: connection flags (``conn``).
_DYNAMIC = {
    "FILE": 'compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur"))',
    "CONTEXT": 'COMPREPLY=($(compgen -W "$(_kubectl_ome_kubectl "${conn[@]}" config '
    'get-contexts -o name)" -- "$cur"))',
    "NAMESPACE": 'COMPREPLY=($(compgen -W "$(_kubectl_ome_kubectl "${conn[@]}" get namespaces '
    '-o \'jsonpath={.items[*].metadata.name}\')" -- "$cur"))',
    "INFERENCESERVICE": 'COMPREPLY=($(compgen -W "$(_kubectl_ome_kubectl "${conn[@]}" '
    '"${ns[@]}" get inferenceservices -o \'jsonpath={.items[*].metadata.name}\')" '
    '-- "$cur"))',
}


@dataclass(frozen=True)
class Command:
    """One command of the tree: its path of subcommand names (``()`` for the top), its
    subcommands, its flags, the value flags' values, and its positionals' values in order."""

    path: tuple[str, ...]
    subcommands: tuple[str, ...]
    flags: tuple[str, ...]
    values: tuple[tuple[str, str | tuple[str, ...] | None], ...]  # (flag, values)
    positionals: tuple[str | tuple[str, ...] | None, ...]


def _values(action: argparse.Action) -> str | tuple[str, ...] | None:
    if action.choices is not None and not isinstance(action.choices, dict):
        return tuple(str(c) for c in action.choices)
    return _VALUES.get(action.dest)


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    """Every command of ``parser``'s tree, the top first."""
    subs: list[tuple[str, argparse.ArgumentParser]] = []
    flags: list[str] = []
    values: list[tuple[str, str | tuple[str, ...] | None]] = []
    positionals: list[str | tuple[str, ...] | None] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            subs += list(action.choices.items())
        elif action.option_strings:
            flags += action.option_strings
            if action.nargs != 0:
                values += [(flag, _values(action)) for flag in action.option_strings]
        else:
            positionals.append(_values(action))
    top = Command(path, tuple(n for n, _ in subs), tuple(flags), tuple(values), tuple(positionals))
    return [top] + [c for name, sub in subs for c in commands(sub, (*path, name))]


def _words(values: str | tuple[str, ...] | None) -> str:
    """The bash that completes ``values`` (nothing for a free value)."""
    if values is None:
        return "COMPREPLY=()"
    if isinstance(values, str):
        return _DYNAMIC[values]
    return f'COMPREPLY=($(compgen -W "{" ".join(values)}" -- "$cur"))'


def bash(parser: argparse.ArgumentParser) -> str:
    """The bash completion script of ``parser``'s tree."""
    tree = commands(parser)
    value_flags = sorted({flag for c in tree for flag, _ in c.values})
    sub_cases = "\n".join(
        f'        "{" ".join(c.path)}|{name}") echo "{" ".join((*c.path, name))}" ;;'
        for c in tree
        for name in c.subcommands
    )
    flag_cases = "\n".join(
        f'        "{" ".join(c.path)}") echo "{" ".join(c.flags)}" ;;' for c in tree
    )
    value_cases = "\n".join(
        f'        "{" ".join(c.path)}|{flag}") {_words(values)} ;;'
        for c in tree
        for flag, values in c.values
    )
    word_cases = "\n".join(
        f'        "{" ".join(c.path)}|{i}") {_words(values)} ;;'
        for c in tree
        for i, values in enumerate(c.positionals)
    )
    subcommand_cases = "\n".join(
        f'        "{" ".join(c.path)}") echo "{" ".join(c.subcommands)}" ;;'
        for c in tree
        if c.subcommands
    )
    return f"""# bash completion for {COMMAND} (kubectl ome), from `{COMMAND} completion bash`.
# This shell: source <({COMMAND} completion bash)
# Every shell: {COMMAND} completion bash > ~/.local/share/bash-completion/completions/{COMMAND}
# COMPREPLY=($(compgen ...)) splits words as completion wants; zsh's bashcompinit has no mapfile.
# shellcheck disable=SC2207

_kubectl_ome_kubectl() {{
    kubectl --request-timeout=5s "$@" 2>/dev/null
}}

_kubectl_ome_next() {{  # the command path after word $2 at path $1, if $2 is a subcommand
    case "$1|$2" in
{sub_cases}
    esac
}}

_kubectl_ome_flags() {{
    case "$1" in
{flag_cases}
    esac
}}

_kubectl_ome_subcommands() {{
    case "$1" in
{subcommand_cases}
    esac
}}

_kubectl_ome_takes_value() {{
    case "$1" in
        {"|".join(value_flags)}) return 0 ;;
    esac
    return 1
}}

{FUNCTION}() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word next expect="" npos=0 i=1
    local -a conn=() ns=()
    COMPREPLY=()
    while [ "$i" -lt "$COMP_CWORD" ]; do
        word="${{COMP_WORDS[i]}}"
        i=$((i + 1))
        if [ -n "$expect" ]; then
            [ "$word" = "=" ] && continue  # --flag=value, split by COMP_WORDBREAKS
            case "$expect" in
                --kubeconfig | --context) conn+=("$expect=$word") ;;
                -n | --namespace) ns=("--namespace=$word") ;;
            esac
            expect=""
            continue
        fi
        case "$word" in
            -*)
                if _kubectl_ome_takes_value "$word"; then expect="$word"; fi
                ;;
            *)
                next="$(_kubectl_ome_next "$path" "$word")"
                if [ -n "$next" ]; then path="$next"; npos=0; else npos=$((npos + 1)); fi
                ;;
        esac
    done
    if [ "$cur" = "=" ] && [ -n "$expect" ]; then cur=""; fi
    if [ -n "$expect" ]; then
        case "$path|$expect" in
{value_cases}
        esac
        return 0
    fi
    case "$cur" in
        -*)
            COMPREPLY=($(compgen -W "$(_kubectl_ome_flags "$path")" -- "$cur"))
            return 0
            ;;
    esac
    local subcommands
    subcommands="$(_kubectl_ome_subcommands "$path")"
    if [ -n "$subcommands" ]; then
        COMPREPLY=($(compgen -W "$subcommands" -- "$cur"))
        return 0
    fi
    case "$path|$npos" in
{word_cases}
    esac
    return 0
}}

complete -F {FUNCTION} {COMMAND}
"""


def zsh(parser: argparse.ArgumentParser) -> str:
    """The zsh completion script: the bash one, run by zsh's ``bashcompinit``."""
    return (
        f"#compdef {COMMAND}\n"
        f"# zsh completion for {COMMAND} (kubectl ome), from `{COMMAND} completion zsh`.\n"
        f"# In ~/.zshrc, after compinit: source <({COMMAND} completion zsh)\n"
        "autoload -U +X bashcompinit && bashcompinit\n\n" + bash(parser)
    )


def script(shell: str, parser: argparse.ArgumentParser) -> str:
    """The completion script for ``shell``, one of ``SHELLS``."""
    return zsh(parser) if shell == "zsh" else bash(parser)
