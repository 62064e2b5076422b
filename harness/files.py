"""The one way the harness reads and writes the files it is given, so a hostile path cannot hang it, exhaust it or make
it replace what is not a file of its own.

Reading: only a regular file (symbolic links followed) is read. It is opened with O_NONBLOCK and checked with fstat on
the open descriptor, so a FIFO never blocks the open and a device (``/dev/zero``) is refused before a byte is read; a
whole-file read stops at a size bound, and a file read by lines (a server log) holds at most one line's bound. JSON is
parsed strictly: no NaN/Infinity, no number that overflows a float or a 64-bit integer, no nesting past `MAX_DEPTH` —
each refused with the file and the key named.

Writing: write-then-rename in the target's folder, fsynced. A symbolic link is written through (its target replaced,
the link kept); a device, FIFO, socket or directory is refused, never replaced. A file that exists keeps its mode
(and, where the writer may, its owner).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, BinaryIO

from pydantic_core import from_json

from harness.errors import FileRefused

#: A JSON or YAML file the harness reads whole (a matrix, a config.json, results.json, a cell record): generous —
#: the largest real results.json of a 2,000-cell run is a few MiB — yet far below what would exhaust memory.
JSON_LIMIT = 64 << 20
#: A run's record files together (results.json and every cells/<id>.json), for the readers that hold a whole run:
#: results.json, itself at most JSON_LIMIT, holds a copy of every cell, so a run the harness wrote stays under
#: twice that. Past it the files are forged, and parsed whole would exhaust memory where each file alone is within
#: its bound (six 61 MB cell records: a MemoryError under 3 GB).
RUN_LIMIT = 2 * JSON_LIMIT
#: Deeper nesting than any record, matrix or Hugging Face config has (they stay under 10); past it, parsers recurse.
MAX_DEPTH = 100
#: Digits of the largest integer a record or config may hold (2**63 has 19); more is refused, never converted.
MAX_INT_DIGITS = 20
#: Python's own bound on converting digits to an int (sys.get_int_max_str_digits): past it, a ValueError.
_PYTHON_INT_DIGITS = 4300


class FileKind(StrEnum):
    """What a path is, in the words the refusals use."""

    regular = "a regular file"
    directory = "a directory"
    fifo = "a FIFO (named pipe)"
    char_device = "a character device"
    block_device = "a block device"
    socket = "a socket"
    symlink = "a symbolic link"
    other = "not a regular file"


def kind_of(mode: int) -> FileKind:
    for test, kind in ((stat.S_ISREG, FileKind.regular), (stat.S_ISDIR, FileKind.directory),
                       (stat.S_ISFIFO, FileKind.fifo), (stat.S_ISCHR, FileKind.char_device),
                       (stat.S_ISBLK, FileKind.block_device), (stat.S_ISSOCK, FileKind.socket),
                       (stat.S_ISLNK, FileKind.symlink)):
        if test(mode):
            return kind
    return FileKind.other


def _not_regular(path: object, kind: FileKind) -> FileRefused:
    return FileRefused(str(path), "", f"is {kind.value}, not a regular file")


# ---------------------------------------------------------------------------------------------------- reading


def open_regular(path: str | os.PathLike[str], *, follow: bool = True) -> BinaryIO:
    """`path` opened for reading in binary, if it is a regular file; FileRefused (not regular, missing, unreadable)
    otherwise. Stat before the open, so a device is never even opened (opening some has effects); O_NONBLOCK on the
    open, so a FIFO swapped in meanwhile cannot block; fstat after, on what was opened. `follow=False`: a symbolic
    link is refused as one (what a run directory holds is never a way out of it)."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        raise FileRefused(str(path), "", "no such file") from None
    except OSError as exc:
        raise FileRefused(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, kind_of(st.st_mode))
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileRefused(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, kind_of(st.st_mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str], limit: int = JSON_LIMIT, *, follow: bool = True) -> bytes:
    """The whole of a regular file of at most `limit` bytes. The bound holds for files whose size lies (a /proc file
    says 0, a log still growing): never more than `limit` + 1 bytes are read."""
    return read_bytes_at(None, path, limit, follow=follow, where=str(path))


#: How much of a file `iter_lines` reads at a time.
READ_CHUNK = 1 << 16
_LINE_END = re.compile(rb"\r\n|\r|\n")


def iter_lines(path: str | os.PathLike[str], max_line_bytes: int, chunk_bytes: int = READ_CHUNK) -> Iterator[str]:
    """The physical lines of a regular file (\\n, \\r and \\r\\n end one; undecodable bytes become U+FFFD), read in
    fixed chunks: a line still unended when more than `max_line_bytes` of it are held is cut there, and its excess
    skipped without being held (one that ends in the chunk that took it past the bound is whole: at most a chunk
    longer), so memory stays bounded whatever the file holds. A FIFO would block and a device never end: refused
    (open_regular)."""
    with open_regular(path) as f:
        buf = b""
        skipping = False  # inside an over-long line whose head was already yielded
        while True:
            chunk = f.read(chunk_bytes)
            if chunk:
                buf += chunk
            start = 0
            for m in _LINE_END.finditer(buf):
                if m.group() == b"\r" and m.end() == len(buf) and chunk:
                    break  # maybe the first half of \r\n split across chunks
                if skipping:
                    skipping = False
                else:
                    yield buf[start: m.start()].decode("utf-8", errors="replace")
                start = m.end()
            buf = buf[start:]
            if len(buf) > max_line_bytes:
                if not skipping:
                    yield buf[:max_line_bytes].decode("utf-8", errors="replace")
                    skipping = True
                buf = b"\r" if buf.endswith(b"\r") else b""  # keep a possibly split \r\n
            if not chunk:
                if buf and not skipping:
                    yield buf.decode("utf-8", errors="replace")
                return


@contextlib.contextmanager
def open_dir(path: str | os.PathLike[str], *, at: int | None = None) -> Iterator[int]:
    """A directory's descriptor for `read_bytes_at`, closed on leaving: `path` itself, or its entry `path` of the
    directory `at` never through a link (the one way into a run's `cells/` from the run folder's descriptor)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (os.O_NOFOLLOW if at is not None else 0)
    fd = os.open(path, flags, dir_fd=at)
    try:
        yield fd
    finally:
        os.close(fd)


def read_bytes_at(dir_fd: int | None, name: str | os.PathLike[str] | os.DirEntry, limit: int = JSON_LIMIT, *,
                  follow: bool = False, where: str | None = None) -> bytes:
    """`read_bytes`, for a file of a directory already open (`dir_fd`; None: `name` is a path): a regular file (stat
    before the open, so a device is never even opened; O_NONBLOCK on the open, so a FIFO swapped in meanwhile cannot
    block; fstat after, on what was opened), never through a link unless `follow`, at most `limit` bytes — with no path
    resolved again: a year of nights is 23,000 cell records. `name` may be the directory listing's entry
    (`os.scandir(dir_fd)`): what it says the file is stands for the stat before the open. `where` names the file in
    a refusal (default its name)."""
    entry, name = (name, name.name) if isinstance(name, os.DirEntry) else (None, name)
    shown = where or str(name)
    try:
        if entry is not None:
            st = entry.stat(follow_symlinks=follow) if not entry.is_file(follow_symlinks=follow) else None
        else:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow)
    except FileNotFoundError:
        raise FileRefused(shown, "", "no such file") from None
    except OSError as exc:
        raise FileRefused(shown, "", f"cannot read: {exc.strerror or exc}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _not_regular(shown, kind_of(st.st_mode))
    try:  # O_NONBLOCK: a FIFO swapped in since cannot block the open (a regular file reads the same with it)
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW), dir_fd=dir_fd)
    except OSError as exc:
        raise FileRefused(shown, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(shown, kind_of(st.st_mode))
        if st.st_size > limit:
            raise FileRefused(shown, "", f"is {st.st_size:,} bytes, more than the {limit:,} this file may be")
        data = os.read(fd, st.st_size + 1)
        # the size fstat gave, read in one go, is the whole file (a read short of what was asked ends at its end): no
        # second read to be told so — one syscall less for each of a year's 23,000 records
        while len(data) != st.st_size and len(data) <= limit:  # to the end — a short read, a size that lies (/proc),
            more = os.read(fd, min(limit + 1 - len(data), 1 << 20))  # a file still growing — never past the bound
            if not more:
                break
            data += more
    except OSError as exc:
        raise FileRefused(shown, "", f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise FileRefused(shown, "", f"is more than the {limit:,} bytes this file may be")
    return data


class _Refused:
    """A JSON value parsed but not taken (NaN, an overflowing number): found with its key path by `_check`."""

    def __init__(self, why: str):
        self.why = why


def _parse_float(text: str) -> float | _Refused:
    value = float(text)
    return value if math.isfinite(value) else _Refused(f"{text} overflows a number")


def _int_parser(max_digits: int) -> Callable[[str], int | _Refused]:
    def parse(text: str) -> int | _Refused:
        digits = text.lstrip("-")
        if len(digits) > max_digits:
            return _Refused(f"a {len(digits)}-digit integer is out of range")
        return int(text)
    return parse


def _check(value: Any, limit_depth: int) -> tuple[str, str] | None:
    """(key path, what is wrong) of the first refused value or of nesting past `limit_depth`; None when clean.
    Iterative, so depth itself cannot overflow the stack."""
    todo: list[tuple[Any, str, int]] = [(value, "", 1)]
    while todo:
        v, where, depth = todo.pop()
        if isinstance(v, _Refused):
            return where, v.why
        if isinstance(v, (dict, list)):
            if depth > limit_depth:
                return "", f"nested more than {limit_depth} deep"  # the key path would be as long
            items = v.items() if isinstance(v, dict) else enumerate(v)
            for k, child in reversed(list(items)):
                todo.append((child, f"{where}.{k}" if where else str(k), depth + 1))
    return None


def parse_json(data: bytes | str, where: str, max_depth: int = MAX_DEPTH, *, strict: bool = True) -> Any:
    """JSON as the harness takes it: text that is not UTF-8 JSON, nesting deeper than `max_depth`, an integer Python
    cannot convert are refused as `where:key.path: what is wrong`. `strict` (a record the harness wrote, which never
    holds them): NaN, Infinity and numbers past a float or 64 bits too. Not strict (a model's config.json, read as
    Python's json reads it: NemotronH's `time_step_limit` holds Infinity): they are taken as floats."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:
        raise FileRefused(where, "", "is not UTF-8 text") from None
    try:  # a compiled parser alone, then one walk: a clean file (every record the harness wrote) costs no more
        if strict:  # pydantic-core's parser (twice json's speed) refuses NaN and Infinity itself; anything it
            value = from_json(data, allow_inf_nan=False)  # refuses is parsed again below, to be named
        else:
            value = json.loads(text, parse_constant=float)
        if _clean(value, max_depth, MAX_INT_DIGITS if strict else None):
            return value
    except json.JSONDecodeError as exc:
        raise FileRefused(where, "", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except (RecursionError, ValueError):  # too deep, an integer past Python's own digit bound, what from_json refused
        pass
    try:  # something is wrong: parsed again, number by number, to name it with its key path
        value = json.loads(text, parse_constant=_refused_constant if strict else float,
                           parse_float=_parse_float if strict else float,
                           parse_int=_int_parser(MAX_INT_DIGITS if strict else _PYTHON_INT_DIGITS))
    except json.JSONDecodeError as exc:
        raise FileRefused(where, "", f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise FileRefused(where, "", f"nested more than {max_depth} deep") from None
    problem = _check(value, max_depth)
    if problem is not None:
        raise FileRefused(where, *problem)
    return value


def _refused_constant(text: str) -> _Refused:
    return _Refused(f"{text} is not a number JSON allows")


def _clean(value: Any, limit_depth: int, max_int_digits: int | None) -> bool:
    """Whether nothing in `value` is refused (NaN, a number that overflowed a float, an integer of more digits than
    `max_int_digits`, nesting past `limit_depth`): the fast check, level by level, with no key paths (`_check` finds
    them). Strings, most of a record, cost one type test."""
    big = None if max_int_digits is None else 10 ** max_int_digits
    finite = math.isfinite
    level, depth = [value], 1
    while level:
        deeper: list[Any] = []
        add = deeper.extend
        for v in level:
            kind = type(v)
            if kind is str:
                continue
            if kind is dict or kind is list:
                if depth > limit_depth:
                    return False
                add(v.values() if kind is dict else v)
            elif kind is float:
                if not finite(v):
                    return False
            elif kind is int:
                if big is not None and not -big < v < big:
                    return False
            elif kind is not bool and v is not None:  # a _Refused constant
                return False
        level, depth = deeper, depth + 1
    return True


def read_json(path: str | os.PathLike[str], limit: int = JSON_LIMIT, *, follow: bool = True,
              strict: bool = True) -> Any:
    """A regular JSON file of at most `limit` bytes, parsed as `parse_json` does."""
    return parse_json(read_bytes(path, limit, follow=follow), str(path), strict=strict)


# ---------------------------------------------------------------------------------------------------- writing


def write_target(path: str | os.PathLike[str]) -> Path:
    """Where a write to `path` lands: a symbolic link's final target (the link stays), else `path`. FileRefused if
    what is there is not a regular file (a device, a FIFO, a socket, a directory): it is never replaced."""
    real = Path(os.path.realpath(path))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise FileRefused(str(path), "", f"cannot be written: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(str(path), "", f"is {kind_of(st.st_mode).value}, not a regular file: it is never "
                                         "replaced")
    return real


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, mode: int | None = None) -> Path:
    """Write `data` to `path` so readers see the old file or the new one, never half: a temporary file in the
    target's folder, fsynced, renamed over it. A new file gets `mode` (None: private, 0600); one that exists keeps
    its mode and owner. Returns the file written (a link's target). FileRefused for a target that is not a regular
    file; OSError (full disk, no permission) for the caller to word."""
    target = write_target(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        before: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        before = None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            if before is not None:
                os.fchmod(f.fileno(), stat.S_IMODE(before.st_mode))
                if (before.st_uid, before.st_gid) != (os.geteuid(), os.getegid()):
                    try:
                        os.fchown(f.fileno(), before.st_uid, before.st_gid)
                    except PermissionError:
                        pass  # not ours to give away: the file becomes the writer's, as any rewrite would make it
            elif mode is not None:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        write_target(path)  # what is there now (a device swapped in since) is never replaced either
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:
        dfd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass
    return target


def copy_regular(src: Path, dst: Path) -> None:
    """`src` (a regular file, never through a link) copied to a new `dst` (never replaced). FileRefused for a link or
    anything but a regular file at `src`; FileExistsError if `dst` exists."""
    with open_regular(src, follow=False) as f:
        st = os.fstat(f.fileno())
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      stat.S_IMODE(st.st_mode) or 0o600)
        try:
            with os.fdopen(out, "wb") as g:
                while chunk := f.read(1 << 20):
                    g.write(chunk)
        except BaseException:
            dst.unlink(missing_ok=True)
            raise
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
