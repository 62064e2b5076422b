"""Ports: pick a free one, and tell whether the socket listening on it belongs to our server.

A stale server left on a port answers /health 200 as happily as ours would; only the kernel knows whose socket it is.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

#: Where every server the harness starts listens, and where it is asked: loopback only.
HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_answers(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def listener_pids(port: int) -> set[int] | None:
    """PIDs holding a LISTEN socket on `port`, or None where /proc cannot tell (not Linux)."""
    if not Path("/proc/net/tcp").exists():
        return None
    inodes = _listening_inodes(port)
    if not inodes:
        return set()
    wanted = {f"socket:[{i}]" for i in inodes}
    pids: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            for fd in os.scandir(f"/proc/{entry.name}/fd"):
                try:
                    if os.readlink(fd.path) in wanted:
                        pids.add(int(entry.name))
                        break
                except OSError:
                    continue
        except OSError:
            continue
    return pids


def pid_in_group(pid: int, pgid: int) -> bool:
    try:
        return os.getpgid(pid) == pgid
    except OSError:
        return False
