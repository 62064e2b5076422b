"""The cell's full server log on disk (secrets masked) and a short tail kept in memory for the record.

A disk that fills while a server floods its log cuts the log, with a marker, instead of failing the cell: the boot's
verdict does not depend on the file, and the tail (in the record) still ends with what the server said last."""

from __future__ import annotations

import errno
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from harness import nofollow
from harness.masking import Masker

TAIL_LINES = 40
#: A server that logs without pause still reaches the file this often; in a pause the watch loop flushes at once.
FLUSH_EVERY_S = 0.5


class LogSink:
    def __init__(self, path: Path, masker: Masker, tail_lines: int = TAIL_LINES,
                 echo: Callable[[str], None] | None = None, anchor: Path | None = None):
        """`anchor`: the folder the log is reached from (the run folder; default the log's own folder) — below it
        never through a link, and the log itself a file boot-harness wrote or new (harness.nofollow)."""
        self.path = path
        self._mask = masker
        fd = nofollow.open_file(path.parent if anchor is None else anchor, path)
        self._file = os.fdopen(fd, "w", encoding="utf-8", errors="replace")
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._echo = echo
        self._dirty, self._flushed_at = False, time.monotonic()
        #: Why the file stopped taking lines (a full disk), once it did; the tail goes on.
        self.cut: str | None = None

    def _cut(self, exc: OSError) -> None:
        self.cut = f"{exc.strerror or exc} ({errno.errorcode.get(exc.errno or 0, exc.errno)})"
        marker = f"[boot-harness] log cut here: {self.path} could not be written: {self.cut}; the boot went on"
        self._tail.append(marker)
        try:  # space for one line may come back (another file removed); if not, the tail in the record has it
            self._file.write("\n" + marker + "\n")
            self._file.flush()
        except (OSError, ValueError):
            pass

    def write(self, line: str) -> None:
        masked = self._mask(line)
        if self.cut is None:
            try:
                self._file.write(masked + "\n")
            except OSError as exc:
                self._cut(exc)
        self._tail.append(masked[:2000])
        self._dirty = True
        if time.monotonic() - self._flushed_at >= FLUSH_EVERY_S:
            self.flush()
        if self._echo is not None:
            self._echo(masked)

    def note(self, text: str) -> None:
        """A harness line in the log, marked so nobody mistakes it for the server's."""
        self.write(f"[boot-harness] {text}")

    def flush(self) -> None:
        if self._dirty and not self._file.closed and self.cut is None:
            try:
                self._file.flush()
            except OSError as exc:
                self._cut(exc)
            self._dirty, self._flushed_at = False, time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            try:
                self._file.close()
            except OSError as exc:  # the last buffered lines did not fit
                if self.cut is None:
                    self._cut(exc)

    @property
    def tail(self) -> list[str]:
        return list(self._tail)
