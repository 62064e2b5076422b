"""A stand-in for NVML (`pynvml`, from nvidia-ml-py) on a machine without a GPU: put this folder first on PYTHONPATH
and the harness's NvmlInventory loads it through its ordinary `import pynvml`.

It models what matters between cells on a real GPU: memory is in use while one of *this* harness's servers runs and
for a few seconds after it is gone (a real driver takes that long to give a dead process's memory back), then falls
back to the idle level. A server is a container carrying this process's `boot-harness.owner-pid` and a
`boot-harness.cell` label (the GPU probe container has no cell label: it allocates nothing), or a child process of
this one whose command line names vllm. A daemon thread started by nvmlInit polls for them every POLL_S.

Environment (all optional):
  STANDIN_NVML_GPUS      how many GPUs (default 1)
  STANDIN_NVML_TOTAL_GIB total memory per GPU (default 139.8, an H200)
  STANDIN_NVML_IDLE_GIB  used when idle (default 0.5)
  STANDIN_NVML_BUSY_GIB  used while a server runs (default 120)
  STANDIN_NVML_CURVE     the server's memory as it boots, "SECONDS:GIB,..." since its oldest process started (steps;
                         default "0:BUSY_GIB-IDLE_GIB": the device then shows BUSY_GIB): what the server's own
                         process holds (nvmlDeviceGetComputeRunningProcesses names its lowest host PID, a container's
                         through the engine's State.Pid), held after it exits
  STANDIN_NVML_NEIGHBOUR_GIB  a process that is not the harness's (PID 1 here) holding this much on every GPU
                         (default 0)
  STANDIN_NVML_HOLD_S    how long memory stays used after the last server went (default 4)
  STANDIN_NVML_LOG       a file that gets one line per memory read: "<unix time> <used bytes>"
  STANDIN_NVML_NODE      a number in the GPUs' UUIDs (default 0): runs that share it share the GPUs (the harness
                         holds a GPU host-wide by UUID while a cell runs on it), others have GPUs of their own
  STANDIN_NVML_LOST_FILE once this file exists, every GPU is lost: memory reads raise NVMLError("GPU is lost"), as
                         pynvml's NVMLError_GpuIsLost says it (a board off the bus, a driver gone)
"""

from __future__ import annotations

import os
import threading
import time
from collections import namedtuple
from pathlib import Path

GIB = 1024**3
POLL_S = 0.2
Memory = namedtuple("Memory", "total free used")


class NVMLError(Exception):
    pass


def _env(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def _curve() -> list[tuple[float, float]]:
    raw = os.environ.get("STANDIN_NVML_CURVE", "")
    if not raw.strip():
        return [(0.0, _env("STANDIN_NVML_BUSY_GIB", 120) - _env("STANDIN_NVML_IDLE_GIB", 0.5))]
    return sorted((float(t), float(g)) for t, g in (step.split(":") for step in raw.split(",") if step.strip()))


class _Device:
    def __init__(self) -> None:
        self.busy_until = 0.0
        self.lock = threading.Lock()
        self.started = False
        #: The server's host PIDs at the last poll, when its oldest process started (boot clock), what it held last.
        self.pids: set[int] = set()
        self.since: float | None = None
        self.held_gib = 0.0

    def start(self) -> None:
        with self.lock:
            if self.started:
                return
            self.started = True
        threading.Thread(target=self._watch, name="standin-nvml", daemon=True).start()

    def _watch(self) -> None:
        hold = _env("STANDIN_NVML_HOLD_S", 4)
        while True:
            pids = _server_pids()
            with self.lock:
                self.pids = pids
                if pids:
                    self.busy_until = time.time() + hold
                    self.since = _started_at(pids)
                else:
                    self.since = None
            time.sleep(POLL_S)

    def server_gib(self) -> float:
        """What the server holds now by the scripted curve; after it exited, what it held last (for HOLD_S)."""
        with self.lock:
            if self.since is not None:
                at = _boot_clock() - self.since
                self.held_gib = max((g for t, g in _curve() if t <= at), default=0.0)
            return self.held_gib if time.time() < self.busy_until else 0.0

    def server_pids(self) -> set[int]:
        with self.lock:
            return set(self.pids)

    def used(self) -> int:
        gib = self.server_gib()
        used = int((_env("STANDIN_NVML_IDLE_GIB", 0.5) + gib + _env("STANDIN_NVML_NEIGHBOUR_GIB", 0)) * GIB)
        log = os.environ.get("STANDIN_NVML_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{time.time():.3f} {used}\n")
        return used


_DEVICE = _Device()
_client = None


def _boot_clock() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _started_at(pids: set[int]) -> float:
    """When the oldest of `pids` started, on the boot clock: the curve counts from the server's own start, not from
    when a poll first saw it (a slow engine API under load would shift the whole curve late)."""
    ticks = os.sysconf("SC_CLK_TCK")
    starts = []
    for pid in pids:
        try:
            starts.append(int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]) / ticks)
        except (OSError, IndexError, ValueError):
            pass
    return min(starts, default=_boot_clock())


def _container_pids() -> set[int]:
    """The host PIDs of this harness's cell containers (their init, as the engine names it, and its tree)."""
    global _client
    try:
        import docker

        if _client is None:
            _client = docker.from_env()
        # ignore_removed: a container removed between the listing and its inspection (the last cell's, going) is
        # not an error that would hide the running one for a poll
        found = _client.containers.list(filters={"label": [f"boot-harness.owner-pid={os.getpid()}",
                                                          "boot-harness.cell"]}, ignore_removed=True)
        inits = [int((c.attrs.get("State") or {}).get("Pid") or 0) for c in found]
    except Exception:  # noqa: BLE001 - no engine here: no containers
        return set()
    return _tree([p for p in inits if p > 0])


def _tree(roots: list[int]) -> set[int]:
    todo, seen = list(roots), set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += _children(pid)
    return seen


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            out += [int(c) for c in task.read_text().split()]
        except OSError:
            pass
    return out


def _process_pids() -> set[int]:
    """This harness's local servers: a child (at any depth) whose command line names vllm, and its tree."""
    todo, seen, found = _children(os.getpid()), set(), []
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            if b"vllm" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
                continue
        except OSError:
            continue
        todo += _children(pid)
    return _tree(found)


def _server_pids() -> set[int]:
    return _process_pids() | _container_pids()


# ---- the part of the NVML API the harness calls
def nvmlInit() -> None:
    _DEVICE.start()


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return int(_env("STANDIN_NVML_GPUS", 1))


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if not 0 <= index < nvmlDeviceGetCount():
        raise NVMLError(f"invalid index {index}")
    return index


def nvmlSystemGetDriverVersion() -> str:
    return "stand-in"


def nvmlDeviceGetName(handle: int) -> str:
    return "NVIDIA H200 (stand-in NVML)"


def nvmlDeviceGetUUID(handle: int) -> str:
    node = int(_env("STANDIN_NVML_NODE", 0))
    return f"GPU-5ea1d1e0-0000-4000-8000-{node % 2**32:08x}{handle:04x}"


Process = namedtuple("Process", "pid usedGpuMemory gpuInstanceId computeInstanceId")


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[Process]:
    """The server's memory on its lowest host PID, and the neighbour's on PID 1, as NVML lists compute processes."""
    lost = os.environ.get("STANDIN_NVML_LOST_FILE")
    if lost and os.path.exists(lost):
        raise NVMLError("GPU is lost")
    out = []
    pids = _DEVICE.server_pids()
    if pids:
        out.append(Process(min(pids), int(_DEVICE.server_gib() * GIB), None, None))
    neighbour = _env("STANDIN_NVML_NEIGHBOUR_GIB", 0)
    if neighbour > 0:
        out.append(Process(1, int(neighbour * GIB), None, None))
    return out


def nvmlDeviceGetMemoryInfo(handle: int) -> Memory:
    lost = os.environ.get("STANDIN_NVML_LOST_FILE")
    if lost and os.path.exists(lost):
        raise NVMLError("GPU is lost")
    total = int(_env("STANDIN_NVML_TOTAL_GIB", 139.8) * GIB)
    used = _DEVICE.used()
    return Memory(total=total, free=total - used, used=used)
