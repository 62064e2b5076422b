"""Causes of kind resource: memory ran out, GPU or host. The configuration does not fit this hardware: refused, with
the phase it ran out in (the traceback's frames or the log's phase tell it; match.py/decide.py), and what it tried.
"""

from __future__ import annotations

import re

from .model import WEAK, Also, Cause, CauseKind, Numbers, Pattern, read_groups
from .shapes import EXC, NUM, UNIT_GIB, named

K = CauseKind.resource
_TRIED = re.compile(r"Tried to allocate\s*" + NUM + r"\s*(B|KiB|MiB|GiB|TiB)")
_FREE = re.compile(r"of which\s*" + NUM + r"\s*(B|KiB|MiB|GiB|TiB) is free")
_TOTAL = re.compile(r"total capacity of\s*" + NUM + r"\s*(B|KiB|MiB|GiB|TiB)")
_REQUESTED = re.compile(r"is less than [^()]{0,120}\((?:[^,()]{0,40},\s*)?" + NUM + r"(?:\s*/\s*" + NUM + r")?\s*GiB\)")


def _allocation(message: str, m: re.Match[str]) -> Numbers:
    """torch's "Tried to allocate X MiB. GPU 0 has a total capacity of T GiB of which F MiB is free", in GiB."""
    out = read_groups(message, m)
    for key, rx in (("needed_gib", _TRIED), ("available_gib", _FREE), ("total_gib", _TOTAL)):
        if found := rx.search(message):
            out[key] = float(found.group(1)) * UNIT_GIB[found.group(2)]
    return out


def _busy(message: str, m: re.Match[str]) -> Numbers:
    out = read_groups(message, m)
    if req := _REQUESTED.search(message, max(0, m.end() - len("is less than"))):
        out["needed_gib"] = float(req.group(1))
    return out


def _short(numbers: Numbers) -> Numbers:
    """The memory short: what was asked less what was free (GiB, two decimals), when both were read."""
    need, free = numbers.get("needed_gib"), numbers.get("available_gib")
    if isinstance(need, float) and isinstance(free, float) and need > free:
        return {"short_gib": round(need - free, 2)}
    return {}


def _host_gib(numbers: Numbers) -> Numbers:
    """The bytes a failed CPU allocation asked for, in GiB (how vLLM and this harness state memory)."""
    asked = numbers.get("needed_bytes")
    return {"needed_gib": round(asked / (1 << 30), 2)} if isinstance(asked, int) else {}


GPU_MEM_UTIL_EXCEEDS_FREE = Cause(
    "gpu_mem_util_exceeds_free", K,
    "free memory at start-up was below what gpu_memory_utilization asks, usually held by another process (\"Free "
    "memory on device ... is less than desired\", \"Error in memory profiling\")",
    (Pattern("memory on device",
             EXC + r"Free memory on device(?: [^\s(]{1,40})?\s*\(\s*" + named("available_gib", NUM) + r"\s*/\s*"
             + named("total_gib", NUM) + r"\s*GiB\)(?: on startup)? is less than", read=_busy),
     Pattern("memory on node",
             EXC + r"Available memory on node\s*\d+\s*\(\s*" + named("available_gib", NUM) + r"\s*/\s*"
             + named("total_gib", NUM) + r"\s*GiB\) on (?:startup|kv cache allocation) is less than", read=_busy),
     Pattern("Error in memory profiling",
             EXC + r"Error in memory profiling\.\s*Initial free memory\s*" + named("available_gib", NUM)
             + r"\s*GiB,\s*current free memory\s*" + named("current_free_gib", NUM) + r"\s*GiB")),
    ("free memory {available_gib} GiB is {short_gib} GiB below the {needed_gib} GiB asked: lower "
     "gpu_memory_utilization or free the GPU",
     "free memory {available_gib} GiB is below the {needed_gib} GiB asked: lower gpu_memory_utilization or free the "
     "GPU",
     "free memory {available_gib} GiB is below what gpu_memory_utilization asks: lower it or free the GPU",
     "another process's memory use changed while vLLM profiled: run alone on the GPU"),
    numbers=("available_gib", "total_gib", "needed_gib", "current_free_gib", "short_gib", "device",
             "gpu_memory_utilization"),
    also=(Also("device", r"Free memory on device (?!\()([^\s(]{1,40})"),
          Also("gpu_memory_utilization", r"(?:desired GPU memory utilization|gpu_memory_utilization)\s*\(\s*"
               r"(\d{1,3}(?:\.\d{1,6})?)\s*[,)]", float)),
    aliases=("gpu_memory_busy",),
    stops=True, derive=_short,
    examples=("ValueError: Free memory on device (10.5/79.1 GiB) on startup is less than desired GPU memory "
              "utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
              "processes.",))

_OOM_NUMBERS = ("needed_gib", "available_gib", "total_gib", "short_gib", "device", "in_use_gib")
#: torch's allocator message names the GPU and what a process holds: "GPU 0 has a total capacity of 93.09 GiB of
#: which 739.81 MiB is free. Including non-PyTorch memory, this process has 92.34 GiB memory in use." (2.1+), or
#: "Process 3270336 has 78.96 GiB memory in use." (2.2+, one per process on the GPU: the first is read)
_OOM_ALSO = (Also("device", r"\bGPU (\d{1,3}) has a total capacity"),
             Also("in_use_gib", r"[Pp]rocess (?:\d{1,10} )?has (\d{1,9}(?:\.\d{1,6})?) GiB memory in use", float))
_OOM_HINTS = ("{phase}: tried {needed_gib:.2f} GiB with {available_gib:.2f} GiB free ({short_gib:.2f} GiB short)",
              "{phase}: tried {needed_gib:.2f} GiB with {available_gib:.2f} GiB free",
              "{phase}: tried {needed_gib:.2f} GiB",)
_TORCH_OOM = (r"\A(?:[A-Za-z_][\w.]{0,60}\.)?OutOfMemoryError\b"
              r"|" + EXC + r"(?:CUDA|HIP|XPU|NPU|MPS)(?: driver)?(?: error:)? out of memory\b")


def _oom(cause_id: str, phase: str, meaning: str, patterns: tuple[Pattern, ...] = (), aliases: tuple[str, ...] = (),
         examples: tuple[str, ...] = (), also: tuple[Also, ...] = ()) -> Cause:
    extra = tuple(a.name for a in also)
    hints = tuple(h.replace("{phase}", phase) for h in _OOM_HINTS) + (phase,)
    return Cause(cause_id, K, meaning, patterns, hints, numbers=_OOM_NUMBERS + extra, aliases=aliases, stops=True,
                 derive=_short, examples=examples, also=_OOM_ALSO + also)


CUDA_OOM_WEIGHTS = _oom(
    "cuda_oom_weights", "the weights do not fit in GPU memory: more GPUs, a quantized checkpoint, or a smaller model",
    "the weights do not fit (\"Failed to load model - not enough GPU memory\", or CUDA out of memory while loading)",
    (Pattern("Failed to load model", EXC + r"Failed to load model - not enough GPU memory", read=_allocation),
     # a layer creating its weights says so itself, logged before its traceback (0.11+: "Failed to create unquantized
     # linear weights: CUDA out of memory. ..."): no frame or phase is needed to place it
     Pattern("weights: CUDA out of memory", r"Failed to create [\w ]{1,60}weights: CUDA out of memory",
             read=_allocation)),
    aliases=("weights_dont_fit",),
    examples=("ValueError: Failed to load model - not enough GPU memory. Tried to allocate 2.00 GiB ... (original "
              "error: CUDA out of memory. Tried to allocate 2.00 GiB.)",
              "Failed to create unquantized linear weights: CUDA out of memory. Tried to allocate 896.00 MiB. GPU 0 "
              "has a total capacity of 93.09 GiB of which 739.81 MiB is free."))
CUDA_OOM_PROFILING = _oom(
    "cuda_oom_profiling", "out of GPU memory in the profiling run: lower max_num_batched_tokens or max_num_seqs",
    "CUDA out of memory in the profiling run (the dummy forward pass at max_num_batched_tokens)")
CUDA_OOM_KV_ALLOCATION = _oom(
    "cuda_oom_kv_allocation", "out of GPU memory allocating the KV cache: lower gpu_memory_utilization",
    "CUDA out of memory allocating the KV cache (the memory vLLM measured was gone by then)")
CUDA_OOM_GRAPH_CAPTURE = _oom(
    "cuda_oom_graph_capture", "out of GPU memory capturing CUDA graphs: --enforce-eager, fewer capture sizes, or "
    "lower gpu_memory_utilization",
    "CUDA out of memory capturing CUDA graphs (after the KV cache took its share)")
CUDA_OOM_SAMPLER_WARMUP = _oom(
    "cuda_oom_sampler_warmup", "out of GPU memory warming up the sampler: lower max_num_seqs or gpu_memory_utilization",
    "CUDA out of memory warming up the sampler with max_num_seqs dummy requests",
    (Pattern("when warming up sampler", read=_allocation),),
    also=(Also("dummy_requests", r"warming up sampler with (\d{1,9})(?: dummy requests|\s*\Z)", int),),
    examples=("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
              "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.",))
CUDA_OOM_UNKNOWN = _oom(
    "cuda_oom_unknown", "out of GPU memory (the phase is not in the log)",
    "an allocation ran out of accelerator memory where the log does not show the phase (torch OutOfMemoryError for "
    "CUDA, HIP, XPU or NPU, \"CUDA error: out of memory\", a TPU's XLA RESOURCE_EXHAUSTED)",
    (Pattern("OutOfMemoryError", _TORCH_OOM, read=_allocation),
     Pattern("ut of memory", _TORCH_OOM, read=_allocation),
     Pattern("CUBLAS_STATUS_ALLOC_FAILED", read=_allocation),
     # a wrapper's own words before torch's ("Failed to create unquantized linear weights: CUDA out of memory. ...")
     Pattern("ut of memory", r"\bCUDA out of memory\. Tried to allocate", read=_allocation),
     # a TPU's XLA: the program (compile time) or the buffers (load time) do not fit the chip's memory
     Pattern("Ran out of memory in memory space", r"Ran out of memory in memory space (?P<memory_space>\w{1,20})"),
     Pattern("RESOURCE_EXHAUSTED", r"RESOURCE_EXHAUSTED: .{0,200}?Attempting to reserve " + named("needed_gib", NUM)
             + r"G\b")),
    aliases=("oom",), also=(Also("memory_space", r"memory space (\w{1,20})"),),
    examples=("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of "
              "23.54 GiB of which 1.02 GiB is free.",
              "RuntimeError: CUDA error: out of memory",
              "RuntimeError: CUDA driver error: out of memory",
              "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
              "memory in memory space hbm. Used 21.95G of 15.48G hbm. Exceeded hbm capacity by 6.47G.",
              "RESOURCE_EXHAUSTED: Error loading program 'jit__multi_slice': Attempting to reserve 6.14G at the bottom "
              "of memory. That was not possible."))

HOST_OOM = Cause(
    "host_oom", K,
    "host memory ran out (the kernel's OOM killer, a failed CPU allocation, Ray's memory monitor; a Ray worker killed "
    "without a word, most often by the OOM killer)",
    (Pattern("can't allocate memory", r"DefaultCPUAllocator: can't allocate memory(?:: you tried to allocate "
             r"(?P<needed_bytes>\d{1,20}) bytes)?"),
     Pattern("Cannot allocate memory", r"\[Errno 12\] Cannot allocate memory"),
     Pattern("node running low on memory"),
     Pattern("Killed", r"\A(?:Killed|.{0,200}\bline \d+:\s+\d+ Killed\b.*)\Z"),
     Pattern("Out of memory: Killed process"),
     Pattern("MemoryError", r"\AMemoryError\b"),
     # Ray's obituary of a worker that vanished (SIGKILL: the kernel's OOM killer first among the causes it lists),
     # logged as a WARNING: weak, any specific cause in the log wins
     Pattern("Worker unexpectedly exits with a connection error code 2", rank=WEAK, any_level=True)),
    ("host memory ran out allocating {needed_gib:.2f} GiB: give the server more RAM (or a smaller swap/CPU KV space)",
     "host memory ran out: give the server more RAM (or a smaller swap/CPU KV space)"),
    numbers=("needed_bytes", "needed_gib"), derive=_host_gib,
    examples=("RuntimeError: [enforce fail at alloc_cpu.cpp:114] data. DefaultCPUAllocator: can't allocate memory: "
              "you tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)",
              "Killed",
              "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."))

#: Most specific first: the weights' and the sampler's own wordings carry torch's words too, and Ray's memory monitor
#: raises an OutOfMemoryError of its own.
CAUSES: tuple[Cause, ...] = (GPU_MEM_UTIL_EXCEEDS_FREE, HOST_OOM, CUDA_OOM_WEIGHTS, CUDA_OOM_SAMPLER_WARMUP,
                             CUDA_OOM_PROFILING, CUDA_OOM_KV_ALLOCATION, CUDA_OOM_GRAPH_CAPTURE, CUDA_OOM_UNKNOWN)
#: The OOM causes a traceback's frames (or the log's phase) refine cuda_oom_unknown into.
OOM_PHASES = (CUDA_OOM_WEIGHTS, CUDA_OOM_PROFILING, CUDA_OOM_KV_ALLOCATION, CUDA_OOM_GRAPH_CAPTURE,
              CUDA_OOM_SAMPLER_WARMUP)
