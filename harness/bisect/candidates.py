"""The ordered builds a bisect walks, oldest first, from its good end to its bad end: image references or digests for a
container cell; for a process cell, commands or virtual environments standing for builds.

A process candidate is written `venv:DIR` (runs `DIR/bin/vllm serve`), `cmd:WORDS` (WORDS split as a shell splits
them, no shell run: a wrapper script that sets one variable and execs vLLM is a build), or bare: a folder is a venv,
anything else a command. They come from `--refs` arguments, a file (one a line, `#` comments), or a registry's tag
list (harness.bisect.registry). The ends need not be listed: a good end not in the list goes first, a bad end last.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harness.errors import UsageError
from harness.files import read_bytes

#: At most this many candidates: 10,000 builds are 14 boots, more is a list someone did not mean.
MAX_CANDIDATES = 10_000
#: A candidate's part of a cell id (the id names files: harness.matrix.cells.MAX_ID_CHARS).
TOKEN_CHARS = 40
_UNSAFE = re.compile(r"[^A-Za-z0-9_.+]+")
#: Path parts that name no build (`/opt/b7/bin/vllm` is build b7).
_GENERIC = {"vllm", "vllm-server", "bin", "python", "python3", "serve", "/", "usr", "local", "opt"}


class BuildKind(StrEnum):
    image = "image"
    command = "command"


@dataclass(frozen=True)
class Candidate:
    """One build, at its place in the ordered list."""

    index: int
    #: As written (an image reference, `venv:DIR`, `cmd:WORDS`).
    ref: str
    kind: BuildKind
    #: The image a container cell runs; None for a process candidate.
    image: str | None = None
    #: The command a process cell runs; () for an image.
    command: tuple[str, ...] = ()
    #: The tag's creation time when the list came from a registry.
    created: str | None = None

    @property
    def token(self) -> str:
        """The candidate in a cell id: its tag, the digest's first 12 hex digits, or the venv's / command's name."""
        if self.kind == BuildKind.image:
            ref = self.ref
            if "@" in ref:
                word = "sha" + ref.rsplit(":", 1)[-1][:12]
            else:
                last = ref.rsplit("/", 1)[-1]
                word = last.rsplit(":", 1)[-1] if ":" in last else last
        else:  # the venv's folder, or the command's last path part that is not a generic name
            parts = Path(self.command[0]).parts if self.command else ()
            named = [p for p in parts if p.lower() not in _GENERIC]
            word = named[-1] if named else (parts[-1] if parts else "cmd")
        return (_UNSAFE.sub("_", word).strip("_") or "x")[:TOKEN_CHARS]

    def to_dict(self) -> dict:
        return {"index": self.index, "ref": self.ref, "kind": self.kind.value, "image": self.image,
                "command": list(self.command), "created": self.created}


def process_command(ref: str) -> tuple[str, ...]:
    """`venv:DIR` → DIR/bin/vllm serve; `cmd:WORDS` → WORDS split; a bare folder is a venv, else a command."""
    if ref.startswith("venv:"):
        where = ref[len("venv:"):]
        if not where:
            raise UsageError(f"candidate {ref!r}: venv: names no folder")
        return (str(Path(where) / "bin" / "vllm"), "serve")
    text = ref[len("cmd:"):] if ref.startswith("cmd:") else ref
    if not ref.startswith("cmd:") and Path(text).is_dir():
        return process_command("venv:" + text)
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"candidate {ref!r}: {exc}") from None
    if not words:
        raise UsageError(f"candidate {ref!r}: names no command")
    return words


def candidate(index: int, ref: str, kind: BuildKind, created: str | None = None) -> Candidate:
    if kind == BuildKind.image:
        if any(ch.isspace() for ch in ref) or not ref:
            raise UsageError(f"candidate {ref!r}: not an image reference")
        return Candidate(index, ref, kind, image=ref, created=created)
    return Candidate(index, ref, kind, command=process_command(ref), created=created)


def read_refs_file(path: Path) -> list[str]:
    """One reference a line; blank lines and lines starting with `#` left out (a `#` later in a line is the
    reference's: a `cmd:` may quote one). A reference listed twice is one line naming both lines."""
    try:
        text = read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text (one candidate a line)") from None
    refs: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        ref = line.strip()
        if not ref or ref.startswith("#"):
            continue
        if ref in seen:
            raise UsageError(f"{path}:{number}: {ref!r} is listed twice (line {seen[ref]} too)")
        seen[ref] = number
        refs.append(ref)
    if not refs:
        raise UsageError(f"{path}: lists no candidate")
    return refs


def ordered(refs: list[str], good: str, bad: str, kind: BuildKind,
            created: dict[str, str] | None = None) -> list[Candidate]:
    """The candidates from `good` to `bad`, both included: the list's slice between them when it names them, else the
    list with the good end put first and the bad end last."""
    if good == bad:
        raise UsageError(f"--good and --bad are the same candidate ({good!r})")
    dup = next((r for i, r in enumerate(refs) if r in refs[:i]), None)
    if dup is not None:
        raise UsageError(f"--refs: {dup!r} is listed twice")
    refs = list(refs)
    if good in refs and bad in refs and refs.index(good) > refs.index(bad):
        raise UsageError(f"--refs lists the bad end {bad!r} before the good end {good!r}: the list is oldest first")
    lo = refs.index(good) if good in refs else None
    hi = refs.index(bad) if bad in refs else None
    middle = refs[(lo + 1 if lo is not None else 0):(hi if hi is not None else len(refs))]
    middle = [r for r in middle if r not in (good, bad)]
    chain = [good, *middle, bad]
    if len(chain) > MAX_CANDIDATES:
        raise UsageError(f"--refs: {len(chain):,} candidates; at most {MAX_CANDIDATES:,}")
    return [candidate(i, r, kind, (created or {}).get(r)) for i, r in enumerate(chain)]
