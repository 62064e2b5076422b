"""The message shapes vLLM 0.8.5 … 0.33 (GPU and CPU builds, and the fork) log at boot, one compiled regex per fact.

Each pattern is written against the released format strings, tolerant of every version's variant (``%.2f`` vs
``round(x, 2)``, ``{y:.2f}GiB`` with no space, commas in token counts, "models's" vs "model's"), and anchored on the
whole message shape so a line that merely mentions a keyword (advice, an argument dump) never matches.

``KEYWORDS``: a line containing none of them cannot match any pattern here; the parser's pre-check (precheck.py)
rejects it before any regex runs.
"""

from __future__ import annotations

import re

from harness.verdict.causes.shapes import INT, NUM, UNIT_GIB, to_float, to_int  # noqa: F401 - read as p.X

# What may precede a refusal's text on its line: an exception's class ("ValueError: ", "torch.OutOfMemoryError: ")
# or pydantic's "Value error, ". Anchoring refusals here keeps source-code lines in tracebacks from matching.
EXC = r"\A(?:[A-Za-z_][\w.]{0,100}(?:Error|Exception|Exit)\s*:\s*|Value error,\s*)?"

KEYWORDS: tuple[str, ...] = (
    "version",
    CPU_WORKER_FILE := "cpu_worker.py",  # the CPU backend's worker names itself in every header it logs
    "KV cache",
    "KV Cache",
    "Model loading took",
    "Loading model weights took",  # V0 (0.6-0.7)
    "Memory profiling results",  # V0 (0.6.4)
    "blocks:",  # V0's "# GPU blocks: N, # CPU blocks: M"
    "Maximum concurrency",
    "Graph capturing finished",
    "CUDA graph memory",
    "CUDA graph pool memory",
    "expert offload",
    "KV floor",
    "uto-fit",  # Auto-fit / Cannot auto-fit
    "init engine",
    "Starting vLLM",
    "Application startup complete",
    "No available memory for the cache blocks",
    "User-specified max_model_len",
    "memory on device",
    "memory on node",
    "Error in memory profiling",
    "out of memory",
    "OutOfMemoryError",
    "Failed to load model",
    "Engine core initialization failed",
    "Error: ",
    "Exception: ",
    "MLA backend",
    "block size to",
    "Padding mamba page size",
    "padding layers",
    "SSM cache type",
    "Mamba cache mode",
)

# --- records that echo a client (never a boot fact) ------------------------------------------------------------------

# The request logger's files: vllm/entrypoints/logger.py (0.6-0.22), entrypoints/serve/utils/request_logger.py (0.23+).
# Its records repeat what a client sent or got, so a "GPU KV cache size: …" inside one is the client's text.
REQUEST_LOGGER_SOURCES = frozenset({"logger.py", "request_logger.py"})
# Its message forms, every release: "Received request ID: prompt: %r, params: …" (0.6-0.11.0), "Received request ID:
# params: …" (0.11.1+), "Request ID details: prompt: %r, …" (0.11.1+), "Request ID JSON body: …" (0.31-0.32),
# "Generated response ID: output: %r, …" (0.10.1+) and "Generated response ID details: output_token_ids: …" (0.28+).
# What a header-less excerpt (a pasted fragment, a proxy's own log) still shows of them.
ECHO_START = re.compile(r"\A(?:Received request\s|Generated response\s|Request \S{1,400} (?:details|JSON body):)")
# A client's text quoted inside a record: `prompt: '…'` (repr), `"prompt": "…"` (a JSON body), `output: '…'`, a chat
# message's `"content": "…"`; whatever follows is the client's, not the server's.
CLIENT_TEXT = re.compile(r"""\b(?:prompt|output|content)['"]?\s{0,4}[:=]\s{0,4}[\[{(]?\s{0,4}[bfru]?['"]""")

# The root-cause line of a traceback: "RuntimeError: Insufficient space in /dev/shm ...".
ERROR_LINE = re.compile(r"\A(?:[A-Za-z_][\w.]{0,100})?(?:Error|Exception): \S")  # a bare "Exception: ..." too



def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# --- facts -----------------------------------------------------------------------------------------------------------

# "Model loading took 14.99 GiB memory and 5.1 seconds" (≥0.12) / "Model loading took 14.9866 GiB and 5.1 seconds"
# (0.8.5) / "Model loading took 14.9866 GB and 5.1 seconds" (0.8.0-0.8.4, V0 and V1). Every "GB" vLLM prints here and
# below is bytes / 2**30 (`/ float(2**30)` in the source): a GiB figure under another name, read as it is.
MODEL_LOAD = _c(r"Model loading took " + NUM + r"\s*Gi?B\b")
# V0 model runner, and 0.6-0.7's V1 one: "Loading model weights took %.4f GB" (0.6.x-0.8.x V0; "%.4f GiB" on XPU 0.8.5)
MODEL_WEIGHTS_V0 = _c(r"\ALoading model weights took\s*" + NUM + r"\s*Gi?B\b")
# gpu_worker, every V1 version but 0.8.5: "Available KV cache memory: 61.3 GiB" (%.2f up to 0.12, round(x, 2) after)
AVAILABLE_KV = _c(r"Available KV cache memory:\s*" + NUM + r"\s*GiB")
# V0 engine (0.8.5–0.10.x with VLLM_USE_V1=0): "... the rest of the memory reserved for KV Cache is 61.30GiB."
AVAILABLE_KV_V0 = _c(r"the rest of the memory reserved for KV Cache is\s*" + NUM + r"\s*GiB")
# V0 worker, 0.6.4: "Memory profiling results: total_gpu_memory=%.2fGiB initial_memory_usage=%.2fGiB peak_torch_memory=
# %.2fGiB memory_usage_post_profile=%.2fGiB non_torch_memory=%.2fGiB kv_cache_size=%.2fGiB gpu_memory_utilization=%.2f"
MEMORY_PROFILING_V0 = _c(r"\AMemory profiling results:.{0,400}?\bkv_cache_size=" + NUM + r"\s*GiB")
# V0 executors: "# GPU blocks: %d, # CPU blocks: %d" (0.6; "# TPU/HPU blocks" on those), "# %s blocks: %d, # CPU blocks:
# %d" with the platform's device_name ("# cuda blocks", "# rocm blocks", "# cpu blocks"; 0.7-0.10), "# CPU blocks: %d"
# (0.6's CPU executor), "# GPU blocks: %d" (0.6's V1). The first word is the KV cache's device; the count is in blocks
# of a size the V0 engine does not log, so it gives no token count.
BLOCKS_V0 = _c(r"\A#\s*([A-Za-z]{2,10}) blocks:\s*" + INT)
#: The device word of a V0 blocks line or a V1 capacity line → KvFacts.device.
DEVICE_WORDS = {"gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "cpu": "cpu", "xpu": "xpu", "tpu": "tpu", "npu": "npu",
                "hpu": "hpu"}
# --kv-cache-memory-bytes (≥0.10.2): "Initial free memory 78.5 GiB, reserved 10.0 GiB memory for KV Cache as specified
# by kv_cache_memory_bytes config and skipped memory profiling." 0.10.2/0.11 print "reserved 10.00GiB memory".
RESERVED_KV = _c(r"reserved\s+" + NUM + r"\s*GiB memory for KV Cache as specified by kv_cache_memory_bytes")
# CPU backend (v1/worker/cpu_worker.py `determine_available_memory`, 0.22+): "Explicitly set (1.0/15.09) GiB for KV
# cache on node 0." (--kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE) / "Auto set (1.65/15.09) GiB for KV cache on
# node 0, with 13.58 GiB requested memory for the worker. 11.93 GiB memory was consumed by non-kv usages." (sized
# from --gpu-memory-utilization: the CPU's "Available KV cache memory"). Groups: how, the KV size, the node's total.
CPU_KV_SET = _c(r"(Explicitly|Auto) set \(" + NUM + r"/" + NUM + r"\) GiB for KV cache on node")
# ≤0.25: "GPU KV cache size: 10,720 tokens"; ≥0.30 adds ", Maximum concurrency for ..." on the same line.
# The device word varies: GPU, CPU, XPU, "GPU + host" (hisparse).
KV_TOKENS = _c(r"KV cache size:\s*" + INT + r"\s*tokens")
# "Maximum concurrency for 4,096 tokens per request: 2.62x"
CONCURRENCY = _c(r"Maximum concurrency for\s*" + INT + r"\s*tokens per request:\s*" + NUM + r"\s*x")
# "Graph capturing finished in 12 secs, took 0.52 GiB" (measured: `%.0f secs, took %.2f GiB`, 0.6.6 … 0.34; each
# worker logs its own). The V2 model runner (v1/worker/gpu/model_runner.py, the default from 0.29) logs it twice per
# worker: first for the throwaway capture its memory profiling runs before the KV cache is sized (0.29+
# `profile_cudagraph_memory` → `capture_model(profile_only=True)`: every PIECEWISE graph but only two FULL ones), then
# for the real capture after it. Only a capture after the KV size is the measured figure (parser.py). 0.34's
# extensible KV cache (the default on CUDA) skips that pass and logs the KV size after the capture instead.
GRAPH_CAPTURED = _c(r"Graph capturing finished in\s*" + NUM + r"\s*secs?, took\s*" + NUM + r"\s*GiB")
# The V1 model runner's estimate (v1/worker/gpu_model_runner.py `profile_cudagraph_memory`, 0.18 … 0.33; the file is
# gone in 0.34), each worker, after the profile run and before the KV cache is sized: "Estimated CUDA graph memory:
# %.2f GiB total". Logged whenever the worker profiles graph memory (0.18+, graphs on), whether or not
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS (default 0 in 0.18-0.19, 1 from 0.20) then takes it off the KV budget.
# No per-mode line carries a total: "Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35
# (largest=256)" (INFO, 0.18+; ", ENCODER=…" 0.25+) counts graphs, and the parts are DEBUG and in MiB: "Estimated %s
# CUDA graph memory: %.2f MiB first-capture + (%d-1) × %.2f MiB per-graph" (0.18+), "Estimated encoder CUDA graph
# memory: %.2f MiB for %d graphs" (0.25+); the total (the largest first capture + every mode's per-graph parts + the
# encoder's) follows them at INFO. The V2 model runner (0.29+) logs no estimate of its own: only the pool line below.
GRAPH_ESTIMATED = _c(r"Estimated CUDA graph memory:\s*" + NUM + r"\s*GiB total")
# v1/worker/gpu_worker.py `compile_or_warm_up_model` (0.18 … 0.34, both model runners), each worker after its real
# capture, only when an estimate was made: "CUDA graph pool memory: %s GiB (actual), %s GiB (estimated), difference:
# %s GiB (%.1f%%)." The figures are round(bytes / 2**30, 2), so "0.5", "1.23", "0.0" (and "-0.01" when free memory rose
# during the capture); the actual one is that worker's "Graph capturing finished … took" figure.
GRAPH_POOL = _c(r"CUDA graph pool memory:\s*" + NUM + r"\s*GiB \(actual\),\s*" + NUM + r"\s*GiB \(estimated\)")
# fork (shared/seed/gpu_worker-kv-cap.patch): "expert offload: KV capped at the plan's reserve 1.74 GiB; 9.5 GiB of ..."
OFFLOAD_CAP = _c(r"expert offload: KV capped at the plan's reserve\s*" + NUM + r"\s*GiB;\s*" + NUM + r"\s*GiB of")
# patches/cpu_worker-kv-floor.patch: "KV floor: raised the KV cache from 0.0 GiB to 0.0 GiB
# (CLAV_KV_RESERVE_FLOOR_GIB=0.005; 3145728 -> 5368709 bytes)": the bytes are exact, the GiB figures are not.
KV_FLOOR = _c(r"KV floor: raised the KV cache from .*?;\s*" + INT + r"\s*->\s*" + INT + r"\s*bytes")
# ≥0.15: "Auto-fit max_model_len: reduced from 131072 to 40960 to fit in available ..."
AUTOFIT_REDUCED = _c(r"\bAuto-fit max_model_len: reduced from\s*" + INT + r"\s*to\s*" + INT)
# "Auto-fit max_model_len: full model context length 32768 fits in available ..." /
# "Auto-fit max_model_len: attention-free model, using derived max_model_len=32768"
AUTOFIT_KEPT = _c(
    r"\bAuto-fit max_model_len: (?:full model context length\s*" + INT + r"\s*fits"
    r"|attention-free model, using derived max_model_len=\s*" + INT + r")"
)
# "init engine (profile, create kv cache, warmup model) took 41.20 seconds" (≤0.15) / "... took 41.20 s" (≥0.19,
# optionally followed by "(compilation: ...)")
ENGINE_INIT = _c(r"init engine \([^)]{0,200}\) took\s*" + NUM + r"\s*(?:s|sec|secs|seconds)\b")
# "vLLM API server version 0.8.5" (≤0.12) / "vLLM server version 0.19.0, serving model ..."
VERSION = _c(r"\bvLLM (?:API )?server version\s+v?([0-9][\w.+\-]{0,60}?)(?=,|\s|\Z)")
# The ASCII logo's row (≥0.15): " ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.15.0"
VERSION_LOGO = _c(r"[█▀▄]\s+version\s+v?([0-9][\w.+\-]{0,60}?)(?=\s|\Z)")
# CPU platform (0.32): "Using AMX_MLA backend." / "Using CPU_MLA backend." — the AMX kernel keeps the 128-token block
MLA_BACKEND = _c(r"\AUsing ([A-Z0-9_]{0,40}MLA) backend\.?\Z")
# Hybrid models (platforms/interface.py `_align_hybrid_block_size`): "Setting attention block size to 256 tokens to
# ensure that attention page size is >= mamba page size." (the quantized-pool and XPU variants say the same first words)
ATTENTION_BLOCK = _c(r"\A(?:\[XPU\])?Setting attention block size to\s*" + INT + r"\s*tokens")
# "Setting kv cache block size to 64 for FLASHMLA backend(s)." (the backend's preferred block, ≥0.30)
KV_BLOCK = _c(r"\ASetting kv cache block size to\s*" + INT + r"\s*for\b")
# "Padding mamba page size by 91.04% to ensure that mamba page size and attention page size are exactly equal."
MAMBA_PADDING = _c(r"\APadding mamba page size by\s*" + NUM + r"\s*%")
# kv_cache_utils `_get_kv_cache_groups_uniform_page_size`:
# "Add 1 padding layers, may waste at most 50.00% KV cache memory"
PADDING_LAYERS = _c(r"\AAdd\s*" + INT + r"\s*padding layers?, may waste at most")
# platforms/cpu.py (AVX-512 BF16 CPUs):
# "Reset SSM cache type to float32 for accelerated GDN mamba backend 'qwen3_next'."
CPU_SSM_RESET = _c(r"\AReset SSM cache type to (\w{1,20}) for accelerated GDN mamba backend")
# models/config.py `MambaModelConfig`: "Mamba cache mode is set to 'align' for X by default when prefix caching ..."
MAMBA_MODE = _c(r"\AMamba cache mode is set to '(\w{1,20})'")
# "Starting vLLM server on http://..." (≥0.19), "Starting vLLM API server 0 on ..." (0.9–0.15),
# "Starting vLLM API server on http://..." (0.8.5), then uvicorn's "Application startup complete."
READY = _c(r"\A(?:Starting vLLM (?:API )?server\b.{0,40}? on \S|Application startup complete\.?)")

# --- refusals (anchored at the start of the message, after an optional exception class) --------------------------

# "To serve at least one request with the model's max seq len (N), (X GiB KV cache is needed, which is larger than the
# available KV cache memory (Y GiB). Based on the available memory, the estimated maximum model length is M. ..."
# ("models's" up to 0.19; the estimated sentence is absent when M would be 0, and numberless in 0.8.5.)
KV_INSUFFICIENT = _c(
    EXC + r"To serve at least one request with the models?'s max seq len\s*\(\s*" + INT + r"\s*\)"
    r"(?:,\s*\(?\s*" + NUM + r"\s*GiB KV cache is needed, which is larger than the available KV cache memory\s*\(\s*"
    + NUM + r"\s*GiB\))?"
)
KV_ESTIMATED = _c(r"estimated maximum model length is\s*" + INT)
NO_CACHE_MEMORY = _c(EXC + r"No available memory for the cache blocks")
AUTOFIT_IMPOSSIBLE = _c(EXC + r"Cannot auto-fit max_model_len")
# "User-specified max_model_len (N) is greater than the derived max_model_len (key=D or model_max_length=M in model's
# config.json)." A refusal only when raised ("To allow overriding this maximum, set the env var ..."); with
# VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 the same sentence is a WARNING ending "Make sure the value is correct and within the
# model context size." (≤0.11) or followed by "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
# (≥0.12).
MAX_LEN_EXCEEDS = _c(
    EXC + r"User-specified max_model_len\s*\(\s*" + INT + r"\s*\) is greater than the derived max_model_len"
    r"(?:\s*\([^=()]{0,100}=\s*(?:" + INT + r"|[^\s()]{1,40}))?"
)
MAX_LEN_RAISED_MARK = "To allow overriding this maximum"
MAX_LEN_WARNING_MARK = "Make sure the value is correct and within the model context size"
# "Free memory on device [cuda:0 ](F/T GiB) on startup is less than desired GPU memory utilization (U, R GiB)."
# ≥0.33 also: "... on startup is less than the engine's budget after excluding external process's weights (U, R GiB)".
# NOT the ≥0.10.2 INFO suggestion "Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is ...".
GPU_MEMORY_BUSY = _c(
    EXC + r"Free memory on device(?: [^\s(]{1,40})?\s*\(\s*" + NUM + r"\s*/\s*" + NUM
    + r"\s*GiB\) on startup is less than"
)
# CPU backend's counterparts: "Available memory on node 0 (A/T GiB) on startup is less than desired CPU memory
# utilization (U, R GiB)." and "Available memory on node 0 (A/T GiB) on kv cache allocation is less than requested
# memory for kv (R GiB)."
CPU_MEMORY_BUSY = _c(
    EXC + r"Available memory on node\s*\d+\s*\(\s*" + NUM + r"\s*/\s*" + NUM + r"\s*GiB\) on "
    r"(?:startup|kv cache allocation) is less than"
)
# gpu_worker's assertion when free memory *rose* during profiling (another process released memory meanwhile):
# "AssertionError: Error in memory profiling. Initial free memory 10.5 GiB, current free memory 12.3 GiB. This happens
# when other processes sharing the same container release GPU memory while vLLM is profiling ..." (0.6 … 0.33).
PROFILING_BUSY = _c(EXC + r"Error in memory profiling\.\s*Initial free memory\s*" + NUM + r"\s*GiB,\s*current free "
                    r"memory\s*" + NUM + r"\s*GiB")
BUSY_REQUESTED = _c(r"is less than [^()]{0,120}\((?:[^,()]{0,40},\s*)?" + NUM + r"(?:\s*/\s*" + NUM + r")?\s*GiB\)")
WEIGHTS_DONT_FIT = _c(EXC + r"Failed to load model - not enough GPU memory")
# torch's "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ..." (torch.cuda.OutOfMemoryError before 2.5),
# "RuntimeError: CUDA error: out of memory", vLLM's "RuntimeError: CUDA out of memory occurred when warming up ...",
# and torch's allocator-limit form "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory."
OOM = _c(
    r"\A(?:[A-Za-z_][\w.]{0,60}\.)?OutOfMemoryError\b"
    r"|" + EXC + r"(?:CUDA|HIP|XPU|NPU|MPS)(?: error:)? out of memory\b"
)
OOM_TRIED = _c(r"Tried to allocate\s*" + NUM + r"\s*(B|KiB|MiB|GiB|TiB)")
OOM_FREE = _c(r"of which\s*" + NUM + r"\s*(B|KiB|MiB|GiB|TiB) is free")
ENGINE_INIT_FAILED = _c(EXC + r"Engine core initialization failed")

