"""Which `compile_cache:` paths a matrix may name. The harness writes into the cache and opens the folders it creates
to all (harness/runtime/compile_cache.py), so the rule is checked where the matrix is loaded: `validate` and `run`
refuse the same paths, before anything is written."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

#: Folders of the system itself: never a cache (nor anything under /proc, /sys, /dev).
_SYSTEM = ("/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc",
           "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/tmp")


def _repo_root(start: Path) -> Path | None:
    for p in (start, *start.parents):
        if (p / ".git").exists():
            return p
    return None


def _protected(matrix_dir: Path) -> list[tuple[str, Path]]:
    """Folders a cache must neither be nor hold, each with what it is."""
    cwd = Path.cwd()
    found = [("the filesystem root", Path("/")), ("the current folder", cwd), ("the matrix file's folder", matrix_dir),
             ("your home folder", Path.home())]
    for label, start in (("the matrix file's repository", matrix_dir), ("the current repository", cwd)):
        repo = _repo_root(start)
        if repo is not None:
            found.append((label, repo))
    try:
        found += [(f"the home folder of {u.pw_name}", Path(u.pw_dir))
                  for u in pwd.getpwall() if u.pw_dir.startswith("/")]
    except OSError:
        pass
    return [(label, Path(os.path.realpath(p))) for label, p in found]


def refusal(setting: str, matrix_dir: Path) -> str | None:
    """Why the `compile_cache:` path `setting` may not be used, or None. The harness writes into the cache and opens
    the folders it creates to all, so the cache must be a folder of its own, never one that holds the user's files."""
    if setting in ("run", "none"):
        return None
    root = Path(os.path.abspath(matrix_dir / os.path.expanduser(setting)))
    real = Path(os.path.realpath(root))
    if root.is_symlink():
        shown = f"{setting!r} (a link to {real})"
    else:
        shown = repr(setting) if str(real) == setting.rstrip("/") else f"{setting!r} ({real})"
    own = "give the cache a folder of its own, e.g. ~/.cache/boot-harness/compile"
    protected = _protected(Path(os.path.realpath(matrix_dir)))
    for label, p in protected:
        if real == p:
            return f"{shown} is {label}: {own}"
    for label, p in protected:
        if real in p.parents:
            return f"{shown} holds {label} ({p}): {own}"
    if str(real) in _SYSTEM or real.parts[1:2] in (("proc",), ("sys",), ("dev",)):
        return f"{shown} is a system folder: {own}"
    if real.exists() and not real.is_dir():
        return f"{shown} is not a folder"
    return None
