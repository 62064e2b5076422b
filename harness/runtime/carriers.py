"""A local server's processes, found by the server id they carry rather than by their process group.

A server may leave the group it was started in: a double-forked setsid daemon, a child in a group of its own, a server
that moved itself into a new session. Each still carries SERVER_ID_VAR (children inherit the environment, and the id is
random per server), which is the one proof that a process belongs to a server this harness started. Teardown and gc
end every process whose environment holds the exact entry `SERVER_ID_VAR=<id>`, whatever its group or session, and
nothing else.

Finding them reads /proc/PID/environ of every process, at most ENVIRON_MAX_BYTES each: about 14 µs a process on the
2-core test host (0.8 ms for its 100 processes, 29 ms for 2,100); a teardown scans twice when nothing escaped, once
more per round of SIGKILL otherwise, and polls only the carriers it found in between. A process that vanishes or
cannot be read is not a carrier, nor is one that overwrote its environment block (as setproctitle may): those are
reached through the process group only. Each signal goes through a pidfd opened before the process is proven again
(same start time, still carrying the id): a pid reused between the scan and the signal is never hit.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

from harness.clock import Clock
from harness.runtime.server_env import SERVER_ID_VAR

PROC = "/proc"
#: The most of one process's environment read. Linux caps argv plus envp at a quarter of the stack limit (2 MiB by
#: default); an entry past this bound is not seen, never half-matched.
ENVIRON_MAX_BYTES = 4 << 20
#: How many times the end of a server scans and SIGKILLs again: a daemon may fork while it is being scanned.
KILL_ROUNDS = 8
#: How long each round waits for what it SIGKILLed to be gone (a process with GBs mapped takes a while to exit).
KILL_WAIT_S = 5.0
POLL_S = 0.05


@dataclass(frozen=True)
class Carrier:
    """A live process that carried the id when it was scanned."""

    pid: int
    start: int  # clock ticks since boot (/proc/PID/stat field 22): a pid reused later has another
    pgid: int


def _stat(pid: int, proc: str = PROC) -> tuple[bytes, int, int] | None:
    """(state, process group, start time) of `pid`, or None when it is gone or unreadable."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[1].split()
        return fields[0], int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def proc_start_time(pid: int, proc: str = PROC) -> int | None:
    """When `pid` started, in clock ticks since boot (/proc/PID/stat field 22): a pid reused since has another."""
    st = _stat(pid, proc)
    return None if st is None else st[2]


def _environ(pid: int, proc: str) -> bytes | None:
    """The process's environment, NUL-terminated entries, at most ENVIRON_MAX_BYTES (a cut last entry dropped);
    None when it is gone or unreadable (another user's, a kernel thread's is empty)."""
    try:
        fd = os.open(f"{proc}/{pid}/environ", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        parts, size = [], 0
        while size < ENVIRON_MAX_BYTES:
            chunk = os.read(fd, min(1 << 16, ENVIRON_MAX_BYTES - size))
            if not chunk:
                break
            parts.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(parts)
    if size >= ENVIRON_MAX_BYTES:
        data = data[:data.rfind(b"\0") + 1]
    return data


def carries(pid: int, server_id: str, proc: str = PROC) -> bool:
    """Whether `pid`'s environment holds exactly `SERVER_ID_VAR=server_id` (False where it cannot be read)."""
    data = _environ(pid, proc)
    if not data:
        return False
    return b"\0" + f"{SERVER_ID_VAR}={server_id}".encode() + b"\0" in b"\0" + data


def _protected(proc: str) -> set[int]:
    """This process and its ancestors: never signalled, even by a gc run from inside a server's environment."""
    mine: set[int] = set()
    pid = os.getpid()
    while pid > 0 and pid not in mine and len(mine) < 4096:
        mine.add(pid)
        try:
            with open(f"{proc}/{pid}/stat", "rb") as f:
                pid = int(f.read(4096).rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            break
    return mine


def find(server_id: str, proc: str = PROC) -> list[Carrier] | None:
    """Every live process carrying the id, but this one and its ancestors; None where there is no /proc to ask."""
    try:
        entries = [e.name for e in os.scandir(proc)]
    except OSError:
        return None
    found: list[Carrier] = []
    protected: set[int] | None = None
    for name in entries:
        if not (name.isascii() and name.isdigit()):
            continue
        pid = int(name)
        if not carries(pid, server_id, proc):
            continue
        protected = _protected(proc) if protected is None else protected
        st = _stat(pid, proc)
        if pid in protected or st is None or st[0] in (b"Z", b"X"):
            continue
        found.append(Carrier(pid, st[2], st[1]))
    return found


def alive(c: Carrier, proc: str = PROC) -> bool:
    """The same process (its start time), not a zombie: a zombie holds no memory, no port and no GPU."""
    st = _stat(c.pid, proc)
    return st is not None and st[2] == c.start and st[0] not in (b"Z", b"X")


def send(c: Carrier, server_id: str, sig: int, proc: str = PROC) -> bool:
    """Signal `c` if it is still that process and still carries the id, proven after a pidfd pinned it (so the pid
    cannot be reused in between); False when it is gone, changed, or not ours to signal."""
    try:
        pidfd: int | None = os.pidfd_open(c.pid)
    except ProcessLookupError:
        return False
    except OSError:
        pidfd = None  # a kernel before 5.3 (or no fd left): the proof and the kill are as close as they can be
    try:
        if not (alive(c, proc) and carries(c.pid, server_id, proc)):
            return False
        if pidfd is None:
            os.kill(c.pid, sig)
        else:
            signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:  # gone meanwhile, or not ours to signal
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def signal_all(server_id: str, sig: int, outside: int | None = None, proc: str = PROC) -> list[Carrier]:
    """Send `sig` to every carrier found now, but those in process group `outside` (signalled as a group already: a
    second SIGTERM makes uvicorn skip its graceful shutdown); those it reached."""
    return [c for c in find(server_id, proc) or () if c.pgid != outside and send(c, server_id, sig, proc)]


def wait_gone(carriers: list[Carrier], clock: Clock, seconds: float, proc: str = PROC) -> list[Carrier]:
    """Wait up to `seconds` (on `clock`) for `carriers` to be gone; those still alive."""
    deadline = clock.now() + seconds
    left = [c for c in carriers if alive(c, proc)]
    while left and clock.now() < deadline:
        clock.sleep(POLL_S)
        left = [c for c in left if alive(c, proc)]
    return left


@dataclass
class Ended:
    """What `kill_all` did: every carrier it SIGKILLed, and the pids still carrying the id when its rounds ran out."""

    killed: list[Carrier] = field(default_factory=list)
    left: list[int] = field(default_factory=list)


def kill_all(server_id: str, clock: Clock, rounds: int = KILL_ROUNDS, wait_s: float = KILL_WAIT_S,
             proc: str = PROC) -> Ended:
    """SIGKILL every carrier, then scan again, until a scan finds none or `rounds` scans have been made: what a
    carrier forked between a scan and its kill is found by the next."""
    ended = Ended()
    for _ in range(rounds):
        found = find(server_id, proc)
        if not found:
            return ended
        hit = [c for c in found if send(c, server_id, signal.SIGKILL, proc)]
        ended.killed.extend(c for c in hit if c not in ended.killed)
        wait_gone(hit, clock, wait_s, proc)
    ended.left = sorted(c.pid for c in find(server_id, proc) or ())
    return ended
