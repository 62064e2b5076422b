#!/usr/bin/env python3
"""A server whose processes leave its process group, for tests/reliability/test_hostile_procs.py.

Run as the process runtime runs a server (`escaping_server.py [flags] --host H --port N`), it first starts three
processes that a process-group teardown cannot reach, each touching ESCAPE_MARKS/<shape>.<pid> once it is in place:
  daemon    a double-forked setsid daemon (its first child exits at once: the daemon is reparented)
  group     a child in a process group of its own
  session   a child that moves itself into a new session (os.setsid after fork) and listens on the server's port:
            with ESCAPE_OUTCOME=boot it is the server (tests/fakes/fake_vllm.py's, which answers /health and the
            probe), else a socket that hangs up on every caller; its mark holds the port
then, as ESCAPE_OUTCOME says: `boot` waits (the session child serves), `refuse` prints vLLM's KV refusal and exits 1,
`crash` a traceback and exits 3, `hang` waits. ESCAPE_DEAF=1: the three ignore SIGTERM.
"""

import os
import signal
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_vllm  # beside this file (sys.path above)

SHAPES = ("daemon", "group", "session")


def mark(shape: str, text: str = "") -> None:
    (Path(os.environ["ESCAPE_MARKS"]) / f"{shape}.{os.getpid()}").write_text(text)


def settle(quiet: bool = True) -> None:
    """What every escaped process does once in place: ignore SIGTERM if asked, and let go of the server's output as a
    daemon does (else the harness waits out its drain bound for the pipe to end after the leader exits)."""
    if os.environ.get("ESCAPE_DEAF") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if quiet:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)


def daemon() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            settle()
            mark("daemon")
            while True:
                time.sleep(3600)
        os._exit(0)


def own_group() -> None:
    if os.fork() == 0:
        os.setpgid(0, 0)
        settle()
        mark("group")
        while True:
            time.sleep(3600)


def new_session(port: int, serve: bool) -> None:
    if os.fork() == 0:
        os.setsid()
        settle(quiet=not serve)  # the server's own lines are its log
        if serve:
            mark("session", str(port))
            os.environ.update(FAKE_VLLM_DELAY="0", FAKE_VLLM_SCENARIO="boot")
            fake_vllm.main()
            os._exit(0)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            mark("session", str(port))
            while True:  # hangs up on every caller: a port held, no server behind it
                s.accept()[0].close()


def main() -> None:
    outcome = os.environ.get("ESCAPE_OUTCOME", "boot")
    port = int(fake_vllm.arg("--port", "8000"))
    fake_vllm.log("INFO 11-29 10:00:00 [api_server.py:1] vLLM API server version 0.0.0-fake")
    daemon()
    own_group()
    new_session(port, serve=outcome == "boot")
    marks = Path(os.environ["ESCAPE_MARKS"])
    for _ in range(500):  # up to ~10 s: the verdict comes after every shape is in place
        if all(list(marks.glob(f"{shape}.*")) for shape in SHAPES):
            break
        time.sleep(0.02)
    os.waitpid(-1, os.WNOHANG)  # the daemon's first child
    if outcome == "refuse":
        fake_vllm.log(fake_vllm.REFUSAL)
        fake_vllm.log("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
        sys.exit(1)
    if outcome == "crash":
        fake_vllm.log("Traceback (most recent call last):")
        fake_vllm.log("SomethingError: boom")
        sys.exit(3)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
