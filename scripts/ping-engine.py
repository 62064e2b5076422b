#!/usr/bin/env python3
"""Exit 0 when the Docker-compatible API on the unix socket SOCK answers `GET /_ping` with 200 (dockerd or
`podman system service`). Only the standard library: the docker client and curl may be missing on a fresh machine."""

import socket
import sys


def ping(path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(path)
        s.sendall(b"GET /_ping HTTP/1.0\r\nHost: engine\r\n\r\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
    except OSError:
        return False
    finally:
        s.close()
    status = data.split(b"\r\n", 1)[0].split()
    return len(status) >= 2 and status[1] == b"200"


if __name__ == "__main__":
    sys.exit(0 if ping(sys.argv[1]) else 1)
