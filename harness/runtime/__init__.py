"""Runtimes: how a cell's server is started (a local process, or a container through docker/podman)."""

from __future__ import annotations

from collections.abc import Callable

from harness.matrix.load import LoadedMatrix
from harness.runtime.base import CellContext, LineSink, Runtime, Server
from harness.runtime.records import ServerStop, Stopped

#: What builds a matrix's runtime: `make_runtime`, or (a test, the docs check) one that hands out a fake; passed as an
#: argument (harness.cli.app.main(runtimes=...), the plugin's `boot_runtime` fixture), never chosen by a hidden switch.
RuntimeFactory = Callable[[LoadedMatrix], Runtime]


def make_runtime(loaded: LoadedMatrix) -> Runtime:
    """The runtime the matrix asks for: a local process, or a container through docker or podman."""
    m = loaded.matrix
    if m.runtime == "process":
        from harness.runtime.process import ProcessRuntime

        return ProcessRuntime(m.command)
    from harness.runtime.container import ContainerRuntime  # imported late: docker-py is only needed for containers

    return ContainerRuntime.for_matrix(loaded)


__all__ = ["CellContext", "LineSink", "Runtime", "RuntimeFactory", "Server", "ServerStop", "Stopped", "make_runtime"]
