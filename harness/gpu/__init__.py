"""What a host has to hand out to cells: GPUs through NVML, CPU slots where there is none, or a fake for tests.

`Inventory` is the Protocol the scheduler works against; `open_inventory` picks the one a run gets.
"""

from harness.gpu.idle import IdleBaseline, IdleWait
from harness.gpu.inventory import CpuInventory, GpuPool, Inventory, open_inventory

__all__ = ["CpuInventory", "GpuPool", "IdleBaseline", "IdleWait", "Inventory", "open_inventory"]
