"""What the GPU layer reports about a GPU, as a cell's record holds it (harness.results includes it in its schema)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class GpuInfo(BaseModel):
    """A GPU as a cell saw it when it started (NVML); `id` is what the runtime was told (index or UUID)."""

    model_config = ConfigDict(extra="forbid")

    index: int
    id: str | None = None
    uuid: str | None = None
    name: str | None = None
    driver: str | None = None
    total_gib: float | None = None
    free_gib: float | None = None
