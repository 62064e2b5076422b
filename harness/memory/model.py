"""The memory record of one boot (`CellResult.memory`): the curve and what it says, in bytes and seconds since the
cell started (the timeline's clock). docs/memory.md says what each number means and what the sampler cannot see."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

#: The most samples a record keeps; a longer curve is thinned keeping every local peak (harness.memory.curve).
MAX_SAMPLES = 500


class MemorySource(StrEnum):
    """Where the numbers come from."""

    nvml = "nvml"
    container = "container"
    process = "process"


class LimitKind(StrEnum):
    device_total = "device_total"
    container_limit = "container_limit"
    host_total = "host_total"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DeviceMemory(_Record):
    """One GPU of an NVML curve: what the server's own processes held on it, and what everything on it held."""

    index: int
    total_bytes: int
    peak_server_bytes: int = Field(description="the most the server's own processes held on this GPU at one sample")
    peak_used_bytes: int = Field(description="the most NVML counted in use on this GPU at one sample (everyone's)")
    peak_others_bytes: int = Field(0, description="the most held by processes not the server's (a neighbour)")
    headroom_bytes: int | None = Field(None, description="total × gpu_memory_utilization − peak_server_bytes")


class LoggedMemory(_Record):
    """A size vLLM logged, held against the step the curve took in the phase that allocates it."""

    what: str = Field(description="weights | kv_cache | cuda_graphs (measured by vLLM: the pool's actual size, else "
                                  "\"Graph capturing finished … took X GiB\") | cuda_graphs_estimate (vLLM's estimate "
                                  "before profiling)")
    logged_bytes: int
    phase: str = Field(description="the phase whose step is compared (the timeline's name)")
    measured_bytes: int | None = Field(None, description="how much the curve rose across that phase (its peak within "
                                                         "the phase less the level before it; for the graphs, less the "
                                                         "logged KV size allocated in the same phase); null without "
                                                         "samples")


class MemoryCurve(_Record):
    source: MemorySource
    interval_s: float = Field(description="the sampling interval asked for (`memory_interval_s`)")
    limit_bytes: int | None = Field(None, description="the device's total (summed over the cell's GPUs), the "
                                                      "container's limit, or the host's total")
    limit_kind: LimitKind | None = None
    peak_bytes: int | None = Field(None, description="the server's largest sample")
    peak_at_s: float | None = None
    peak_phase: str | None = Field(None, description="the timeline phase in flight at the peak")
    by_phase: dict[str, int] = Field({}, description="the largest sample within each phase, in boot order")
    headroom_bytes: int | None = Field(None, description="GPU: the least, over the cell's GPUs, of total × "
                                                         "gpu_memory_utilization − the server's peak on it; CPU: "
                                                         "limit_bytes − peak_bytes")
    gpu_memory_utilization: float | None = Field(None, description="the value headroom used (the cell's flag, or "
                                                                   "vLLM's default 0.9); GPU only")
    devices: list[DeviceMemory] = []
    logged: list[LoggedMemory] = Field([], description="what vLLM logged (weights, KV cache, CUDA graphs) beside the "
                                                       "step the curve took for it")
    taken: int = Field(0, description="samples taken; `samples` keeps at most 500 of them, every local peak kept")
    samples: list[tuple[float, int]] = Field([], description="[seconds since the cell started, bytes] pairs")
    stopped: str | None = Field(None, description="why the curve stops before the verdict (a sampler that failed); "
                                                  "null when it ran to the end")

    def describe(self) -> str:
        """`peak 1.52 GiB at 31.0 s (warm-up), headroom 12.4 GiB`."""
        from harness.units import fmt_bytes, fmt_seconds

        if self.peak_bytes is None:
            return "no memory samples" + (f" ({self.stopped})" if self.stopped else "")
        text = f"peak {fmt_bytes(self.peak_bytes)} at {fmt_seconds(self.peak_at_s)}"
        if self.peak_phase:
            text += f" ({self.peak_phase})"
        if self.headroom_bytes is not None:
            text += f", headroom {fmt_bytes(self.headroom_bytes)}"
        return text
