"""Printing commands that paste into a POSIX shell: every token quoted, except references we mean to expand."""

from __future__ import annotations

import shlex
from collections.abc import Iterable


class Raw(str):
    """A token printed as is, e.g. `HF_TOKEN="$HF_TOKEN"`: the secret comes from the user's env, never from us."""


def env_token(name: str, value: str, secret: bool) -> str:
    """`NAME=value` as a command prefix: only the value may be quoted, or the shell takes it for a command."""
    return Raw(f'{name}="${name}"') if secret else Raw(f"{name}={shlex.quote(value)}")


def format_shell(tokens: Iterable[str]) -> str:
    return " ".join(t if isinstance(t, Raw) else shlex.quote(t) for t in tokens)
