"""Ctrl-C, SIGTERM and SIGHUP while cells run: raised as Interrupted where the run can still clean up, held back while
a server is being torn down. SIGHUP is an ssh session or a CI step cut off: the same stop, not a silent death that
leaves the run marked "running"."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from harness.errors import Interrupted

_HELD = {signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT/SIGTERM/SIGHUP while tearing down; they are delivered on exit from the block.

    Held by swapping the Python-level handlers, not with pthread_sigmask: a mask only covers the calling thread, and
    while a cell runs the log reader and exit waiter threads take the signal instead, whose Python handler then runs
    in the main thread all the same, in the middle of the teardown."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in _HELD}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if pending:
            signal.raise_signal(pending[0])


@contextlib.contextmanager
def interrupts_raise() -> Iterator[None]:
    """SIGTERM and SIGHUP behave like Ctrl-C: each raises Interrupted in the main thread, so `finally` blocks run."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, handler) for s in _HELD}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
