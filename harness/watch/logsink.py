"""The cell's full server log on disk (secrets masked) and a short tail kept in memory for the record."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from harness.masking import Masker

TAIL_LINES = 40
#: A server that logs without pause still reaches the file this often; in a pause the watch loop flushes at once.
FLUSH_EVERY_S = 0.5


class LogSink:
    def __init__(self, path: Path, masker: Masker, tail_lines: int = TAIL_LINES,
                 echo: Callable[[str], None] | None = None):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._mask = masker
        self._file = path.open("w", encoding="utf-8", errors="replace")
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._echo = echo
        self._dirty, self._flushed_at = False, time.monotonic()

    def write(self, line: str) -> None:
        masked = self._mask(line)
        self._file.write(masked + "\n")
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
        if self._dirty and not self._file.closed:
            self._file.flush()
            self._dirty, self._flushed_at = False, time.monotonic()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    @property
    def tail(self) -> list[str]:
        return list(self._tail)
