"""GPUs through NVML (`nvidia-ml-py`, imported as `pynvml`): which ones, what they are, how much memory is in use.

NVML numbers GPUs in PCI bus order and ignores CUDA_VISIBLE_DEVICES; CUDA numbers them fastest-first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID. So the id a process-runtime cell is told is the GPU's UUID (`id_kind="uuid"`), which
CUDA_VISIBLE_DEVICES takes and which means one GPU whatever the order; container runtimes are told the NVML index
(`id_kind="index"`), which is what the NVIDIA container toolkit and the default CDI spec name devices by. If the
harness itself runs with CUDA_VISIBLE_DEVICES set (a CI runner given some of a host's GPUs), only those are handed out.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from harness.errors import GpuLost, NvmlUnavailable
from harness.gpu.records import GpuInfo
from harness.units import GIB


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlInventory:
    kind = "nvml"
    slots = 1

    def __init__(self, nvml: Any, indices: list[int], id_kind: str = "index"):
        if id_kind not in ("index", "uuid"):
            raise ValueError("id_kind is 'index' or 'uuid'")
        self._nvml = nvml
        self._indices = indices
        self.id_kind = id_kind
        self._lock = threading.Lock()
        self._handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in indices}
        self.driver = _text(nvml.nvmlSystemGetDriverVersion())
        self._static = {i: (_text(nvml.nvmlDeviceGetName(h)), _text(nvml.nvmlDeviceGetUUID(h)))
                        for i, h in self._handles.items()}

    @classmethod
    def open(cls, id_kind: str = "index", env: Mapping[str, str] | None = None, nvml: Any = None) -> NvmlInventory:
        if nvml is None:
            try:
                import pynvml  # nvidia-ml-py
            except ImportError:
                raise NvmlUnavailable("pynvml is not installed (pip install nvidia-ml-py)") from None
            nvml = pynvml
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:  # noqa: BLE001 - pynvml.NVMLError and friends: no driver, no library
            raise NvmlUnavailable(f"NVML does not answer ({exc})") from None
        if count == 0:
            raise NvmlUnavailable("NVML sees no GPU")
        indices = list(range(count))
        env = os.environ if env is None else env
        visible = env.get("CUDA_VISIBLE_DEVICES")
        if visible is not None:
            uuids = {_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))): i for i in indices}
            indices = visible_indices(visible, count, uuids)
            if not indices:
                raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES={visible!r} leaves no GPU")
        return cls(nvml, indices, id_kind=id_kind)

    def devices(self) -> list[int]:
        return list(self._indices)

    def _memory(self, index: int) -> Any:
        with self._lock:
            try:
                return self._nvml.nvmlDeviceGetMemoryInfo(self._handles[index])
            except Exception as exc:  # noqa: BLE001 - NVMLError_GpuIsLost, _Unknown, ...: the device no longer answers
                raise GpuLost(index, f"GPU {index} ({self._static[index][1]}) is lost: NVML says {exc}") from None

    def info(self, index: int) -> GpuInfo:
        mem = self._memory(index)
        name, uuid = self._static[index]
        return GpuInfo(index=index, id=uuid if self.id_kind == "uuid" else str(index), uuid=uuid, name=name,
                       driver=self.driver, total_gib=round(mem.total / GIB, 3), free_gib=round(mem.free / GIB, 3))

    def used_bytes(self, index: int) -> int | None:
        return int(self._memory(index).used)

    def total_bytes(self, index: int) -> int:
        return int(self._memory(index).total)

    def processes(self, index: int) -> dict[int, int]:
        """NVML's compute processes on the GPU: host PIDs, and their memory (0 where the driver does not say: in some
        containers and on MIG, usedGpuMemory is None)."""
        with self._lock:
            try:
                found = self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handles[index])
            except Exception as exc:  # noqa: BLE001 - as _memory: a device that no longer answers
                raise GpuLost(index, f"GPU {index} ({self._static[index][1]}) is lost: NVML says {exc}") from None
        return {int(p.pid): int(p.usedGpuMemory or 0) for p in found}


def visible_indices(visible: str, count: int, uuids: Mapping[str, int]) -> list[int]:
    """NVML indices named by a CUDA_VISIBLE_DEVICES value: indices, or (prefixes of) `GPU-` UUIDs. CUDA stops at the
    first entry it cannot resolve, and so does this. MIG instances are not handed out: whole GPUs only."""
    from harness.errors import UsageError

    out: list[int] = []
    for raw in (v.strip() for v in visible.split(",")):
        if not raw:
            break
        if raw.startswith("MIG-"):
            raise UsageError(f"CUDA_VISIBLE_DEVICES names a MIG instance ({raw}); the harness hands out whole GPUs")
        if raw.lstrip("-").isdigit():
            i = int(raw)
            if not 0 <= i < count:
                break
        else:
            hits = [i for u, i in uuids.items() if u.startswith(raw)]
            if len(hits) != 1:
                break
            i = hits[0]
        if i not in out:
            out.append(i)
    return out
