"""Runtimes: how a cell's server is started (a local process, or a container through docker/podman)."""

from __future__ import annotations

from harness.matrix.load import LoadedMatrix
from harness.runtime.base import CellContext, LineSink, Runtime, Server


#: Test hook: `fake` makes every run boot its cells on the in-process FakeRuntime (all boot): how the docs check runs
#: the commands the docs show, as written, on a machine without the matrix's engine, image or GPU.
RUNTIME_ENV = "BOOT_HARNESS_RUNTIME"


def make_runtime(loaded: LoadedMatrix) -> Runtime:
    import os

    if os.environ.get(RUNTIME_ENV) == "fake":
        from harness.runtime.fake import FakeRuntime

        return FakeRuntime()
    m = loaded.matrix
    if m.runtime == "process":
        from harness.runtime.process import ProcessRuntime

        return ProcessRuntime(m.command)
    from harness.runtime.container import ContainerRuntime  # imported late: docker-py is only needed for containers

    return ContainerRuntime.for_matrix(loaded)


__all__ = ["CellContext", "LineSink", "Runtime", "Server", "make_runtime"]
