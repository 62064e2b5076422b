"""What the harness changes inside a folder of its own (a run folder, a cell's scratch), reached never through a link.

A path is split in two: its anchor, a folder a person named (`--results-dir`, `--resume RUN`), opened as given; and
the part below it, walked one component at a time with O_NOFOLLOW relative to the descriptor of the folder above, so
a link planted anywhere below — `logs`, `work/<cell>`, `logs/<cell>.log`, `.owner.json` — is refused with its path
named, and never written through, truncated, chmodded or removed. A file written is a regular file with one link,
this user's (a hard link to someone's file is not ours to truncate); a new one is made with O_EXCL. A folder the
harness made is known from then on by its identity (device, inode), and only that folder is removed later.

Every refusal is a FileRefused (`PATH: what is wrong`, exit 2).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.errors import FileRefused
from harness.files import kind_of

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
#: Why a path below the anchor is never followed, in every refusal.
LEFT_ALONE = "left alone"


def _parts(anchor: Path, path: Path) -> tuple[str, ...]:
    rel = Path(path).relative_to(anchor)
    if any(p in ("..", ".") for p in rel.parts):
        raise FileRefused(str(path), "", f"is not below {anchor}")
    return rel.parts


def refusal(path: Path, st: os.stat_result | None, wanted: str) -> FileRefused:
    """`path` is not the `wanted` thing the harness would have made there (a link, a FIFO, a hard link, another
    user's): named, and left alone."""
    if st is None:
        return FileRefused(str(path), "", f"is not {wanted}: {LEFT_ALONE}")
    if stat.S_ISLNK(st.st_mode):
        what = "a symbolic link"
    elif wanted == "a folder" and stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode) and wanted != "a folder":
        what = (f"owned by uid {st.st_uid}, not this user" if st.st_uid != os.geteuid()
                else f"a hard link ({st.st_nlink} names)")
    else:
        what = kind_of(st.st_mode).value
    return FileRefused(str(path), "", f"is {what}, not {wanted}: {LEFT_ALONE}")


def _lstat_at(fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir(anchor: Path, path: Path, *, create: bool = False, mode: int = 0o755) -> int:
    """The descriptor of folder `path` (the caller closes it): `anchor` opened as given, each component below it
    never through a link; with `create`, the missing ones made (`mode`, the anchor too). FileRefused naming the first
    component that is a link or not a folder, or that is missing (without `create`)."""
    if create:  # the anchor is a folder a person named: made as any output folder is
        Path(anchor).mkdir(parents=True, exist_ok=True)
    fd = os.open(anchor, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    where = Path(anchor)
    try:
        for part in _parts(anchor, path):
            where = where / part
            try:
                sub = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise FileRefused(str(where), "", "no such folder") from None
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                sub = _open_sub(fd, part, where)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise refusal(where, _lstat_at(fd, part), "a folder") from None
                raise
            os.close(fd)
            fd = sub
        return fd
    except BaseException:
        os.close(fd)
        raise


def _open_sub(fd: int, part: str, where: Path) -> int:
    try:
        return os.open(part, _DIR, dir_fd=fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise refusal(where, _lstat_at(fd, part), "a folder") from None
        raise


@contextlib.contextmanager
def folder(anchor: Path, path: Path, *, create: bool = False) -> Iterator[int]:
    """`open_dir`, closed on leaving."""
    fd = open_dir(anchor, path, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


def check_folder(anchor: Path, path: Path) -> None:
    """FileRefused unless `path` is absent or a folder reached without a link. Touches nothing."""
    try:
        os.close(open_dir(anchor, path))
    except FileRefused as exc:
        if exc.message != "no such folder":
            raise


def check_absent(anchor: Path, path: Path, hint: str = "") -> None:
    """FileRefused if anything is at `path` (a folder this run is to make there, exclusively). Touches nothing."""
    try:
        with folder(anchor, Path(path).parent) as pfd:
            st = _lstat_at(pfd, Path(path).name)
    except FileRefused as exc:
        if exc.message == "no such folder":
            return
        raise
    if st is not None:
        raise FileRefused(str(path), "", f"is already there ({kind_of(st.st_mode).value}), not made by this run: "
                                         f"{LEFT_ALONE}{hint}")


def _mine(st: os.stat_result) -> bool:
    """A regular file this user may rewrite as its own: one name (a hard link to a file elsewhere is not), its owner."""
    return stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.geteuid()


def check_file(anchor: Path, path: Path) -> None:
    """FileRefused unless `path` is absent or a file the harness may rewrite (`open_file`'s rule), its folders
    reached without a link. Touches nothing."""
    try:
        with folder(anchor, Path(path).parent) as fd:
            st = _lstat_at(fd, Path(path).name)
    except FileRefused as exc:
        if exc.message == "no such folder":
            return
        raise
    if st is not None and not _mine(st):
        raise refusal(Path(path), st, "a file boot-harness wrote")


def open_file(anchor: Path, path: Path, *, append: bool = False, mode: int = 0o644, keep: bool = False) -> int:
    """A descriptor to write `path` (its folders made as needed): created, or — a file this user wrote before, a
    regular file with one name — emptied (or appended to). A link, a FIFO, a device, a hard link or another user's
    file there is refused before it is opened (a device's open can have effects), and again after (fstat). `keep`:
    opened to read and write, its content kept (a lock file, whose holder's pid another process reads)."""
    path = Path(path)
    with folder(anchor, path.parent, create=True) as pfd:
        st = _lstat_at(pfd, path.name)
        if st is not None and not _mine(st):
            raise refusal(path, st, "a file boot-harness wrote")
        flags = ((os.O_RDWR if keep else os.O_WRONLY) | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                 | (os.O_APPEND if append else 0))
        try:
            fd = os.open(path.name, flags, mode, dir_fd=pfd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise refusal(path, _lstat_at(pfd, path.name), "a file boot-harness wrote") from None
            raise
    try:
        st = os.fstat(fd)
        if not _mine(st):
            raise refusal(path, st, "a file boot-harness wrote")
        os.set_blocking(fd, True)
        if not (append or keep):
            os.ftruncate(fd, 0)
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_atomic(anchor: Path, path: Path, data: str | bytes, *, mode: int = 0o600) -> None:
    """`data` as the whole of `path`, readers seeing the old file or the new one: a new file (O_EXCL) beside it,
    fsynced, renamed over it within its folder's descriptor. What is there must be absent or a regular file this user
    wrote; anything else (a link included) is refused and left as it is. A file that was there keeps its mode."""
    path = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with folder(anchor, path.parent, create=True) as pfd:
        before = _lstat_at(pfd, path.name)
        if before is not None and not _mine(before):
            raise refusal(path, before, "a file boot-harness wrote")
        tmp = f".{path.name}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     stat.S_IMODE(before.st_mode) if before else mode, dir_fd=pfd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(raw)
                f.flush()
                os.fchmod(f.fileno(), stat.S_IMODE(before.st_mode) if before else mode)
                os.fsync(f.fileno())
            now = _lstat_at(pfd, path.name)  # a link swapped in since is not replaced either
            if now is not None and not _mine(now):
                raise refusal(path, now, "a file boot-harness wrote")
            os.replace(tmp, path.name, src_dir_fd=pfd, dst_dir_fd=pfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=pfd)
            raise
        with contextlib.suppress(OSError):
            os.fsync(pfd)


def unlink(anchor: Path, path: Path) -> bool:
    """`path` removed if it is a file the harness wrote (`open_file`'s rule), reached without a link; whether it was.
    Anything else there is left."""
    path = Path(path)
    try:
        with folder(anchor, path.parent) as pfd:
            st = _lstat_at(pfd, path.name)
            if st is None or not _mine(st):
                return False
            os.unlink(path.name, dir_fd=pfd)
            return True
    except (FileRefused, FileNotFoundError):
        return False


def rename(anchor: Path, src: Path, dst: Path) -> None:
    """`src` renamed to `dst` in one folder (`dst` replaced, even a link — as a name, never written through); both a
    file the harness wrote or absent."""
    src, dst = Path(src), Path(dst)
    with folder(anchor, src.parent) as pfd:
        for p in (src, dst):
            st = _lstat_at(pfd, p.name)
            if st is not None and not _mine(st):
                raise refusal(p, st, "a file boot-harness wrote")
        if _lstat_at(pfd, src.name) is not None:
            os.replace(src.name, dst.name, src_dir_fd=pfd, dst_dir_fd=pfd)


@dataclass(frozen=True)
class Made:
    """A folder the harness made (or proved its own): where, and what it was (device, inode) when it was."""

    anchor: Path
    path: Path
    dev: int
    ino: int

    def still(self) -> bool:
        """Whether `path` is still that folder, reached without a link."""
        try:
            with folder(self.anchor, self.path.parent) as pfd:
                st = _lstat_at(pfd, self.path.name)
        except (FileRefused, OSError):
            return False
        return st is not None and stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == (self.dev, self.ino)


def make_dir(anchor: Path, path: Path, mode: int = 0o755) -> Made:
    """Folder `path`, made now (its parents as needed, none through a link). FileRefused if something is already
    there: what boot-harness did not make in this run is not its to fill or remove."""
    path = Path(path)
    with folder(anchor, path.parent, create=True) as pfd:
        try:
            os.mkdir(path.name, mode, dir_fd=pfd)
        except FileExistsError:
            st = _lstat_at(pfd, path.name)
            kind = "already there" if st is None else f"already there ({kind_of(st.st_mode).value})"
            raise FileRefused(str(path), "", f"is {kind}, not made by this run: {LEFT_ALONE}") from None
        st = os.stat(path.name, dir_fd=pfd, follow_symlinks=False)
    return Made(Path(anchor), path, st.st_dev, st.st_ino)


def identify(anchor: Path, path: Path) -> Made | None:
    """What folder is at `path` now (never through a link); None when there is none."""
    path = Path(path)
    try:
        with folder(anchor, path.parent) as pfd:
            st = _lstat_at(pfd, path.name)
    except (FileRefused, OSError):
        return None
    if st is None or not stat.S_ISDIR(st.st_mode):
        return None
    return Made(Path(anchor), path, st.st_dev, st.st_ino)


def remove_made(made: Made) -> bool:
    """The folder `made` removed with all it holds, if the entry at its path is still that folder (reached without a
    link); a link inside is removed as a link (shutil.rmtree's descriptor walk). Whether it was removed."""
    try:
        with folder(made.anchor, made.path.parent) as pfd:
            st = _lstat_at(pfd, made.path.name)
            if st is None or not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != (made.dev, made.ino):
                return False
            shutil.rmtree(made.path.name, dir_fd=pfd, ignore_errors=True)
            return _lstat_at(pfd, made.path.name) is None
    except (FileRefused, OSError):
        return False


def fchmod_dir(anchor: Path, path: Path, mode: int) -> None:
    """`chmod mode` of a folder, on its descriptor (never through a link)."""
    with folder(anchor, path) as fd:
        os.fchmod(fd, mode)
