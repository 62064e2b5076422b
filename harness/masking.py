"""Keeping secrets out of everything the harness writes or prints.

A value is secret when its name says so: an env key, a `KEY=value` token, a JSON key or a flag one of whose words is
TOKEN, KEY, SECRET, PASSWORD, … (`HF_TOKEN`, `"hf_token":`, `--api-key`; not `MAX_TOKENS`), in every spelling vLLM's
parser reads a flag (`--api_key`, `--api-key=V`, the unique prefix `--api-k`, the dotted
`--speculative-config.hf_token`; harness.predict.serve_flags explains them); and the password of a
`scheme://user:password@host` URL. Such a value is found wherever the cell hides it: an env value, an argv element, a
shell command string (`sh -c "HF_TOKEN=… vllm …"`).

Masking is by value: every secret found is replaced wherever it appears, in any string (another env value, argv, the
server's log and its tail, a record's every field, an error message), so a secret the server echoes is masked too,
re-encoded as servers and libraries echo one (`Masker` lists the encodings): JSON- or backslash-escaped, URL-encoded,
`\\uXXXX`-escaped, split by ANSI codes, in any case, base64 (alone or inside a longer base64, `user:secret`), hex,
cut to a prefix of at least MIN_PREFIX characters, or split across lines of a log (`Masker.lines`).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shlex
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
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
            found |= secret_flag_values(shlex.split(text))
        except ValueError:  # an unbalanced quote: what a shell would not run
            pass
        found |= secret_flag_values([w.strip("'\"()[]{},;") for w in text.split()])  # quoted in prose: an error message
    return {v for v in found if len(v) >= _MIN_LEN}


def secret_flag_values(args: list[str]) -> set[str]:
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
    values |= secret_flag_values(args)
    for a in args:
        values |= embedded_secrets(a)
    return {v for v in values if len(v) >= _MIN_LEN}


#: A secret cut short is masked from this many characters on (a shorter secret: whole): a server that shows
#: `sk-live-ab…` shows at most MIN_PREFIX - 1 of its characters. Eight is the length at which a prefix of a random
#: key starts to narrow it down, and short enough that no key is ever shown whole by its prefix rule (`_MIN_LEN` is 4).
MIN_PREFIX = 8
#: What may come between two characters of an echoed secret: an ANSI escape (SGR colours, any CSI, OSC) and a line
#: break (a record's tail, an error of several lines; a log's lines are joined by `Masker.lines`).
_FILLER = r"(?:\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\r|\n)*"
_ENTITIES = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "(?:apos|#39)"}
#: An escape that may stand for a character of a secret (`_forms`): a line with one is searched with the full pattern.
_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}|&#?[0-9A-Za-z]+;")


def _escaped(text: str, plus: bool) -> bool:
    """Whether `text` holds a backslash, an ANSI escape, a line break, a `%XX`, an HTML entity (or a `+`, when a
    secret has a space): str scans first, the regex only where a `%` or `&` is."""
    return ("\\" in text or "\x1b" in text or "\n" in text or "\r" in text or (plus and "+" in text)
            or (("%" in text or "&" in text) and _ESCAPE.search(text) is not None))


def _forms(c: str) -> list[str]:
    """Patterns of one character of a secret as it may be echoed: itself (case is the regex's), `\\uXXXX` (JSON, JS,
    Python), `\\xXX`, `%XX` per UTF-8 byte (URLs), an HTML entity, and a backslash-escaped punctuation mark (JSON's
    `\\"`, `\\/`, a shell's `\\$`)."""
    o = ord(c)
    forms = [re.escape(c)]
    if o < 0x10000:
        forms.append(rf"\\u{o:04x}")
    else:
        hi, lo = 0xD800 + ((o - 0x10000) >> 10), 0xDC00 + ((o - 0x10000) & 0x3FF)
        forms.append(rf"\\u{hi:04x}\\u{lo:04x}")
    if o < 0x100:
        forms.append(rf"\\x{o:02x}")
    forms.append("".join(f"%{b:02x}" for b in c.encode()))
    forms.append(f"&#0*{o};|&#x0*{o:x};")
    if c in _ENTITIES:
        forms.append(f"&{_ENTITIES[c]};")
    if not c.isalnum():
        forms.append(r"\\+" + re.escape(c))
    if c == " ":
        forms.append(r"\+")
    return forms


def _unit(chars: str) -> str:
    """One character of `chars`, in any of its forms: the plain ones as one class (fast), the escapes after."""
    plain = "".join(sorted({re.escape(c) for c in chars}))
    escapes = sorted({f for c in set(chars) for f in _forms(c)[1:]})
    return "(?:[" + plain + "]|" + "|".join(escapes) + ")"


def _b64_pieces(secret: str) -> set[str]:
    """The base64 characters that the secret's bytes alone decide, at each of the three alignments it may have inside
    a longer base64 (`user:secret` in Basic auth) or alone; in both alphabets (standard and URL-safe)."""
    raw = secret.encode()
    out = set()
    for shift in range(3):
        enc = base64.b64encode(b"\0" * shift + raw).decode()
        piece = enc[-(-8 * shift // 6): 8 * (shift + len(raw)) // 6]
        if len(piece) >= _MIN_LEN:
            out |= {piece, piece.translate(str.maketrans("+/", "-_"))}
    return out


def _is_path(secret: str) -> bool:
    """A file's path under a secret's name (`GOOGLE_APPLICATION_CREDENTIALS=/home/me/key.json`) is masked whole only:
    its prefix is a folder that every other path in the log shares."""
    return secret.startswith(("/", "./", "../", "~/"))


def _secret_pattern(secret: str) -> str:
    """The secret's first MIN_PREFIX characters (all of a shorter one), each in any form, ANSI codes or line breaks
    between them, then as many more of its characters as follow: a prefix, the whole secret, or a little past it."""
    head = len(secret) if _is_path(secret) else min(len(secret), MIN_PREFIX)
    out = _FILLER.join(_unit(c) for c in secret[:head])
    if secret[head:]:
        out += f"(?:{_FILLER}{_unit(secret[head:])})*"
    literal = [re.escape(p) for p in sorted(_b64_pieces(secret), key=len, reverse=True)]
    return "|".join([out, *(f"(?-i:{p})" for p in literal), re.escape(raw_hex(secret))])


def raw_hex(secret: str) -> str:
    return secret.encode().hex()


@dataclass(frozen=True)
class _Compiled:
    rx: re.Pattern[str]
    #: Lower-cased literals one of which a line without escapes holds if it holds a secret: each secret's first
    #: MIN_PREFIX characters, the start of each base64 piece (both alphabets) and of its hex. Searched one by one:
    #: `str.__contains__` beats one alternation whose first characters are every letter and digit.
    anchors: tuple[str, ...]
    #: An anchor that a line break splits has at most this many characters on either side of it.
    edge: int
    #: How far back an escaped echo split across lines may begin: the longest a secret's encoding plausibly is.
    reach: int
    plus: bool

    def anchored(self, text: str) -> bool:
        low = text.lower()
        for a in self.anchors:
            if a in low:
                return True
        return False


@functools.lru_cache(maxsize=64)
def _compile(values: tuple[str, ...]) -> _Compiled:
    rx = re.compile("|".join(_secret_pattern(v) for v in values), re.IGNORECASE)
    anchors = {v[:MIN_PREFIX].lower() for v in values} | {raw_hex(v)[:2 * MIN_PREFIX] for v in values}
    anchors |= {p[:MIN_PREFIX].lower() for v in values for p in _b64_pieces(v)}
    longest = max(map(len, values))
    return _Compiled(rx, tuple(sorted(anchors)), max(map(len, anchors)) - 1, min(12 * longest + 64, 8192),
                     any(" " in v for v in values))


class Masker:
    """Replaces every known secret value in text, in every encoding a server may echo it in (see `_forms`, `_FILLER`,
    `_b64_pieces`, MIN_PREFIX), with MASK. By value only: it runs on every line of a server's log, which may be
    hundreds of megabytes; the patterns (`embedded_secrets`) find the secrets in what the cell is given. The hot path
    is one scan of a literal alternation over the lower-cased line (no secret's first characters, no escape: the line
    is returned as it is); only a line that has one is searched with the full pattern."""

    def __init__(self, values: Iterable[str] = ()):
        self._values: set[str] = set()
        self._c: _Compiled | None = None
        self.learn(values)

    def learn(self, values: Iterable[str]) -> None:
        """More secrets to mask from now on (the argv a runtime built, say)."""
        new = {v for v in values if len(v) >= _MIN_LEN} - self._values
        if new:
            self._values |= new
            self._c = _compile(tuple(sorted(self._values, key=lambda v: (-len(v), v))))

    @property
    def compiled(self) -> _Compiled | None:
        return self._c

    def _maybe(self, text: str) -> bool:
        """Whether `text` may hold a secret: it has an escape, or (lower-cased) one of the anchors; else the full
        pattern cannot match (unescaped, a secret's first MIN_PREFIX characters are in a row)."""
        c = self._c
        assert c is not None
        return not text.isascii() or _escaped(text, c.plus) or c.anchored(text)

    def known(self, text: str) -> bool:
        """Whether `text` holds a secret this masker knows of."""
        return self._c is not None and self._maybe(text) and self._c.rx.search(text) is not None

    def __call__(self, text: str) -> str:
        if self._c is None or not self._maybe(text):
            return text
        return self._c.rx.sub(MASK, text)

    def lines(self) -> LineMasker:
        """A masker for the lines of one log, in order: an echo split across lines is masked on each of them."""
        return LineMasker(self)

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


class LineMasker:
    """Masks a log line by line as if its lines were one text: the part of a secret the server split across lines (a
    wrapped line, a secret printed in pieces) is masked on the line it continues on; the part on the earlier line was
    masked there when it was MIN_PREFIX characters or more. It keeps the last lines (raw: never written anywhere) up
    to `reach` characters, and whether they may start a secret; a line that continues none costs what a line alone
    does, its first characters looked at with the end of the line before."""

    def __init__(self, masker: Masker):
        self._masker = masker
        self._before: deque[str] = deque()
        self._kept = 0
        #: Whether the lines kept hold an escape or an anchor: a secret may start in them and go on in the next line.
        self._suspect = False

    def _tail(self, n: int) -> str:
        """The last `n` characters of the lines kept, run together (the log's line breaks are not the secret's)."""
        last = self._before[-1] if self._before else ""
        if len(last) >= n:
            return last[-n:]
        return "".join(self._before)[-n:]

    def __call__(self, line: str) -> str:
        c = self._masker.compiled
        if c is None:
            return line
        edge = self._tail(c.edge) if self._before else ""
        escaped = not line.isascii() or _escaped(line, c.plus)
        anchored = c.anchored(edge + line)
        out = c.rx.sub(MASK, line) if escaped or anchored else line
        if self._before and (self._suspect or escaped or anchored):
            tail = self._tail(c.reach)
            ends = [m.end() for m in c.rx.finditer(tail + line[: c.reach]) if m.start() < len(tail) < m.end()]
            if ends:
                out = MASK + self._masker(line[max(ends) - len(tail):])
        self._suspect = escaped or anchored or (self._suspect and len(line) < c.reach)
        self._before.append(line)
        self._kept += len(line)
        while self._kept - len(self._before[0]) >= c.reach:
            self._kept -= len(self._before.popleft())
        return out


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
