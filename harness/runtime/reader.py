"""Reading a server's output without trusting it: bounded lines, any bytes, never an exception out of the thread."""

from __future__ import annotations

from typing import IO

from harness.runtime.base import LineSink

#: A server that floods one endless line must not grow our memory: longer lines are cut into pieces of this size.
MAX_LINE = 64 * 1024


def pump_lines(stream: IO[bytes] | None, on_line: LineSink) -> None:
    try:
        if stream is not None:
            while True:
                chunk = stream.readline(MAX_LINE)
                if not chunk:
                    break
                on_line(chunk.rstrip(b"\n").decode("utf-8", errors="replace"))
    except (OSError, ValueError):
        pass
    finally:
        on_line(None)
