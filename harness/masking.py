"""Keeping secrets out of everything the harness writes or prints.

A value is secret when its name says so: an env key, a `KEY=value` token, a JSON key or a flag one of whose words is
TOKEN, KEY, SECRET, PASSWORD, … (`HF_TOKEN`, `"hf_token":`, `--api-key`; not `MAX_TOKENS`), in every spelling vLLM's
parser reads a flag (`--api_key`, `--api-key=V`, the unique prefix `--api-k`, the dotted
`--speculative-config.hf_token`; harness.predict.serve_flags explains them); and the password of a
`scheme://user:password@host` URL. Such a value is found wherever the cell hides it: an env value, an argv element, a
shell command string (`sh -c "HF_TOKEN=… vllm …"`).

Masking is by value: every secret found is replaced wherever it appears, in any string (another env value, argv, the
server's log and its tail, a record's every field, an error message), so a secret the server echoes is masked too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)

MASK = "***"
#: Words of a name that make its value a secret; a name's words are split at `_ - .`, spaces and camelCase.
_SECRET_WORDS = frozenset({"token", "key", "apikey", "secret", "password", "passwd", "passphrase", "credential",
                           "credentials", "auth", "authorization"})
#: Word endings that do too (`HFTOKEN`, `DBPASSWORD`); not `key`/`auth`, which end too many harmless words.
_SECRET_ENDINGS = ("token", "secret", "password", "passwd")
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
#: The credential flags vLLM's `serve` (and tools around it) take, in their canonical spelling; any other flag whose
#: name says secret (`--foo-token`) is one too. Every spelling vLLM reads is recognised by `credential_flag`.
SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--password")
#: argparse (allow_abbrev, on in every vLLM release) takes a unique prefix; shorter than this it is ambiguous in vLLM
#: and refused, and masking what follows it anyway costs nothing.
_MIN_PREFIX = len("--ab")
_MIN_LEN = 4  # masking "1" everywhere would mangle logs and protect nothing
#: `key: value`, `key=value`, `"key": "value"`, `'key': 'value'`: in a JSON or Python dict, a shell command, a log line.
_PAIR = re.compile(r"""(?<![A-Za-z0-9_.\-])(?P<key>[A-Za-z_][A-Za-z0-9_.\-]*)["']?\s*[:=]\s*"""
                   r"""(?:(?i:bearer|basic|token)\s+)?(?P<val>"(?:[^"\\]|\\.)*"|'[^']*'|[^\s"',;&|}\]\[)]+)""")
#: The password of `scheme://user:password@host`.
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@\"']*:(?P<val>[^@\s/\"']+)@")
_HINT = re.compile(r"(?i)token|key|secret|passw|passphrase|credential|auth|://")


#: Names whose words say secret but whose values are labels a scheduler sets on every job (Buildkite's step and group
#: keys: `boot` would be masked out of `booted` in every record and log).
_NOT_SECRET = frozenset({"BUILDKITE_STEP_KEY", "BUILDKITE_GROUP_KEY"})


def is_secret_key(name: str) -> bool:
    """A name (env key, JSON key, flag without dashes) whose value is a secret: one of its words says so."""
    if name in _NOT_SECRET:
        return False
    words = [w.lower() for w in _WORD.findall(name)]
    return any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)


def credential_flag(arg: str) -> tuple[bool, str | None]:
    """(whether `arg` is a flag whose value is a secret, the value given with `=` or None: the next argument)."""
    if not arg.startswith("--") or arg == "--":
        return False, None
    name, eq, value = arg.partition("=")
    head, dot, tail = name[2:].partition(".")
    if dot:  # `--speculative-config.hf_token V`: FlexibleArgumentParser nests it as a JSON key
        return is_secret_key(tail.rsplit(".", 1)[-1]), value if eq else None
    name = "--" + head.replace("_", "-")  # vLLM reads `--api_key` as `--api-key`
    secret = (is_secret_key(head) or
              (len(name) >= _MIN_PREFIX and any(flag.startswith(name) for flag in SECRET_FLAGS)))
    return secret, value if eq else None


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: (MASK if is_secret_key(k) and v else v) for k, v in env.items()}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        try:
            return json.loads(value)
        except ValueError:
            return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    return value


def embedded_secrets(text: str) -> set[str]:
    """Secrets written inside one string: `KEY=value`/`"key": "value"` pairs, a URL's password, and the values of
    credential flags in a command string (`sh -c "vllm serve --api-key …"`)."""
    if not _HINT.search(text):
        return set()
    found = {m["val"] for m in _URL_PASSWORD.finditer(text)}
    for m in _PAIR.finditer(text):
        if is_secret_key(m["key"].rsplit(".", 1)[-1]):
            found |= {_unquote(m["val"]), m["val"].strip("\"'")}  # as read, and as written between its quotes
    if any(c.isspace() for c in text):
        try:
            found |= _flag_values(shlex.split(text))
        except ValueError:  # an unbalanced quote: what a shell would not run
            pass
        found |= _flag_values([w.strip("'\"()[]{},;") for w in text.split()])  # quoted in prose: an error message
    return {v for v in found if len(v) >= _MIN_LEN}


def _flag_values(args: list[str]) -> set[str]:
    values = set()
    for i, a in enumerate(args):
        secret, value = credential_flag(a)
        if not secret:
            continue
        if value is None and i + 1 < len(args) and not args[i + 1].startswith("--"):
            value = args[i + 1]
        if value:
            values.add(value)
    return values


def secret_values(env: Mapping[str, str] | None = None, argv: Iterable[str] = ()) -> set[str]:
    """Every secret value in `env` (default os.environ) and `argv`: by name, by flag, and embedded in any value."""
    env = os.environ if env is None else env
    values = {v for k, v in env.items() if is_secret_key(k)}
    for v in env.values():
        values |= embedded_secrets(v)
    args = list(argv)
    values |= _flag_values(args)
    for a in args:
        values |= embedded_secrets(a)
    return {v for v in values if len(v) >= _MIN_LEN}


class Masker:
    """Replaces every known secret value in text. By value only: it runs on every line of a server's log, which may be
    hundreds of megabytes; the patterns (`embedded_secrets`) find the secrets in what the cell is given."""

    def __init__(self, values: Iterable[str] = ()):
        self._values: set[str] = set()
        self._rx: re.Pattern[str] | None = None
        self.learn(values)

    def learn(self, values: Iterable[str]) -> None:
        """More secrets to mask from now on (the argv a runtime built, say)."""
        new = {v for v in values if len(v) >= _MIN_LEN} - self._values
        if new:
            self._values |= new
            vals = sorted(self._values, key=len, reverse=True)
            self._rx = re.compile("|".join(re.escape(v) for v in vals))

    def known(self, text: str) -> bool:
        """Whether `text` holds a secret this masker knows of."""
        return bool(self._rx and self._rx.search(text))

    def __call__(self, text: str) -> str:
        return self._rx.sub(MASK, text) if self._rx is not None else text

    @property
    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def argv(self, argv: Iterable[str], hide: Callable[[str, str], str] | None = None,
             other: Callable[[str], str] | None = None) -> list[str]:
        """Every arg masked (by `other`, default this masker), the secrets the argv itself holds included; a
        credential flag's value replaced by `hide(prefix, value)`, prefix being `--flag=` or "" (default: the prefix
        and `***`)."""
        hide = hide or (lambda prefix, _value: prefix + MASK)
        other = other or self
        args = list(argv)
        self.learn(secret_values({}, args))
        out: list[str] = []
        hide_next = False
        for a in args:
            secret, value = credential_flag(a)
            if hide_next and not a.startswith("--"):
                out.append(hide("", a))
            elif secret and value is not None:
                out.append(hide(a[: len(a) - len(value)], value))
            else:
                out.append(other(a))
            hide_next = secret and value is None
        return out

    def tree(self, value: Any) -> Any:
        """Every string in a JSON-shaped value masked (dict keys left as they are: field names, cell ids)."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {k: self.tree(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.tree(v) for v in value]
        return value

    def record(self, model: M) -> M:
        """A whole record masked, every field: what a field quotes (an error, a prediction's note) is masked too. A
        value the schema constrains (an outcome, a reason, a phase) is the harness's own word, never a secret's
        carrier: where masking it would break the record (a short secret inside `booted`), it is kept as it was."""
        from pydantic import ValidationError

        original = model.model_dump(mode="json")
        masked = self.tree(original)
        for _ in range(3):  # each pass restores every field the last validation refused
            try:
                return type(model).model_validate(masked)
            except ValidationError as exc:
                for err in exc.errors():
                    _restore(masked, original, err["loc"])
        return type(model).model_validate(masked)

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """Secret-looking keys masked whole, and known secrets masked inside every other value."""
        self.learn(secret_values(env, ()))
        return {k: self(v) for k, v in mask_env(env).items()}


def _restore(masked: Any, original: Any, loc: tuple) -> None:
    """Put back the value the record had before masking at `loc` (a pydantic error location), or at the deepest part
    of it that is a field of the record (a location may end in a union member's name)."""
    parent: Any = None
    key: Any = None
    for part in loc:
        inside = (isinstance(original, dict) and isinstance(masked, dict) and part in original and part in masked) or (
            isinstance(original, list) and isinstance(masked, list) and isinstance(part, int)
            and part < min(len(original), len(masked)))
        if not inside:
            break
        parent, key = masked, part
        masked, original = masked[part], original[part]
    if parent is not None:
        parent[key] = original
