"""Element sizes of the dtype names config.json and vLLM's flags use, and the dtype vLLM runs a model in when its
config names one it does not compute in (an FP8 / int8 checkpoint's storage type)."""

from __future__ import annotations

#: config.json dtype names (`torch_dtype`, or `dtype` in newer transformers) and cache dtype flags → bytes
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}

#: the dtypes vLLM computes in (`_STR_DTYPE_TO_TORCH_DTYPE` of vllm/config/model.py), by every name a config.json
#: writes them (torch's names, `torch.`-prefixed reprs, the short forms some exporters write)
_COMPUTE_DTYPES = {"float16": "float16", "half": "float16", "fp16": "float16",
                   "bfloat16": "bfloat16", "bf16": "bfloat16",
                   "float32": "float32", "float": "float32", "fp32": "float32"}

#: the platform's preferred dtype (`supported_dtypes[0]`): bfloat16 on CUDA ≥ 8.0 and on x86 CPUs with AVX-512 BF16
PREFERRED = "bfloat16"


def config_compute_dtype(config_dtype: str | None) -> tuple[str, str | None]:
    """(the dtype `--dtype auto` runs the model in, a note when it is not the config's own), as vLLM's
    `_get_and_verify_dtype` / `_resolve_auto_dtype` derive it: no dtype (or "auto") is float32; float32 is downcast
    to the preferred dtype; a dtype the platform does not compute in (float8_e4m3fn, int8, float64, ...: a quantized
    checkpoint's storage type) falls back to it too."""
    raw = (config_dtype or "").strip()
    name = raw.lower().removeprefix("torch.") or "float32"
    if name in ("auto", "none"):
        return PREFERRED, (f"--dtype auto: the config's dtype {raw!r} names none: float32 assumed, run as "
                           f"{PREFERRED} (vLLM downcasts float32 models)")
    compute = _COMPUTE_DTYPES.get(name)
    if compute == "float32":
        return PREFERRED, f"--dtype auto: the config's {name} runs as {PREFERRED} (vLLM downcasts float32 models)"
    if compute is not None:
        return compute, None
    return PREFERRED, (f"--dtype auto: the config's {raw!r} is not a dtype vLLM computes in (a quantized "
                       f"checkpoint's storage type): it falls back to {PREFERRED}")
