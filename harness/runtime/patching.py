"""The seed's APPLY procedure, automated: pristine file out of the image → check → GNU `patch -p1` → check → mount.

The patch is applied by GNU patch itself, the tool the seed's APPLY section names, in a scratch tree laid out as the
patch's paths say (`D/vllm/v1/worker/gpu_worker.py`, then `cd D && patch -p1`). A re-implementation would have to
match GNU's context matching, offsets, fuzz and its handling of a patch file that ends without a newline (the seed's
does, and applies with "fuzz 1"); running the tool makes that true by construction. Both hashes are still checked, so
a different image or a drifted patch is an error naming the file and the hashes, never a silently different server,
and what `patch` said (offset, fuzz) is kept with the cell.

`Patches` is that procedure for a runtime's cells: each patch prepared once per image, and for each cell a copy kept
in the run directory, which is what is mounted (and what `run --dry-run` names, touching nothing). `repro` prints the
same procedure as shell commands (`shell_steps`): the same GNU patch argv in the same kind of tree, so a person who
pastes them gets the harness's file byte for byte.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness import nofollow
from harness.errors import PatchError, PatchMismatch, RuntimeUnavailable, UsageError
from harness.matrix.cells import Cell
from harness.matrix.model import PatchSpec
from harness.runtime.records import AppliedPatch
from harness.shell import AND, OR, PIPE, QUIET, Raw, Step

if TYPE_CHECKING:
    from harness.runtime.pull import Images

#: How GNU patch is run: `-p1` as the seed's APPLY; `--batch` never asks; `--forward` refuses an already-applied patch
#: instead of reversing it; no backup files in the scratch tree.
PATCH_ARGS = ("-p1", "--batch", "--forward", "--no-backup-if-mismatch")
#: GNU patch's environment beside the caller's: its messages (kept, and read for fuzz and offsets) in one language.
PATCH_ENV = {"LC_ALL": "C"}
_FUZZ_OR_OFFSET = re.compile(r"^Hunk #\d+ succeeded at \d+.*(?:fuzz|offset).*$", re.M)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def gnu_patch() -> str:
    """The GNU patch binary, or a PatchError saying how to get it (checked before any cell runs)."""
    found = shutil.which(os.environ.get("BOOT_HARNESS_PATCH", "patch"))
    if not found:
        raise PatchError("GNU patch is not installed (the seed's APPLY uses it): apt-get install patch")
    return found


def _strip(path: str, strip: int) -> str:
    path = path.split("\t", 1)[0].strip()
    if path == "/dev/null":
        return path
    parts = path.split("/")
    return "/".join(parts[strip:]) if len(parts) > strip else parts[-1]


def patched_paths(text: str, strip: int = 1) -> list[str]:
    """The files a unified diff patches, as `patch -p1` names them (commentary before the headers is ignored, as
    patch ignores it). Only the headers are read: applying is GNU patch's job."""
    lines = text.splitlines()
    paths = []
    for first, second in zip(lines, lines[1:], strict=False):
        if first.startswith("--- ") and second.startswith("+++ "):
            new = _strip(second[4:], strip)
            paths.append(new if new != "/dev/null" else _strip(first[4:], strip))
    return paths


@dataclass(frozen=True)
class PreparedPatch:
    target: str
    patch: str
    base_sha256: str
    patched_sha256: str
    patched_file: Path
    #: What GNU patch printed, verbatim.
    patch_output: str = ""
    #: Its lines worth a warning in the cell: a hunk that applied at an offset or with fuzz.
    warnings: tuple[str, ...] = field(default=())

    def applied(self, kept: Path, run_dir: Path) -> AppliedPatch:
        """The record of this patch mounted from `kept`, a copy in the run directory."""
        return AppliedPatch(target=self.target, patch=self.patch, base_sha256=self.base_sha256,
                            patched_sha256=self.patched_sha256, patched_file=str(kept.relative_to(run_dir)),
                            patch_output=self.patch_output, warnings=list(self.warnings))


def patch_argv(binary: str, patch_path: Path) -> list[str]:
    """GNU patch as the harness runs it, in the tree's root; `repro`'s printed steps run the same argv."""
    return [binary, *PATCH_ARGS, "-i", str(patch_path.resolve())]


def apply_gnu_patch(pristine: bytes, patch_path: Path, relpath: str) -> tuple[bytes, str]:
    """`cd D && patch -p1 --batch --forward < PATCH` with D holding only `relpath`; (patched bytes, patch's output)."""
    binary = gnu_patch()
    with tempfile.TemporaryDirectory(prefix="bh-patch-") as tmp:
        dest = Path(tmp, relpath)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(pristine)
        proc = subprocess.run(patch_argv(binary, patch_path), cwd=tmp, capture_output=True,
                              text=True, env={**os.environ, **PATCH_ENV}, timeout=60)
        said = (proc.stdout + proc.stderr).strip()
        if proc.returncode != 0:
            lines = [ln for ln in said.splitlines() if ln.strip() and not ln.startswith("patching file")]
            raise PatchError(f"{patch_path.name}: GNU patch -p1 failed (exit {proc.returncode}): "
                             f"{'; '.join(lines[:3]) or 'no output'}")
        return dest.read_bytes(), said


def tree_path(patch_path: Path, target: str) -> str:
    """Where `target` lies in the tree GNU patch runs in: the one file the patch names, as `-p1` strips it (a PatchError
    when the patch names none, several, or another file)."""
    try:
        text = patch_path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise PatchError(f"{patch_path}: cannot read: {exc.strerror}") from None
    paths = patched_paths(text)
    if not paths:
        raise PatchError(f"{patch_path}: no unified diff in the file (no `--- a/...` / `+++ b/...` header)")
    matching = [p for p in paths if target.endswith("/" + p)]
    if len(paths) != 1 or len(matching) != 1:
        raise PatchError(f"{patch_path}: patches {', '.join(paths)}; a patch entry must patch exactly its target "
                         f"{target}")
    return matching[0]


def patch_file(pristine: bytes, patch_path: Path, target: str, base_sha256: str, patched_sha256: str,
               out_dir: Path) -> PreparedPatch:
    """Check, apply with GNU patch, check again; keep the pristine and patched files and their hashes in `out_dir`."""
    got = sha256_bytes(pristine)
    if got != base_sha256:
        raise PatchError(f"{target}: the image's file has sha256 {got}, the matrix expects base_sha256 {base_sha256} "
                         f"(a different image, or {patch_path.name} was made for another one)")
    patched, said = apply_gnu_patch(pristine, patch_path, tree_path(patch_path, target))
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
    (out_dir / "patch.out").write_text(said + "\n")
    return PreparedPatch(target, str(patch_path), base_sha256, patched_sha256, dest, said,
                         tuple(_FUZZ_OR_OFFSET.findall(said)))


def _sha256_check(sha256: str, path: Path) -> tuple[str, ...]:
    return ("printf", r"%s  %s\n", sha256, str(path), PIPE, "sha256sum", "-c", "-")


def shell_steps(engine: str, image: str, spec: PatchSpec, patch_path: Path, kept: Path, container: str) -> tuple[
        tuple[str, ...], ...]:
    """`patch_file` as commands a person pastes, making `kept` (its pristine copy beside it as `.orig`): the file copied
    out of `image` through a container that never runs (named `container`), its sha256 checked, GNU patch run with
    `patch_argv` and PATCH_ENV at the root of a tree laid out as the patch's paths say, the result checked, made
    read-only. The tree is a folder beside `kept`, removed at the end."""
    relpath = tree_path(patch_path, spec.target)
    orig = kept.with_name(kept.name + ".orig")
    tree = kept.with_name(kept.name + ".tree")
    in_tree = tree / relpath
    env = [f"{k}={v}" for k, v in PATCH_ENV.items()]
    return (
        ("mkdir", "-p", str(in_tree.parent)),
        (engine, "rm", "-f", container, *QUIET, OR, "true"),
        (engine, "create", "--name", container, "--entrypoint", "/bin/true", image, QUIET[0]),
        (engine, "cp", f"{container}:{spec.target}", str(orig)),
        (engine, "rm", container, QUIET[0]),
        _sha256_check(spec.base_sha256, orig),
        ("cp", str(orig), str(in_tree)),
        (Raw("("), "cd", str(tree), AND, *env, *patch_argv("patch", patch_path), Raw(")")),
        _sha256_check(spec.patched_sha256, in_tree),
        ("mv", "-f", str(in_tree), str(kept)),
        ("chmod", "444", str(kept)),
        ("rm", "-r", str(tree)),
    )


def kept_path(run_dir: Path, cell: Cell, index: int, target: str) -> Path:
    """Where a cell's `index`-th patched file is kept in the run directory (and mounted from)."""
    name = Path(target).name
    return run_dir / "patches" / cell.id / f"{index}-{name}" / name


def image_of(cell: Cell) -> str:
    """The image a container cell runs; a cell without one cannot run in a container (said before anything starts)."""
    if not cell.image:
        raise RuntimeUnavailable(f"image: cell {cell.id} has no image (set `image:` or give an axis value one)")
    return cell.image


class Patches:
    """The matrix's patches on one runtime's images; `notes` gets a line for each hunk GNU patch fuzzed or offset."""

    def __init__(self, matrix_path: Path, base_dir: Path, images: Images, notes: list[str]):
        self.matrix_path, self.base_dir, self.images, self.notes = matrix_path, base_dir, images, notes
        self._prepared: dict[tuple[str, str, str], PreparedPatch] = {}
        self._dir: Path | None = None

    def source(self, spec: PatchSpec) -> Path:
        return (self.base_dir / spec.patch).resolve()

    def prepare(self, image: str, spec: PatchSpec) -> PreparedPatch:
        """Once per image (by id), target and patch; a patch that does not fit is bad input (the matrix's)."""
        key = (self.images.resolve(image)[0], spec.target, spec.patch)
        if key not in self._prepared:
            pristine = self.images.copy_out(image, spec.target)
            if self._dir is None:
                self._dir = Path(tempfile.mkdtemp(prefix="boot-harness-patches-"))
            out = self._dir / f"{key[0].split(':')[-1][:12]}-{len(self._prepared)}"
            try:
                prepared = patch_file(pristine, self.source(spec), spec.target, spec.base_sha256,
                                      spec.patched_sha256, out)
            except PatchError as exc:
                raise PatchMismatch(f"{self.matrix_path}: patches: {exc}") from None
            self._prepared[key] = prepared
            for warning in prepared.warnings:
                self.notes.append(f"patches: {Path(spec.patch).name} on {spec.target}: GNU patch: {warning}")
        return self._prepared[key]

    def keep(self, cell: Cell, run_dir: Path) -> list[tuple[PreparedPatch, Path]]:
        """Copies of the cell's patched files in the run directory: what was mounted is kept with the results."""
        kept = []
        for i, spec in enumerate(cell.patches):
            prepared = self.prepare(image_of(cell), spec)
            patched = kept_path(run_dir, cell, i, spec.target)
            d = patched.parent
            for f in prepared.patched_file.parent.iterdir():  # in the run folder never through a link, each file
                # replaced whole (a copy kept before is read-only: repro twice, as non-root); the patched one read-only
                nofollow.write_atomic(run_dir, d / f.name, f.read_bytes(), mode=0o444 if f.name == patched.name
                                      else 0o644)
            kept.append((prepared, patched))
        return kept

    def planned(self, cell: Cell, run_dir: Path, engine: str) -> tuple[list[tuple[str, Path]], list[Step]]:
        """(target, kept path) pairs `keep` would give, and how each file would be made, in words and as `engine`'s
        shell commands, touching nothing but reading the patch (give an absolute `run_dir`: the steps name the paths
        as the engine would get them). A patch that does not name its target is bad input, as in `prepare`."""
        kept, steps = [], []
        for i, spec in enumerate(cell.patches):
            path = kept_path(run_dir, cell, i, spec.target)
            kept.append((spec.target, path))
            said = (f"would copy {spec.target} out of {cell.image}, check sha256 {spec.base_sha256[:12]}…, "
                    f"apply {self.source(spec)} with GNU patch {' '.join(PATCH_ARGS)}, check sha256 "
                    f"{spec.patched_sha256[:12]}…, keep it as {path}")
            try:
                commands = shell_steps(engine, image_of(cell), spec, self.source(spec), path,
                                       f"bh-repro-{cell.id}-copy{i}")
            except PatchError as exc:
                raise UsageError(f"{self.matrix_path}: patches: {exc}") from None
            steps.append(Step(said, commands))
        return kept, steps
