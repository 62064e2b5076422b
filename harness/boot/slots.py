"""How many cells boot at once, on which GPUs: `--parallel` and the matrix's GPU request, decided before anything runs
(bad input or a GPU matrix without NVML is exit 2 before a run directory exists). Every plan is run by the one
Executor; one CPU slot is the sequential run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.boot.attempt import CellRunner, Observer
from harness.boot.executor import Executor
from harness.gpu.idle import DEFAULT_TIMEOUT_S, IdleBaseline
from harness.gpu.inventory import (
    CpuInventory,
    Inventory,
    open_inventory,
    parse_parallel,
    resolve_parallel,
    shared_indices,
)
from harness.matrix.model import Matrix


@dataclass
class SlotPlan:
    parallel: int
    why: str
    inventory: Inventory
    gpus_per_cell: int = 0
    #: The GPUs of the matrix's shared `gpus:` request (each cell, one at a time, waits for them to be idle).
    shared_gpus: list[int] | None = None
    idle_timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def uses_gpus(self) -> bool:
        return self.gpus_per_cell > 0 or bool(self.shared_gpus)

    def describe(self) -> str:
        gpus = ", ".join(map(str, self.shared_gpus or []))
        shared = f"; every cell waits for GPUs {gpus} to be idle" if self.shared_gpus else ""
        return f"parallel: {self.parallel} ({self.why}; {self.inventory.kind} inventory{shared})"

    def executor(self, runner: CellRunner, observer: Observer | None = None) -> Executor:
        idle = IdleBaseline(self.inventory, timeout_s=self.idle_timeout_s, clock=runner.clock) if self.uses_gpus \
            else None
        return Executor(runner, self.inventory, self.parallel, self.gpus_per_cell, observer=observer, idle=idle,
                        shared_gpus=self.shared_gpus)


def plan_slots(matrix: Matrix, parallel: str | int = "1", idle_timeout_s: float | None = None,
               env: Mapping[str, str] | None = None, inventory: Inventory | None = None) -> SlotPlan:
    """A matrix that asks for GPUs always gets NVML (or the inventory a test gives), one cell at a time included, so
    that every cell waits for the last one's GPU memory and a memory-busy refusal is retried."""
    timeout = DEFAULT_TIMEOUT_S if idle_timeout_s is None else idle_timeout_s
    wanted = parse_parallel(parallel)
    shares = matrix.gpus is not None and matrix.gpus_per_cell == 0
    if wanted == 1 and matrix.gpus_per_cell == 0 and not shares:
        return SlotPlan(1, "one cell at a time", CpuInventory(1), idle_timeout_s=timeout)
    if inventory is None:
        inventory = open_inventory(matrix.gpus_per_cell, id_kind="uuid" if matrix.runtime == "process" else "index",
                                   env=env, shares_gpus=shares)
    n, why = resolve_parallel(parallel, inventory, matrix.gpus_per_cell, shares_gpus=matrix.gpus is not None)
    shared = shared_indices(matrix.gpus, inventory) if shares and matrix.gpus is not None else None
    return SlotPlan(n, why, inventory, matrix.gpus_per_cell, shared or None, timeout)
