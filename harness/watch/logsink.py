"""The cell's server log on disk (secrets masked) and a short tail kept in memory for the record.

The log as saved is held to a cap (`log_max_mb`): a server stuck printing the same warning must not fill the runner's
disk. Its head (the first half of the cap: version, arguments, every KV figure) goes to the file as it comes; past it
the lines go to two rotating tail files beside it (each a quarter of the cap; the older one is dropped when a third
begins), so what the server said last is kept whatever it wrote in between, and nothing of it is held in memory. At
close the kept tail is appended to the file, after a line that says how many lines and bytes were left out when any
were: a log within its cap is saved whole. A harness killed with SIGKILL leaves the head, and the tail files beside
it.

A disk that fills while a server floods its log cuts the log, with a marker, instead of failing the cell: the boot's
verdict does not depend on the file, and the tail (in the record) still ends with what the server said last."""

from __future__ import annotations

import errno
import os
import tempfile
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from harness import nofollow
from harness.masking import Masker
from harness.units import fmt_bytes
from harness.watch.records import LogCut

TAIL_LINES = 40
#: A server that logs without pause still reaches the file this often; in a pause the watch loop flushes at once.
FLUSH_EVERY_S = 0.5
#: The saved log's cap when the matrix says nothing (`log_max_mb`).
DEFAULT_MAX_BYTES = 64 * 2**20
_NOTE = "[boot-harness]"
_COPY_CHUNK = 1 << 20


class _Segment:
    """One tail file: made by us (mkstemp: a new name, O_EXCL, never a link), read back and removed by us."""

    def __init__(self, beside: Path):
        fd, name = tempfile.mkstemp(prefix=f".{beside.name}.tail-", dir=beside.parent)
        self.path = Path(name)
        self.file: BinaryIO = os.fdopen(fd, "w+b")
        self.bytes = self.lines = 0

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self.bytes += len(data)
        self.lines += 1

    def copy_to(self, out: BinaryIO) -> None:
        self.file.flush()
        self.file.seek(0)
        while chunk := self.file.read(_COPY_CHUNK):
            out.write(chunk)

    def remove(self) -> None:
        try:
            self.file.close()
        except OSError:
            pass
        try:
            self.path.unlink()
        except OSError:
            pass


class LogSink:
    def __init__(self, path: Path, masker: Masker, tail_lines: int = TAIL_LINES,
                 echo: Callable[[str], None] | None = None, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 anchor: Path | None = None):
        """`anchor`: the folder the log is reached from (the run folder; default the log's own folder) — below it
        never through a link, and the log itself a file boot-harness wrote or new (harness.nofollow)."""
        self.path = path
        #: Masks each line as the log's next: a secret split across lines is masked on both (harness.masking).
        self._mask = masker.lines()
        fd = nofollow.open_file(path.parent if anchor is None else anchor, path)
        self._file: BinaryIO = os.fdopen(fd, "wb")
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._echo = echo
        self._dirty, self._flushed_at = False, time.monotonic()
        #: Why the file stopped taking lines (a full disk), once it did; the tail goes on.
        self.cut: str | None = None
        self.max_bytes = max_bytes
        #: The head's room left; once a line does not fit, the rest goes to the rotating tail files.
        self._head_room = None if max_bytes is None else max_bytes // 2
        self._segment_bytes = 0 if max_bytes is None else max(1, max_bytes // 4)
        self._segments: list[_Segment] = []  # the older, then the current
        self.written_bytes = self.written_lines = 0
        self._dropped_bytes = self._dropped_lines = 0

    def _cut(self, exc: OSError) -> None:
        self.cut = f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
        marker = f"{_NOTE} log cut here: {self.path} could not be written: {self.cut}; the boot went on"
        self._tail.append(marker)
        try:  # space for one line may come back (another file removed); if not, the tail in the record has it
            self._file.write(("\n" + marker + "\n").encode())
            self._file.flush()
        except (OSError, ValueError):
            pass

    def write(self, line: str) -> None:
        masked = self._mask(line)
        data = (masked + "\n").encode("utf-8", errors="replace")
        self.written_bytes += len(data)
        self.written_lines += 1
        if self.cut is not None:
            self._dropped_bytes += len(data)
            self._dropped_lines += 1
        else:
            try:
                self._save(data)
            except OSError as exc:
                self._cut(exc)
        self._tail.append(masked[:2000])
        self._dirty = True
        if time.monotonic() - self._flushed_at >= FLUSH_EVERY_S:
            self.flush()
        if self._echo is not None:
            self._echo(masked)

    def _save(self, data: bytes) -> None:
        room = self._head_room
        if room is None or (not self._segments and len(data) <= room):
            self._file.write(data)
            if room is not None:
                self._head_room = room - len(data)
            return
        if not self._segments:
            self._segments.append(_Segment(self.path))
        current = self._segments[-1]
        if current.bytes and current.bytes + len(data) > self._segment_bytes:
            if len(self._segments) == 2:  # the older one is now more than a tail's worth back: left out
                older = self._segments.pop(0)
                self._dropped_bytes += older.bytes
                self._dropped_lines += older.lines
                older.remove()
            current = _Segment(self.path)
            self._segments.append(current)
        current.write(data)

    def note(self, text: str) -> None:
        """A harness line in the log, marked so nobody mistakes it for the server's."""
        self.write(f"{_NOTE} {text}")

    def flush(self) -> None:
        if self._dirty and not self._file.closed and self.cut is None:
            try:
                self._file.flush()
            except OSError as exc:
                self._cut(exc)
            self._dirty, self._flushed_at = False, time.monotonic()

    def _join_tail(self) -> None:
        """The kept tail after the line that says what was left out; the tail files removed (ours, made here)."""
        segments, self._segments = self._segments, []
        try:
            if self.cut is None and segments:
                if self._dropped_lines:  # else the whole log fits its cap: kept as it came
                    kept = sum(s.lines for s in segments)
                    self._file.write(f"{_NOTE} {self._dropped_lines} lines ({fmt_bytes(self._dropped_bytes)}) left "
                                     f"out here: the log passed its cap of {fmt_bytes(self.max_bytes)} (log_max_mb); "
                                     f"its last {kept} lines follow\n".encode())
                for s in segments:
                    s.copy_to(self._file)
        except OSError as exc:
            self._cut(exc)
        finally:
            for s in segments:
                if self.cut is not None:  # the disk filled before (or while) the tail went in: left out too
                    self._dropped_bytes += s.bytes
                    self._dropped_lines += s.lines
                s.remove()

    def close(self) -> None:
        if not self._file.closed:
            self._join_tail()
            try:
                self._file.close()
            except OSError as exc:  # the last buffered lines did not fit
                if self.cut is None:
                    self._cut(exc)

    def record(self, skimmed_lines: int = 0) -> LogCut | None:
        """What the record says of the saved log; None when it is whole and every line was read."""
        if not (self._dropped_lines or self.cut or skimmed_lines):
            return None
        return LogCut(limit_bytes=self.max_bytes, written_bytes=self.written_bytes, written_lines=self.written_lines,
                      dropped_bytes=self._dropped_bytes, dropped_lines=self._dropped_lines, disk_error=self.cut,
                      skimmed_lines=skimmed_lines)

    @property
    def tail(self) -> list[str]:
        return list(self._tail)
