"""Where the server runs, as far as the KV cache cares: a GPU, or a CPU whose features change vLLM's choices
(vllm/platforms/cpu.py): AMX keeps MLA's 128-token block (AMX_MLA kernel), AVX-512 BF16 resets the SSM state of hybrid
models to float32. `cpu-local` reads this machine's CPU (/proc/cpuinfo), for a run that boots here."""

from __future__ import annotations

from pathlib import Path

PLATFORMS = ("gpu", "cpu", "cpu-bf16", "cpu-amx", "cpu-local")
HELP = ("gpu; cpu: the CPU backend (128-token blocks, 16 for MLA, no async scheduling); cpu-bf16: a CPU with AVX-512 "
        "BF16 (hybrid models' SSM state in float32); cpu-amx: one with AMX too (MLA keeps 128-token blocks); "
        "cpu-local: this machine's CPU")


def is_cpu(platform: str) -> bool:
    return platform.startswith("cpu")


def local_cpu(cpuinfo: str | None = None) -> str:
    """This machine's CPU flavour from its feature flags (x86 Linux); plain `cpu` when they cannot be read."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            return "cpu"
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            break
    if "amx_tile" in flags:
        return "cpu-amx"
    return "cpu-bf16" if "avx512_bf16" in flags else "cpu"


def resolve(platform: str) -> str:
    return local_cpu() if platform == "cpu-local" else platform
