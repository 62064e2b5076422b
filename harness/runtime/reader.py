"""Reading a server's output without trusting it: bounded lines, any bytes, never an exception out of the thread; a
container's log read to its very last line."""

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


def pump_chunks(chunks, on_line: LineSink) -> None:
    """Lines from a stream of arbitrary byte chunks (docker's log stream does not promise one line per chunk)."""
    buf = b""
    try:
        for chunk in chunks:
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                piece, buf = buf[:nl], buf[nl + 1:]
                while len(piece) > MAX_LINE:
                    on_line(piece[:MAX_LINE].decode("utf-8", errors="replace"))
                    piece = piece[MAX_LINE:]
                on_line(piece.decode("utf-8", errors="replace"))
            while len(buf) > MAX_LINE:
                on_line(buf[:MAX_LINE].decode("utf-8", errors="replace"))
                buf = buf[MAX_LINE:]
    except Exception:  # noqa: BLE001 - the engine hanging up mid-stream is the end of the log, not our crash
        pass
    finally:
        if buf:
            on_line(buf.decode("utf-8", errors="replace"))
        on_line(None)


def log_stream(container):
    """A container's log as it comes, and then its last line if the engine held it back: docker's follow stream
    ends without a final line that has no newline (a server that died mid-line), though the stored log has it."""
    last = b""
    for chunk in container.logs(stream=True, follow=True):
        if chunk:
            last = chunk
        yield chunk
    try:
        tail = container.logs(stream=False, tail=1)
    except Exception:  # noqa: BLE001 - removed already: nobody reads this log any more
        return
    if tail and not tail.endswith(b"\n") and (not last or last.endswith(b"\n")):
        yield tail
