"""Runtimes: how a cell's server is started (a local process, or a container through docker/podman)."""

from __future__ import annotations

from harness.matrix.load import LoadedMatrix
from harness.runtime.base import CellContext, LineSink, Runtime, Server


def make_runtime(loaded: LoadedMatrix) -> Runtime:
    m = loaded.matrix
    if m.runtime == "process":
        from harness.runtime.process import ProcessRuntime

        return ProcessRuntime(m.command)
    from harness.runtime.container import ContainerRuntime  # imported late: docker-py is only needed for containers

    return ContainerRuntime.for_matrix(loaded)


__all__ = ["CellContext", "LineSink", "Runtime", "Server", "make_runtime"]
