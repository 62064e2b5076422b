"""The seed's APPLY procedure, automated: pristine file out of the image → check → `patch -p1` → check → mount.

The applier reads a unified diff the way `patch -p1` does: anything before the first `--- ` header is commentary (the
seed's preamble stays in the file as it is), paths lose their first component, and each hunk must match its context
exactly, at its line number or at the nearest offset (patch's search, without fuzz). Both hashes are checked, so a
different image or a drifted patch is an error naming the file and the hashes, never a silently different server.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from harness.errors import HarnessError

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(HarnessError):
    """A patch that does not apply, or a file whose hash is not the one the matrix promised."""


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Hunk:
    old_start: int
    old: list[str]
    new: list[str]


@dataclass
class FilePatch:
    old_path: str
    new_path: str
    hunks: list[Hunk]


def _strip(path: str, strip: int) -> str:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return path
    parts = path.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def parse_unified(text: str, strip: int = 1) -> list[FilePatch]:
    lines = text.splitlines(keepends=True)
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            fp = FilePatch(_strip(lines[i][4:], strip), _strip(lines[i + 1][4:], strip), [])
            i += 2
            while i < len(lines) and (m := _HUNK.match(lines[i])):
                old_len = int(m.group(2)) if m.group(2) is not None else 1
                new_len = int(m.group(4)) if m.group(4) is not None else 1
                hunk = Hunk(int(m.group(1)), [], [])
                i += 1
                while i < len(lines) and (len(hunk.old) < old_len or len(hunk.new) < new_len):
                    line = lines[i]
                    tag, body = line[:1], line[1:]
                    if line.startswith("\\"):
                        pass
                    elif tag == " " or line in ("\n", "\r\n"):
                        body = body if tag == " " else line
                        hunk.old.append(body)
                        hunk.new.append(body)
                    elif tag == "-":
                        hunk.old.append(body)
                    elif tag == "+":
                        hunk.new.append(body)
                    else:
                        raise PatchError(f"malformed hunk line {i + 1}: {line[:60]!r}")
                    i += 1
                if i < len(lines) and lines[i].startswith("\\"):
                    # "\ No newline at end of file" applies to the line just read
                    for side in (hunk.old, hunk.new):
                        if side and side[-1].endswith("\n"):
                            side[-1] = side[-1][:-1]
                    i += 1
                if len(hunk.old) != old_len or len(hunk.new) != new_len:
                    raise PatchError(f"hunk at line {hunk.old_start} is truncated")
                fp.hunks.append(hunk)
            patches.append(fp)
            continue
        i += 1
    if not patches:
        raise PatchError("no unified diff in the file (no `--- a/...` / `+++ b/...` header)")
    return patches


def _find(lines: list[str], block: list[str], near: int, lower: int) -> int | None:
    """Where `block` matches, trying `near` first, then offsets outward (as patch does)."""
    n = len(block)
    for delta in range(0, len(lines) + 1):
        for pos in (near + delta, near - delta) if delta else (near,):
            if lower <= pos <= len(lines) - n and lines[pos:pos + n] == block:
                return pos
    return None


def apply_patch(original: bytes, fp: FilePatch) -> bytes:
    lines = original.decode("utf-8").splitlines(keepends=True)
    out: list[str] = []
    cursor = 0
    offset = 0
    for hunk in fp.hunks:
        near = max(0, hunk.old_start - 1 + offset) if hunk.old else hunk.old_start + offset
        pos = _find(lines, hunk.old, near, cursor)
        if pos is None:
            raise PatchError(f"hunk @@ -{hunk.old_start} does not match {fp.old_path}")
        offset = pos - (hunk.old_start - 1)
        out += lines[cursor:pos] + hunk.new
        cursor = pos + len(hunk.old)
    out += lines[cursor:]
    return "".join(out).encode("utf-8")


@dataclass(frozen=True)
class PreparedPatch:
    target: str
    patch: str
    base_sha256: str
    patched_sha256: str
    patched_file: Path


def patch_file(pristine: bytes, patch_path: Path, target: str, base_sha256: str, patched_sha256: str,
               out_dir: Path) -> PreparedPatch:
    """Check, apply and check again; keep the pristine and patched files and their hashes in `out_dir`."""
    got = sha256_bytes(pristine)
    if got != base_sha256:
        raise PatchError(f"{target}: the image's file has sha256 {got}, the matrix expects base_sha256 {base_sha256} "
                         f"(a different image, or {patch_path.name} was made for another one)")
    try:
        patches = parse_unified(patch_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PatchError(f"{patch_path}: cannot read: {exc.strerror}") from None
    matching = [p for p in patches if target.endswith("/" + p.new_path) or target.endswith("/" + p.old_path)]
    if len(matching) != 1:
        names = ", ".join(p.new_path for p in patches)
        raise PatchError(f"{patch_path}: patches {names}, none of which is the target {target}")
    try:
        patched = apply_patch(pristine, matching[0])
    except PatchError as exc:
        raise PatchError(f"{patch_path}: {exc}") from None
    got = sha256_bytes(patched)
    if got != patched_sha256:
        raise PatchError(f"{patch_path}: applied to {target} it gives sha256 {got}, the matrix expects "
                         f"patched_sha256 {patched_sha256}")
    out_dir.mkdir(parents=True, exist_ok=True)
    name = Path(target).name
    (out_dir / f"{name}.orig").write_bytes(pristine)
    dest = out_dir / name
    dest.write_bytes(patched)
    dest.chmod(0o444)
    (out_dir / "SHA256SUMS").write_text(f"{base_sha256}  {name}.orig\n{patched_sha256}  {name}\n")
    return PreparedPatch(target, str(patch_path), base_sha256, patched_sha256, dest)
