"""The inventory Protocol, the CPU inventory, the GPU pool the scheduler reserves disjoint sets from, and the choice
of inventory for a run.

An inventory answers three questions: which GPUs can be handed out (`devices`), what one looks like now (`info`, the
GpuInfo a cell records at its start), and how much of its memory is in use (`used_bytes`, for the idle wait). A CPU
inventory has no devices, only a number of `slots`: how many CPU cells may boot at once.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from harness.errors import UsageError
from harness.gpu.records import GpuInfo

#: How many CPU cells `--parallel auto` boots at once on a host without GPUs (default 1).
CPU_SLOTS_ENV = "BOOT_HARNESS_CPU_SLOTS"


@runtime_checkable
class Inventory(Protocol):
    #: "nvml", "cpu" or "fake": printed, so a run log says where its GPU numbers came from.
    kind: str
    #: How many cells may boot at once when none gets GPUs of its own (CPU cells): the CPU inventory's count, else 1.
    slots: int

    def devices(self) -> list[int]:
        """Indices of the GPUs that may be handed out; [] on a host (or inventory) without GPUs."""

    def info(self, index: int) -> GpuInfo:
        """The GPU as it is now: name, driver, total and free memory, and `id` — what the runtime is told."""

    def used_bytes(self, index: int) -> int | None:
        """Memory in use on the GPU now; None when it cannot be measured (then the idle wait does not wait). Raises
        GpuLost (harness.errors) when the GPU no longer answers."""

    def total_bytes(self, index: int) -> int:
        """The GPU's memory (the memory curve's limit); GpuLost when it no longer answers."""

    def processes(self, index: int) -> dict[int, int]:
        """Host PID → bytes of each compute process on the GPU now (the memory curve tells the server's from a
        neighbour's); GpuLost when it no longer answers."""


class CpuInventory:
    """No GPUs: `slots` CPU cells may boot at once (each gets no GPU assignment)."""

    kind = "cpu"

    def __init__(self, slots: int = 1):
        if slots < 1:
            raise UsageError(f"{CPU_SLOTS_ENV}: must be at least 1, got {slots}")
        self.slots = slots

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CpuInventory:
        raw = (os.environ if env is None else env).get(CPU_SLOTS_ENV, "").strip()
        if not raw:
            return cls(1)
        try:
            return cls(int(raw))
        except ValueError:
            raise UsageError(f"{CPU_SLOTS_ENV}={raw!r}: expected a positive integer") from None

    def devices(self) -> list[int]:
        return []

    def info(self, index: int) -> GpuInfo:
        raise LookupError("a CPU inventory has no GPUs")

    def used_bytes(self, index: int) -> int | None:
        return None

    def total_bytes(self, index: int) -> int:
        raise LookupError("a CPU inventory has no GPUs")

    def processes(self, index: int) -> dict[int, int]:
        raise LookupError("a CPU inventory has no GPUs")


class GpuPool:
    """Disjoint GPU sets for cells running at once: `reserve` blocks until `per_cell` GPUs are free (or `stop` is
    set), `release` gives them back. Lowest indices first, so a lone cell always lands on the same GPUs."""

    def __init__(self, devices: list[int], per_cell: int):
        if per_cell < 1:
            raise ValueError("per_cell must be at least 1")
        if len(devices) < per_cell:
            raise UsageError(f"gpus_per_cell: {per_cell} needs {per_cell} GPUs; this host has {len(devices)}")
        self.per_cell = per_cell
        self._free = sorted(devices)
        self._held: set[int] = set()
        self._cond = threading.Condition()

    def reserve(self, stop: threading.Event | None = None, poll_s: float = 0.2) -> list[int] | None:
        with self._cond:
            while len(self._free) < self.per_cell:
                if stop is not None and stop.is_set():
                    return None
                self._cond.wait(poll_s)
            if stop is not None and stop.is_set():
                return None
            taken, self._free = self._free[: self.per_cell], self._free[self.per_cell:]
            self._held.update(taken)
            return taken

    def release(self, indices: list[int]) -> None:
        with self._cond:
            for i in indices:
                if i not in self._held:
                    raise RuntimeError(f"GPU {i} released but not held")
                self._held.discard(i)
            self._free = sorted(self._free + list(indices))
            self._cond.notify_all()

    @property
    def held(self) -> set[int]:
        with self._cond:
            return set(self._held)


def parse_parallel(spec: str | int | None) -> int | None:
    """`--parallel`: None/"auto" → None (decided by the inventory), else a positive integer."""
    if spec is None:
        return None
    text = str(spec).strip().lower()
    if text == "auto":
        return None
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--parallel {spec!r}: expected auto or a positive integer") from None
    if n < 1:
        raise UsageError(f"--parallel {spec!r}: expected auto or a positive integer")
    return n


def resolve_parallel(spec: str | int | None, inventory: Inventory, gpus_per_cell: int,
                     shares_gpus: bool = False) -> tuple[int, str]:
    """How many cells run at once, and why (one line for the run log).

    With `gpus_per_cell` > 0: `auto` is GPUs // gpus_per_cell; a larger N is cut to that (cells never share a GPU).
    Without it: cells get no GPU of their own, so they are CPU cells — `auto` is the CPU inventory's slots (1 unless
    BOOT_HARNESS_CPU_SLOTS says otherwise) — unless the matrix gives every cell the same GPUs (`gpus:`), where more
    than one at a time would share them: refused.
    """
    wanted = parse_parallel(spec)
    if gpus_per_cell > 0:
        n_gpus = len(inventory.devices())
        fits = n_gpus // gpus_per_cell
        if fits < 1:
            raise UsageError(f"gpus_per_cell: {gpus_per_cell} needs {gpus_per_cell} GPUs; the {inventory.kind} "
                             f"inventory has {n_gpus}")
        if wanted is None:
            return fits, f"auto: {n_gpus} GPUs // {gpus_per_cell} per cell"
        if wanted > fits:
            return fits, (f"{wanted} asked, cut to {fits}: {n_gpus} GPUs // {gpus_per_cell} per cell (GPUs are never "
                          "shared)")
        return wanted, f"{wanted} at {gpus_per_cell} GPU(s) per cell of {n_gpus}"
    if shares_gpus:
        if wanted is not None and wanted > 1:
            raise UsageError(f"--parallel {wanted}: every cell gets the matrix's `gpus`, so cells at once would share "
                             "GPUs; set `gpus_per_cell` to hand each cell its own")
        return 1, "1: every cell gets the matrix's `gpus` (set gpus_per_cell to run cells at once)"
    slots = inventory.slots
    if wanted is None:
        return slots, f"auto: {slots} CPU slot(s) (no GPUs handed out; {CPU_SLOTS_ENV} sets more)"
    return wanted, f"{wanted} CPU cell(s) at once (no GPUs handed out)"


def open_inventory(gpus_per_cell: int, id_kind: str = "index", env: Mapping[str, str] | None = None,
                   shares_gpus: bool = False) -> Inventory:
    """The inventory a run gets: NVML when cells use GPUs — their own (`gpus_per_cell`) or the matrix's shared
    `gpus:` — else CPU slots. A run that uses GPUs cannot go on without NVML: the wait for the last cell's GPU memory
    to be released, the memory-busy retry and each cell's GPU record need it. A test or a benchmark that wants other
    GPUs passes its inventory in (`plan_slots(..., inventory=)`, `RunSession(..., inventory=)`), never by a switch."""
    env = os.environ if env is None else env
    if gpus_per_cell <= 0 and not shares_gpus:
        return CpuInventory.from_env(env)
    from harness.errors import NvmlUnavailable
    from harness.gpu.nvml import NvmlInventory

    try:
        return NvmlInventory.open(id_kind=id_kind, env=env)
    except NvmlUnavailable as exc:
        if gpus_per_cell > 0:
            raise UsageError(f"gpus_per_cell: {gpus_per_cell} hands GPUs to cells, but {exc}") from None
        raise UsageError(f"gpus: the matrix asks for GPUs, but {exc}; the harness needs NVML to wait for a cell's GPU "
                         "memory to be released before the next starts (the driver ships libnvidia-ml)") from None


def shared_indices(gpus: str | int | list[str], inventory: Inventory) -> list[int]:
    """The inventory's GPUs that the matrix's shared `gpus:` request names (`all`, a count, indices or UUIDs): the
    ones to wait on before each cell and to record with it."""
    devices = inventory.devices()
    if gpus == "all":
        return devices
    if isinstance(gpus, int):
        if gpus > len(devices):
            raise UsageError(f"gpus: {gpus} GPUs asked, the {inventory.kind} inventory has {len(devices)}")
        return devices[:gpus]
    out: list[int] = []
    for want in gpus:
        hits = [i for i in devices if str(i) == want or (inventory.info(i).uuid or "").startswith(want)]
        if len(hits) != 1:
            raise UsageError(f"gpus: {want!r} names no single GPU of the {inventory.kind} inventory "
                             f"(indices {', '.join(map(str, devices)) or 'none'})")
        if hits[0] in out:  # an index and its UUID: validate cannot tell, the inventory can
            raise UsageError(f"gpus: {want!r} names GPU {hits[0]}, which {gpus[out.index(hits[0])]!r} already names: "
                             "name each GPU once")
        out.append(hits[0])
    return out
