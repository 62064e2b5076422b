"""Printing commands that paste into a POSIX shell: every token quoted, except references we mean to expand."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping

from harness.masking import MASK, Masker, is_secret_key, secret_values


class Raw(str):
    """A token printed as is, e.g. `HF_TOKEN="$HF_TOKEN"`: the secret comes from the user's env, never from us."""


def env_token(name: str, value: str, secret: bool) -> str:
    """`NAME=value` as a command prefix: only the value may be quoted, or the shell takes it for a command."""
    return Raw(f'{name}="${name}"') if secret else Raw(f"{name}={shlex.quote(value)}")


def format_shell(tokens: Iterable[str]) -> str:
    return " ".join(t if isinstance(t, Raw) else shlex.quote(t) for t in tokens)


def secret_safe_argv(argv: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """Server args to print: a credential flag's value becomes a reference to the env variable that holds it
    (`--api-key "$VLLM_API_KEY"`), or `***` where none does, and any other secret value is masked; never the secret."""
    args = list(argv)
    holder = {v: k for k, v in environ.items() if is_secret_key(k) and v}

    def ref(prefix: str, value: str) -> str:
        if value not in holder:
            return prefix + MASK
        return Raw((shlex.quote(prefix) if prefix else "") + f'"${holder[value]}"')

    return Masker(secret_values(environ, args)).argv(args, hide=ref)
