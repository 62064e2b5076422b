"""Printing commands that paste into a POSIX shell: every token quoted, except references we mean to expand.

No printed command holds a secret (harness.masking says what one is): a secret becomes a reference to the variable of
the user's environment that holds it (`--api-key "$VLLM_API_KEY"`, `HF_ENDPOINT="https://u:${HF_TOKEN}@hub"`), or
`***` where none does. `secret_safe_command` renders a whole `ENV… argv…` line; the container renderer
(harness.runtime.container_spec) uses `SecretRenderer` for its `-e` and argument tokens. `format_script` joins the
commands `repro` prints: the steps that make what the server needs, then the server. Every word is terminal-safe as
printed: one holding a control character is written `$'…\\x1b…'` (harness.escape), the same word to a
shell."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from harness.escape import dq_controls, shell_quote
from harness.masking import MASK, Masker, is_secret_key, secret_values


class Raw(str):
    """A token printed as is, e.g. `HF_TOKEN="$HF_TOKEN"`: the secret comes from the user's env, never from us."""


def format_shell(tokens: Iterable[str]) -> str:
    return " ".join(t if isinstance(t, Raw) else shell_quote(t) for t in tokens)


#: Shell operators inside a step's command, printed as they are.
QUIET = (Raw(">/dev/null"), Raw("2>&1"))
OR, AND, PIPE = Raw("||"), Raw("&&"), Raw("|")


def format_script(commands: Iterable[Iterable[str]]) -> str:
    """The commands, one a line, joined by `&&`: pasted into a shell (or run by `bash -c`) they run in order, and the
    first that fails (a hash that does not match) stops the rest, so a server never starts on a file that is not the
    promised one. No `set -e`, which would close the interactive shell it is pasted into."""
    return " &&\n".join(format_shell(c) for c in commands)


@dataclass(frozen=True)
class Step:
    """One thing done before a cell's server starts, said as a run does it (`run --dry-run`) and as the shell commands
    that do it by hand (`repro`), made in one place so the two cannot drift apart. No commands: nothing a person
    pasting the server's command has to do first."""

    said: str
    commands: tuple[tuple[str, ...], ...] = ()


def _dq(text: str) -> str:
    """`text` safe inside double quotes, its control characters spliced out as `$'…'` words."""
    return dq_controls(re.sub(r'([\\"$`])', r"\\\1", text))


class SecretRenderer:
    """The secrets of one command (those of `env`, `argv` and the user's `environ`), and the variables of `environ`
    (or `env`) that hold them, to print each token with references in place of secrets."""

    def __init__(self, env: Mapping[str, str], argv: Iterable[str], environ: Mapping[str, str]):
        self.argv_in = list(argv)
        self.masker = Masker(secret_values(environ, ()) | secret_values(env, self.argv_in))
        self.holder = {v: k for k, v in {**environ, **env}.items() if is_secret_key(k) and v}
        values = sorted(self.masker.values, key=len, reverse=True)
        self._rx = re.compile("(" + "|".join(re.escape(v) for v in values) + ")") if values else None

    def text(self, text: str) -> str:
        """`text` as one shell word: as is when it holds no secret; else double-quoted, each secret a `${NAME}`
        reference or `***`."""
        if self._rx is None or not self._rx.search(text):
            return text
        parts = self._rx.split(text)
        out = "".join((f"${{{self.holder[p]}}}" if p in self.holder else _dq(MASK)) if i % 2 else _dq(self.masker(p))
                      for i, p in enumerate(parts))
        return Raw(f'"{out}"')

    def env(self, name: str, value: str) -> str:
        """`NAME=value` (a command prefix, or `-e`'s argument): a secret-named variable is a reference to itself."""
        if is_secret_key(name):
            return Raw(f'{name}="${name}"')
        rendered = self.text(value)
        return Raw(f"{name}={rendered if isinstance(rendered, Raw) else shell_quote(rendered)}")

    def argv(self, argv: Iterable[str] | None = None) -> list[str]:
        """Server args to print: a credential flag's value a reference to the variable that holds it (`--api-key
        "$VLLM_API_KEY"`), or `***` where none does, and every other token through `text`."""

        def ref(prefix: str, value: str) -> str:
            if value not in self.holder:
                return prefix + MASK
            return Raw((shell_quote(prefix) if prefix else "") + f'"${self.holder[value]}"')

        args = self.argv_in if argv is None else list(argv)
        return self.masker.argv(args, hide=ref, other=self.text)


def secret_safe_command(env: Mapping[str, str], argv: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """`NAME=value … argv…`, the line a person pastes, with no secret in it: the secrets of `env`, `argv` and
    `environ` (the user's environment) are references to the variables that hold them, or `***`."""
    r = SecretRenderer(env, argv, environ)
    return [*(r.env(k, v) for k, v in env.items()), *r.argv()]
