"""Keeping secrets out of everything the harness writes or prints.

A value is secret when its env key looks like one (TOKEN, KEY, SECRET, PASSWORD, …) or it follows a flag that takes a
credential (`--api-key`, `--hf-token`). Masking is by value, too, so a secret the server echoes into its log (vLLM prints
its non-default args) is masked in the log file and its tail as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping

MASK = "***"
_SECRET_KEY = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH", re.IGNORECASE)
SECRET_FLAGS = {"--api-key", "--hf-token", "--token", "--password"}
_MIN_LEN = 4  # masking "1" everywhere would mangle logs and protect nothing


def is_secret_key(name: str) -> bool:
    return bool(_SECRET_KEY.search(name))


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_key(k) and v else v) for k, v in env.items()}


def secret_values(env: Mapping[str, str] | None = None, argv: Iterable[str] = ()) -> set[str]:
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if is_secret_key(k) and len(v) >= _MIN_LEN}
    args = list(argv)
    for i, a in enumerate(args):
        flag, eq, val = a.partition("=")
        if flag in SECRET_FLAGS:
            v = val if eq else (args[i + 1] if i + 1 < len(args) else "")
            if len(v) >= _MIN_LEN:
                values.add(v)
    return values


class Masker:
    """Replaces every known secret value in text; cheap when there are none."""

    def __init__(self, values: Iterable[str] = ()):
        vals = sorted({v for v in values if len(v) >= _MIN_LEN}, key=len, reverse=True)
        self._rx = re.compile("|".join(re.escape(v) for v in vals)) if vals else None

    def __call__(self, text: str) -> str:
        return self._rx.sub(MASK, text) if self._rx else text

    def argv(self, argv: Iterable[str], hide: Callable[[str, str], str] | None = None) -> list[str]:
        """Every arg masked; a credential flag's value replaced by `hide(prefix, value)`, prefix being `--flag=` or ""
        (default: the prefix and `***`)."""
        hide = hide or (lambda prefix, _value: prefix + MASK)
        out: list[str] = []
        hide_next = False
        for a in argv:
            flag, eq, value = a.partition("=")
            if hide_next:
                out.append(hide("", a))
                hide_next = False
            elif flag in SECRET_FLAGS and eq:
                out.append(hide(flag + "=", value))
            else:
                out.append(self(a))
                hide_next = a in SECRET_FLAGS
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Secret-looking keys masked whole, and known secrets masked inside every other value."""
        return {k: self(v) for k, v in mask_env(env).items()}
