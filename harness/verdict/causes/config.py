"""Causes of kind config_refusal: the configuration cannot boot on this hardware, whatever the machine's health.

Each wording is vLLM's (or its libraries') format string across releases, anchored where a look-alike exists (advice,
an argument dump, a traceback's source line); the examples are what the tests read.
"""

from __future__ import annotations

import re

from .model import SPECIFIC, WEAK, Also, Cause, CauseKind, Numbers, Pattern, read_groups
from .shapes import EXC, INT, NUM, named

K = CauseKind.config_refusal
_ESTIMATED = re.compile(r"estimated maximum model length is\s*" + INT)
MAX_LEN_RAISED_MARK = "To allow overriding this maximum"
MAX_LEN_WARNING_MARK = "Make sure the value is correct and within the model context size"
MAX_LEN_CAUTION_MARK = "must be used with extreme caution"


def _kv_read(message: str, m: re.Match[str]) -> Numbers:
    out = read_groups(message, m)
    if est := _ESTIMATED.search(message, m.end()):
        out["estimated_max_model_len"] = int(est.group(1).replace(",", ""))
    return out


def _max_len_read(message: str, m: re.Match[str]) -> Numbers | None:
    """Logged as the VLLM_ALLOW_LONG_MAX_MODEL_LEN warning, the sentence goes on "Make sure the value is correct"
    (≤0.11) or, with no "To allow overriding this maximum" before it, "... must be used with extreme caution" (0.12+).
    Else it is the refusal, cut or not: a paste that stops after the first sentence (a title, a quote) is how users
    report the error, and the warning is logged at WARNING, a level no refusal is read from."""
    if MAX_LEN_WARNING_MARK in message or (MAX_LEN_CAUTION_MARK in message and MAX_LEN_RAISED_MARK not in message):
        return None
    return read_groups(message, m)


def _divisors(numbers: Numbers) -> Numbers:
    heads = numbers.get("heads")
    if isinstance(heads, int) and 0 < heads <= 1 << 16:
        sizes = (d for d in range(1, min(heads, 64) + 1) if heads % d == 0 and d & (d - 1) == 0)
        return {"tp_sizes": ", ".join(map(str, sizes))}
    return {}


def _ep_divisors(numbers: Numbers) -> Numbers:
    """The expert-parallel sizes (powers of two up to 64) that divide the expert count: what would boot."""
    experts = numbers.get("experts")
    if isinstance(experts, int) and 0 < experts <= 1 << 16:
        return {"ep_sizes": ", ".join(str(d) for d in (1, 2, 4, 8, 16, 32, 64) if d <= experts and experts % d == 0)}
    return {}


def _layers_divisors(numbers: Numbers) -> Numbers:
    layers = numbers.get("layers")
    if isinstance(layers, int) and 0 < layers <= 1 << 16:
        return {"pp_sizes": ", ".join(str(d) for d in range(1, min(layers, 16) + 1) if layers % d == 0)}
    return {}


def _capability(text: object) -> tuple[int, int] | None:
    """"7.5" → (7, 5): compared as numbers ("10.0" is above "8.0", as a string it is below)."""
    if not isinstance(text, str) or not re.fullmatch(r"\d{1,2}\.\d", text):
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


def _dtype(numbers: Numbers) -> Numbers:
    """The capabilities as numbers (compared as numbers: "10.0" is above "8.0", as text it is below), the dtype asked
    as --dtype spells it ("Bfloat16" → bfloat16), and the dtype to use where the GPU is below the capability the
    asked dtype needs (bfloat16: 8.0, Ampere): half."""
    out: Numbers = {}
    for key in ("capability", "min_capability"):
        if (parsed := _capability(numbers.get(key))) is not None:
            out[key] = float(f"{parsed[0]}.{parsed[1]}")
    if isinstance(asked := numbers.get("dtype_asked"), str):
        out["dtype_asked"] = asked.lower()
    cap, need = _capability(numbers.get("capability")), _capability(numbers.get("min_capability"))
    if cap is not None and cap < (need or (8, 0)):
        out["suggested_dtype"] = "half"
    return out


def _least_batched(numbers: Numbers) -> Numbers:
    """The least max_num_batched_tokens that boots: max_model_len (chunked prefill off), else max_num_seqs."""
    least = numbers.get("max_model_len", numbers.get("max_num_seqs"))
    return {"least_batched": least} if isinstance(least, int) else {}


KV_CACHE_TOO_SMALL = Cause(
    "kv_cache_too_small", K,
    "the KV cache cannot hold one request of max_model_len (\"To serve at least one request ...\"; V0: \"The model's "
    "max seq len (N) is larger than the maximum number of tokens that can be stored in KV cache (M)\")",
    (Pattern("To serve at least one request",
             EXC + r"To serve at least one request with the models?'s max seq len\s*\(\s*" + named("max_seq_len", INT)
             + r"\s*\)(?:,\s*\(?\s*" + named("needed_gib", NUM) + r"\s*GiB KV cache is needed, which is larger than "
             r"the available KV cache memory\s*\(\s*" + named("available_gib", NUM) + r"\s*GiB\))?", read=_kv_read),
     Pattern("is larger than the maximum number of",
             r"max seq len\s*\(\s*" + named("max_seq_len", INT) + r"\s*\) is larger than the maximum number of"
             # a paste cut right after the parenthesis, or wrapped before "tokens", still states the length
             r"(?:\s*\Z| tokens that can be stored in KV cache\s*\(\s*(?:" + named("estimated_max_model_len", INT)
             + r"\s*\)|\Z))")),
    ("largest max_model_len that fits: {estimated_max_model_len}",
     "max_model_len {max_seq_len} needs {needed_gib} GiB of KV cache, {available_gib} GiB is available",
     "the KV cache cannot hold one request of max_model_len {max_seq_len}: lower it or raise gpu_memory_utilization",
     "the KV cache cannot hold one request of max_model_len: lower it or raise gpu_memory_utilization"),
    numbers=("max_seq_len", "needed_gib", "available_gib", "estimated_max_model_len"),
    aliases=("kv_insufficient",), stops=True,
    # the figures of a message a terminal or the reporter wrapped (the lines after it are read for them too)
    also=(Also("needed_gib", r"(-?\d{1,15}(?:\.\d{1,15})?)\s*GiB KV cach", float),
          Also("available_gib", r"available KV cache memory\s*\(\s*(-?\d{1,15}(?:\.\d{1,15})?)\s*GiB", float),
          Also("estimated_max_model_len", r"\Atokens that can be stored in KV cache\s*\(\s*(\d{1,18})\s*\)", int),
          Also("estimated_max_model_len", r"estimated maximum model length is\s*(\d[\d,]{0,20}\d|\d)",
               lambda t: int(t.replace(",", "")))),
    examples=(
        "ValueError: To serve at least one request with the models's max seq len (32768), (4.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (1.56 GiB). Based on the available memory, the "
        "estimated maximum model length is 12768. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine.",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
        "in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."))

NO_CACHE_BLOCKS = Cause(
    "no_cache_blocks", K,
    "no memory is left for a single KV block after the weights and activations (\"No available memory for the cache "
    "blocks\"; or a negative \"Available KV cache memory\" / \"# GPU blocks: 0\" the engine died on)",
    (Pattern("No available memory for the cache blocks", EXC + r"No available memory for the cache blocks"),
     Pattern("No available memory for the cache blocks",
             r"\Araise \w{0,60}Error\(\s*f?[\"']No available memory for the cache blocks"),
     Pattern("Available KV cache memory",
             r"Available KV cache memory:\s*" + named("available_gib", r"(-\d{1,15}(?:\.\d{1,15})?)") + r"\s*GiB",
             rank=WEAK, any_level=True),
     Pattern("blocks:", r"\A#\s*(?:GPU|cuda|rocm|CUDA|ROCM) blocks:\s*0\b", rank=WEAK, any_level=True)),
    ("no memory left for one KV block ({available_gib} GiB available for the KV cache): shrink the weights' share "
     "(quantize, more GPUs) or raise gpu_memory_utilization",
     "no memory left for one KV block: shrink the weights' share (quantize, more GPUs) or raise "
     "gpu_memory_utilization"),
    numbers=("available_gib", "gpu_blocks", "cpu_blocks"), aliases=("no_cache_memory",), stops=True,
    also=(Also("gpu_blocks", r"#\s*(?:GPU|cuda|rocm|CUDA|ROCM) blocks:\s*(\d{1,12})", int),
          Also("cpu_blocks", r"#\s*CPU blocks:\s*(\d{1,12})", int)),
    examples=("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
              "initializing the engine.",
              'raise ValueError("No available memory for the cache blocks. "',
              "INFO 05-01 10:00:00 [gpu_worker.py:227] Available KV cache memory: -2.14 GiB",
              "INFO 05-01 10:00:00 executor_base.py:110] # GPU blocks: 0, # CPU blocks: 2048"))

DTYPE_UNSUPPORTED_MODEL = Cause(
    "dtype_unsupported_model", K,
    "the model type refuses the dtype whatever the GPU (\"The model type 'gemma3' does not support float16. Reason: "
    "Numerical instability\")",
    (Pattern("does not support float16",
             EXC + r"The model type '(?P<model_type>[\w.-]{1,80})' does not support (?P<dtype_asked>float16)"),),
    ("{model_type} does not run in {dtype_asked}: use --dtype bfloat16 (or float32)",),
    numbers=("model_type", "dtype_asked"),
    examples=("Value error, The model type 'gemma3' does not support float16. Reason: Numerical instability. Please "
              "use bfloat16 or float32 instead. [type=value_error, input_value=ArgsKwargs((), {}), "
              "input_type=ArgsKwargs]",
              "ValueError: The model type 'gemma2' does not support float16. Reason: Numerical instability. Please use "
              "bfloat16 or float32 instead."))

AUTOFIT_IMPOSSIBLE = Cause(
    "autofit_impossible", K, "auto-fit found no room for even one token (\"Cannot auto-fit max_model_len\")",
    (Pattern("Cannot auto-fit", EXC + r"Cannot auto-fit max_model_len"),),
    ("auto-fit found no room for one token: the weights leave no KV memory",), stops=True,
    examples=("ValueError: Cannot auto-fit max_model_len: not enough memory for even a single token.",))

MAX_LEN_EXCEEDS_MODEL = Cause(
    "max_len_exceeds_model", K,
    "max_model_len is above what the model's config allows (\"User-specified max_model_len (N) is greater than the "
    "derived max_model_len\")",
    (Pattern("User-specified max_model_len",
             EXC + r"User-specified max_model_len\s*\(\s*" + named("max_seq_len", INT) + r"\s*\) is greater than the "
             r"derived max_model_len(?:\s*\([^=()]{0,100}=\s*(?:" + named("derived_max_model_len", INT)
             + r"|[^\s()]{1,40}))?", read=_max_len_read),
     Pattern("max_model_len", r"\A(?:\w+Error:\s*)?max_model_len\s*\(?\s*" + named("max_seq_len", INT)
             + r"\s*\)? (?:is greater than|exceeds) (?:the )?(?:model's |derived )?(?:max_model_len|maximum)\s*\(?\s*"
             + named("derived_max_model_len", INT)),
     # a hardware plugin's own limit (Tenstorrent's: "TT-LLama8B and TT-Llama11B do not support max_model_len
     # greater than 32768 on N150 (received 65536)")
     Pattern("do not support max_model_len greater than", r"do not support max_model_len greater than\s*"
             + named("derived_max_model_len", INT) + r"[^()]{0,100}\(received\s*" + named("max_seq_len", INT))),
    ("the model allows at most max_model_len {derived_max_model_len} (asked {max_seq_len})",
     "max_model_len {max_seq_len} is above the model's limit"),
    numbers=("max_seq_len", "derived_max_model_len", "derived_from"), stops=True,
    also=(Also("derived_from", r"derived max_model_len\s*\(\s*([A-Za-z_][\w.]{0,60})\s*="),),
    examples=("ValueError: User-specified max_model_len (40000) is greater than the derived max_model_len "
              "(max_position_embeddings=32768 or model_max_length=None in model's config.json). To allow overriding "
              "this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
              "Value error, User-specified max_model_len (40000) is greater than the derived max_model_len "
              "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow "
              "overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 [type=value_error]",
              "ValueError: TT-LLama8B and TT-Llama11B do not support max_model_len greater than 32768 on N150 "
              "(received 65536). Set --max_model_len to 32768 or lower in vLLM."))

TP_NOT_DIVISIBLE = Cause(
    "tp_not_divisible", K,
    "tensor_parallel_size does not divide the model's attention heads (\"Total number of attention heads (H) must be "
    "divisible by tensor parallel size (T)\")",
    (Pattern("must be divisible by tensor parallel size",
             r"Total number of attention heads\s*\(\s*" + named("heads", INT) + r"\s*\) must be divisible by tensor "
             r"parallel size\s*\(\s*" + named("tp", INT) + r"\s*\)"),
     Pattern("must be divisible by tensor parallel size"),
     Pattern("divisible by tensor parallel size", r"num(?:ber of|_)? ?(?:key[_ ]value|kv)[_ ]heads?\s*\(?\s*"
             + named("heads", INT) + r"\s*\)? (?:must be|is not) divisible by (?:the )?tensor parallel size\s*\(?\s*"
             + named("tp", INT), flags=re.I)),
    ("tensor_parallel_size {tp} does not divide the {heads} attention heads: use {tp_sizes}",
     "tensor_parallel_size {tp} does not divide the {heads} attention heads",
     "tensor_parallel_size does not divide the attention heads"),
    numbers=("heads", "tp", "tp_sizes"), derive=_divisors,
    examples=("ValueError: Total number of attention heads (14) must be divisible by tensor parallel size (4).",))

PP_NOT_DIVISIBLE = Cause(
    "pp_not_divisible", K,
    "pipeline_parallel_size does not divide the model's layers (\"Total number of hidden layers (L) must be divisible "
    "by pipeline parallel size (P)\"; vLLM can split unevenly from 0.6.2 with VLLM_PP_LAYER_PARTITION)",
    (Pattern("must be divisible by pipeline parallel size",
             r"Total number of hidden layers\s*\(\s*" + named("layers", INT) + r"\s*\) must be divisible by pipeline "
             r"parallel size\s*\(\s*" + named("pp", INT) + r"\s*\)"),),
    ("pipeline_parallel_size {pp} does not divide the {layers} layers: use {pp_sizes}",
     "pipeline_parallel_size does not divide the model's layers"),
    numbers=("layers", "pp", "pp_sizes"), derive=_layers_divisors,
    examples=("NotImplementedError: Total number of hidden layers (30) must be divisible by pipeline parallel size "
              "(4).",))

QUANT_TP_MISALIGNED = Cause(
    "quant_tp_misaligned", K,
    "a quantized weight's shape does not divide after the tensor-parallel split (\"The input size is not aligned with "
    "the quantized weight shape\", Marlin's \"input_size_per_partition = N is not divisible by min_thread_k\")",
    (Pattern("aligned with the quantized weight shape"),
     Pattern("size_per_partition", r"(?:input|output)_size_per_partition\s*=\s*" + named("size", INT)
             + r"\s*is not divisible by\s*(?:min_thread_[kn]|group_size|tile_size|[\w ]{1,40})?\s*=?\s*"
             + named("divisor", INT)),
     Pattern("is not divisible by weight quantization block", r"is not divisible by weight quantization block")),
    ("a quantized weight ({size}) does not divide by {divisor} after the tensor-parallel split: use a smaller "
     "tensor_parallel_size",
     "a quantized weight does not divide after the tensor-parallel split: use a smaller tensor_parallel_size"),
    numbers=("size", "divisor"),
    examples=("ValueError: The input size is not aligned with the quantized weight shape. This can be caused by too "
              "large tensor parallel size.",
              "ValueError: Weight input_size_per_partition = 1280 is not divisible by min_thread_k = 128. Consider "
              "reducing tensor_parallel_size or running with --quantization gptq."))

NOT_ENOUGH_GPUS = Cause(
    "not_enough_gpus", K,
    "the world size (tensor × pipeline × data parallel) is above the GPUs this server sees (\"please set "
    "tensor_parallel_size to less than max local gpu count\"; on a multi-node Ray cluster this check can be vLLM's "
    "own bug: it counts the local GPUs only)",
    (Pattern("max local gpu count", r"world_size\s*\(\s*" + named("world_size", INT) + r"\s*\) is less than than max "
             r"local gpu count\s*\(\s*" + named("gpus", INT)),
     Pattern("max local gpu count"),
     Pattern("exceeds the total number of available GPUs"),
     Pattern("is larger than the number of available GPUs", r"\(\s*" + named("world_size", INT) + r"\s*\) is larger "
             r"than the number of available GPUs\s*\(\s*" + named("gpus", INT)),
     Pattern("is greater than the number of available GPUs"),
     Pattern("exceeds available GPUs", r"(?:Tensor|Pipeline|Data) parallel size\s*\(\s*" + named("world_size", INT)
             + r"\s*\) exceeds available GPUs\s*\(\s*" + named("gpus", INT)),
     # V1's worker (0.11.0 `v1/worker/gpu_worker.py`), an assertion: on multi-node Ray it compared the whole world size
     # with one node's GPUs, vLLM's own bug (fixed by its PR 28873).
     Pattern("number of visible devices", r"local_world_size\s*\(\s*" + named("world_size", INT)
             + r"\s*\) must be less than or equal to the number of visible devices\s*\(\s*" + named("gpus", INT)),
     # TRL's GRPOTrainer (0.14-0.15, `vllm_device="auto"` = the GPU after the training processes'): the training
     # processes already take every GPU, none is left for vLLM
     Pattern("The requested device for vllm")),
    ("world size {world_size} is above the {gpus} GPUs visible: lower tensor/pipeline parallel sizes",
     "the world size is above the GPUs visible: lower tensor/pipeline parallel sizes (or show the server more GPUs)"),
    numbers=("world_size", "gpus"),
    examples=("AssertionError: please set tensor_parallel_size to less than max local gpu count",
              "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement "
              "group.",
              "AssertionError: local_world_size (16) must be less than or equal to the number of visible devices (8).",
              "ValueError: The requested device for vllm (cuda:1) is not available. You are likely using vLLM without "
              "restricting the number of GPUs for training."))

EP_NOT_DIVISIBLE = Cause(
    "ep_not_divisible", K, "the expert count does not divide by the expert-parallel size",
    (Pattern("ivisible by", r"(?:number of |num_|n_routed_|global_num_)?experts?\s*\(?\s*=?\s*"
             + named("experts", INT) + r"\s*\)? (?:must be|is not|should be) (?:evenly )?divisible by (?:the )?"
             r"(?:expert[ _]parallel(?:ism)?(?:[ _]size)?|ep[ _]size|EP size|ep)\s*\(?\s*=?\s*" + named("ep", INT),
             flags=re.I),),
    ("{experts} experts do not divide by expert-parallel size {ep}: use {ep_sizes}",
     "{experts} experts do not divide by expert-parallel size {ep}",
     "the experts do not divide by the expert-parallel size"),
    numbers=("experts", "ep", "ep_sizes"), derive=_ep_divisors,
    examples=("ValueError: Number of experts (60) must be divisible by expert parallel size (8).",))

DTYPE_UNSUPPORTED_GPU = Cause(
    "dtype_unsupported_gpu", K,
    "the dtype needs a newer GPU (\"Bfloat16 is only supported on GPUs with compute capability of at least 8.0\")",
    (Pattern("is only supported on GPUs with compute capability",
             r"(?P<dtype_asked>Bfloat16|bfloat16|FP8|fp8|\w+) is only supported on GPUs with compute capability of at "
             r"least (?P<min_capability>\d{1,2}\.\d)(?:\.(?: Your (?P<gpu>[^.]{1,80}?) GPU has compute capability "
             # a quote that stops at the first sentence (no full stop) still names the dtype and the capability
             r"(?P<capability>\d{1,2}\.\d))?)?"),
     Pattern("is not supported on this GPU", r"(?P<dtype_asked>bfloat16|float16|fp8|BF16|FP16) is not supported on "
             r"this GPU", flags=re.I)),
    ("{gpu} (compute capability {capability}) has no {dtype_asked}: use --dtype {suggested_dtype}",
     "this GPU has no {dtype_asked}: use another --dtype (half)",
     "this GPU does not support the dtype: use another --dtype (half)"),
    numbers=("dtype_asked", "min_capability", "gpu", "capability", "suggested_dtype"), derive=_dtype,
    examples=("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 "
              "GPU has compute capability 7.5. You can use float16 instead by explicitly setting the`dtype` flag in "
              "CLI, for example: --dtype=half.",))

QUANTIZATION_UNSUPPORTED_GPU = Cause(
    "quantization_unsupported_gpu", K,
    "the quantization method needs a newer GPU (\"The quantization method fp8 is not supported for the current GPU. "
    "Minimum capability: 89. Current capability: 86.\")",
    (Pattern("is not supported for the current GPU",
             r"quantization method (?P<method>[\w-]{1,40}) is not supported for the current GPU\.?(?:\s*Minimum "
             r"capability:\s*(?P<min_capability>\d{1,4})\.?\s*Current capability:\s*(?P<capability>\d{1,4}))?"),
     Pattern("not supported on this GPU", r"(?P<method>Marlin|Machete|CUTLASS|FP8|fp8|AWQ|GPTQ|MXFP4|NVFP4)\w* "
             r"(?:is |are )?not supported on this GPU")),
    ("{method} needs compute capability {min_capability}, this GPU has {capability}: pick another quantization or GPU",
     "{method} is not supported on this GPU: pick another quantization or GPU",),
    numbers=("method", "min_capability", "capability"),
    examples=("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. "
              "Current capability: 86.",))

QUANTIZATION_MISMATCH = Cause(
    "quantization_mismatch", K,
    "--quantization names another method than the checkpoint's (\"Quantization method specified in the model config "
    "(A) does not match the quantization method specified in the `quantization` argument (B)\"), or one vLLM does not "
    "know",
    (Pattern("does not match the quantization method specified",
             r"model config \((?P<checkpoint>[\w-]{1,40})\) does not match the quantization method specified in the "
             r"`?quantization`? argument \((?P<asked>[\w-]{1,40})\)"),
     # the method may be empty ("Unknown quantization method: . Must be one of [...]": a config with no method)
     Pattern("Unknown quantization method", r"Unknown quantization method:?\s*(?P<asked>[\w-]{1,40})?")),
    ("the checkpoint is {checkpoint}-quantized, --quantization says {asked}: drop the flag or match it",
     "the quantization {asked} does not fit this checkpoint",),
    numbers=("checkpoint", "asked"),
    examples=("ValueError: Quantization method specified in the model config (fp8) does not match the quantization "
              "method specified in the `quantization` argument (awq).",))

QUANTIZATION_DTYPE_MISMATCH = Cause(
    "quantization_dtype_mismatch", K,
    "the dtype is not one the quantization method supports (\"torch.bfloat16 is not supported for quantization "
    "method awq\")",
    (Pattern("is not supported for quantization method",
             r"torch\.(?P<dtype_asked>\w{1,20}) is not supported for quantization method (?P<method>[\w-]{1,40})"),),
    ("{method} does not run in {dtype_asked}: use --dtype half", "the dtype does not suit the quantization"),
    numbers=("dtype_asked", "method", "supported_dtypes"),
    also=(Also("supported_dtypes", r"Supported dtypes:\s*\[([^\]]{1,200})\]", lambda s: s.replace("torch.", "")),),
    examples=("ValueError: torch.bfloat16 is not supported for quantization method awq. Supported dtypes: "
              "[torch.float16]",))

QUANT_CONFIG_MISSING = Cause(
    "quant_config_missing", K,
    "the checkpoint has no quantization config for the method asked (\"Cannot find any of ['quant_config.json', "
    "'quantize_config.json']\")",
    (Pattern("Cannot find any of", r"Cannot find any of \[[^\]]{0,200}quant[^\]]{0,200}\]"),
     Pattern("quantization config", r"(?:No|Cannot find|missing) (?:the )?quantization config", flags=re.I),
     # get_quant_config (0.2+): no file of the method's config names in the checkpoint
     Pattern("Cannot find the config file for", r"Cannot find the config file for (?P<asked>[\w-]{1,40})")),
    ("the checkpoint has no {asked} quantization config: drop --quantization or use a {asked} checkpoint",
     "the checkpoint has no quantization config: drop --quantization or use a quantized checkpoint",),
    numbers=("asked",),
    examples=("ValueError: Cannot find any of ['quant_config.json', 'quantize_config.json'] in the model's "
              "directory",))

UNSUPPORTED_ARCHITECTURE = Cause(
    "unsupported_architecture", K,
    "this vLLM has no implementation of the model's architecture (\"Model architectures ['X'] are not supported for "
    "now\")",
    (Pattern("are not supported for now", r"Model architectures?\s*\[?'?(?P<architecture>[\w.]{1,80})'?\]? (?:are|is) "
             r"not supported for now"),
     Pattern("has no vLLM implementation", r"(?P<architecture>[\w.]{1,80}) has no vLLM implementation"),
     # a GGUF file's architecture: vLLM's own check (0.6.3+) and transformers' GGUF loader that vLLM calls
     Pattern("GGUF model with architecture", r"GGUF model with architecture (?P<architecture>[\w.-]{1,80}) is not "
             r"supported"),
     Pattern("not supported", r"\A(?:ValueError: )?Architecture (?P<architecture>[\w.-]{1,80}) not supported\b"),
     # the model's config.json lists no architecture at all (a repo vLLM cannot serve as-is): raised by the model
     # registry since 0.10 (a WARNING before), in pydantic's "Value error, ..." under ModelConfig
     Pattern("No model architectures are specified")),
    ("this vLLM does not know {architecture}: upgrade vLLM or serve another model",
     "this vLLM does not know the model's architecture"),
    numbers=("architecture",),
    examples=("ValueError: Model architectures ['Qwen3ForCausalLM'] are not supported for now. Supported "
              "architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM'])",
              "ValueError: GGUF model with architecture olmo2 is not supported yet.",
              "ValueError: Architecture chatglm not supported",
              "Value error, No model architectures are specified [type=value_error, input_value=ArgsKwargs((), "
              "{'model': 'x'}), input_type=ArgsKwargs]"))

TRUST_REMOTE_CODE = Cause(
    "trust_remote_code", K,
    "the model's code lives in its repository and the server was not told to run it (\"set the option "
    "`trust_remote_code=True`\")",
    (Pattern("trust_remote_code=True"),
     Pattern("contains custom code which must be executed"),
     Pattern("trust-remote-code", r"(?:requires|pass|set|add) `?--trust-remote-code`?", rank=SPECIFIC)),
    ("add --trust-remote-code (the model ships its own code)",),
    numbers=("model", "tokenizer_class"),
    also=(Also("model", r"Loading (\S{1,300}) requires you to execute"),
          Also("tokenizer_class", r"Tokenizer class (\w{1,80}) does not exist")),
    examples=("ValueError: Loading /models/x requires you to execute the configuration file in that repo on your "
              "local machine. Make sure you have read the code there to avoid malicious use, then set the option "
              "`trust_remote_code=True` to remove this error.",
              "ValueError: The repository for internlm/internlm2-chat-7b contains custom code which must be executed "
              "to correctly load the model. You can inspect the repository content at "
              "https://hf.co/internlm/internlm2-chat-7b."))

UNRECOGNIZED_ARGUMENT = Cause(
    "unrecognized_argument", K,
    "the server does not know a flag, or a flag's value (argparse: \"error: unrecognized arguments: --x\", \"error: "
    "argument --x: invalid choice\")",
    (Pattern("error: unrecognized arguments:", r"error: unrecognized arguments:\s*(?P<argument>\S{1,200})"),
     Pattern("error: argument ", r"error: argument (?P<argument>[^:]{1,100}):\s*(?P<problem>[^\n]{1,200})"),
     Pattern("error: the following arguments are required", r"required:\s*(?P<argument>\S{1,100})")),
    ("this vLLM does not accept {value} for {argument}: it takes {choices}",
     "this vLLM does not accept {value} for {argument}: use a value its release lists, or a release that has it",
     "this vLLM does not accept {argument}: drop it or use a release that has it",
     "the server rejected its command line"),
    numbers=("argument", "problem", "value", "choices"),
    # argparse's "invalid choice: 'x' (choose from 'a', 'b')": the rejected value and what the release takes (Python
    # 3.12 lists the choices unquoted, and a paste may cut the list: then only the value is said)
    also=(Also("value", r"invalid choice: '([^'\n]{1,100})'"),
          Also("choices", r"\(choose from ([^)\n]{1,400})\)")),
    examples=("vllm: error: unrecognized arguments: --no-such-flag",
              "api_server.py: error: argument --dtype: invalid choice: 'bf17' (choose from 'auto', 'half')"))

ENGINE_ARGS_MISMATCH = Cause(
    "engine_args_mismatch", K,
    "an engine argument this vLLM's engine does not take, or an engine API call it does not know (a launcher built for "
    "another release: \"EngineArgs.__init__() got an unexpected keyword argument 'x'\")",
    # the engine's arguments, or the engine API a launcher calls (Triton's vLLM backend: build_async_engine_client_
    # from_engine_args(stat_loggers=...)), built for another release
    (Pattern("got an unexpected keyword argument",
             r"(?:(?:Engine|Model|Cache|Parallel|Scheduler|Load|Vllm)\w{0,20}(?:Args|Config)\.__init__|"
             r"build_async_engine_client\w{0,40}|from_engine_args|from_vllm_config)\(\) got an "
             r"unexpected keyword argument '(?P<argument>\w{1,100})'"),),
    ("this vLLM's engine does not take {argument}: the launcher and the vLLM release disagree",),
    numbers=("argument",),
    examples=("TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'disable_log_requests'",
              "TypeError: build_async_engine_client_from_engine_args() got an unexpected keyword argument "
              "'stat_loggers'"))

CONFIG_INVALID_BATCHED_TOKENS = Cause(
    "config_invalid_batched_tokens", K,
    "max_num_batched_tokens is below max_model_len with chunked prefill off (or below max_num_seqs)",
    (Pattern("is smaller than max_model_len", r"max_num_batched_tokens\s*\(\s*" + named("batched", INT)
             + r"\s*\) is smaller than max_model_len\s*\(\s*" + named("max_model_len", INT)),
     Pattern("must be greater than or equal to max_num_seqs", r"max_num_batched_tokens\s*\(\s*" + named("batched", INT)
             + r"\s*\) must be greater than or equal to max_num_seqs\s*\(\s*" + named("max_num_seqs", INT))),
    ("max_num_batched_tokens must be at least {max_model_len} (was {batched}), or turn chunked prefill on",
     "max_num_batched_tokens must be at least max_num_seqs {max_num_seqs} (was {batched})",
     "max_num_batched_tokens is too small for this configuration"),
    numbers=("batched", "max_model_len", "max_num_seqs", "least_batched"), derive=_least_batched,
    examples=("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (4096). This effectively "
              "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. "
              "Please increase max_num_batched_tokens or decrease max_model_len.",))

V1_UNSUPPORTED = Cause(
    "v1_unsupported", K,
    "a feature the engine does not support in this mode (\"... is not supported by the V1 Engine\", \"not supported "
    "in V1\")",
    (Pattern("not supported by the V1 Engine", r"\A(?:\w+(?:Error|Exception):\s*)?(?P<feature>.{1,160}?) (?:is |are )?"
             r"not supported by the V1 Engine"),
     Pattern("supported", r"\A(?:\w+(?:Error|Exception):\s*)(?P<feature>.{1,160}?) (?:is |are )?not (?:yet )?supported "
             r"(?:in|on|with|by) (?:vLLM )?V1\b"),
     Pattern("VLLM_USE_V1=1 is not supported", r"VLLM_USE_V1=1 is not supported with (?P<feature>[^.]{1,160})"),
     # a quantization method that does not run split over GPUs (0.6.1: "BitAndBytes quantization with TP or PP is not
     # supported yet.")
     Pattern("is not supported yet", r"(?P<feature>\w{1,40} quantization with (?:TP|PP|tensor|pipeline)[\w ]{0,40}) "
             r"(?:is|are) not supported yet"),
     # a multimodal option given for a model this vLLM reads as text-only (ModelConfig, 0.5.5+: "`limit_mm_per_prompt`
     # is only supported for multimodal models."; a release that predates the model's multimodal support says so too)
     Pattern("supported for multimodal models", r"`?(?P<option>\w{1,60})`? is only supported for multimodal models")),
    ("not supported by this engine: {feature}",
     "{option} is for multimodal models and this vLLM reads the model as text-only: drop it, or use a release that "
     "serves the model as multimodal",
     "a feature this engine does not support"),
    numbers=("feature", "option"),
    examples=("NotImplementedError: VLLM_USE_V1=1 is not supported with --speculative-model.",
              "Value error, `limit_mm_per_prompt` is only supported for multimodal models. [type=value_error, "
              "input_value=ArgsKwargs((), {'model': 'x'}), input_type=ArgsKwargs]",
              "ValueError: LoRA with pooling models is not supported in V1.",
              "ValueError: BitAndBytes quantization with TP or PP is not supported yet."))

ATTENTION_BACKEND_UNSUPPORTED = Cause(
    "attention_backend_unsupported", K,
    "the attention backend asked (or the only one that fits) does not run on this GPU or with this configuration",
    (Pattern("FlashAttention only supports Ampere GPUs or newer"),
     Pattern("is not valid for this configuration", r"Selected backend (?P<backend>\S{1,60}) is not valid for this "
             r"configuration"),
     Pattern("Invalid attention backend", r"Invalid attention backend:?\s*'?(?P<backend>[\w-]{1,60})"),
     Pattern("No valid attention backend"),
     Pattern("attention backend", r"\A\w+(?:Error|Exception):.{0,120}attention backend.{0,80}not supported")),
    ("attention backend {backend} does not fit this GPU or configuration: pick another (VLLM_ATTENTION_BACKEND)",
     "no attention backend fits this GPU or configuration"),
    numbers=("backend", "head_size", "dtype"),
    also=(Also("head_size", r"\bhead_size=(\d{1,5})", int), Also("dtype", r"\bdtype=(?:torch\.)?(\w{1,20})")),
    examples=("RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
              "ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
              "Reason: ['head_size not supported']"))

def _signed_read(message: str, m: re.Match[str]) -> Numbers:
    """A count that can be negative (the token budget left after the draft slots): read with its sign."""
    return {k: int(v) for k, v in m.groupdict().items() if v is not None}


SPECULATIVE_CONFIG_INVALID = Cause(
    "speculative_config_invalid", K,
    "the speculative-decoding setting (MTP, EAGLE, draft model, ngram: the matrix's MTP axis) is refused by this vLLM: "
    "a method it does not know or run, a draft model it does not take, num_speculative_tokens it cannot honour, or "
    "no token budget left once the draft slots are reserved",
    (Pattern("speculative decoding method", r"Unknown speculative decoding method:?\s*'?(?P<method>[\w./-]{1,60})"),
     Pattern("Unsupported speculative method", r"Unsupported speculative method:?\s*'?(?P<method>[\w./-]{1,60})"),
     Pattern("is not supported yet", r"(?:Draft model speculative decoding|Speculative decoding with draft model) "
             r"is not supported yet"),
     Pattern("Expected both speculative_model and num_speculative_tokens",
             r"Expected both speculative_model and num_speculative_tokens to be provided, but found speculative_model="
             r"'?(?P<draft>[^'\s,]{0,200})'? and num_speculative_tokens=(?P<num_speculative_tokens>\d{1,4})"),
     Pattern("num_speculative_tokens", r"num_speculative_tokens (?:must be provided with speculative model|was "
             r"provided but without speculative model)|num_speculative_tokens:?\s*(?P<num_speculative_tokens>\d{1,4}) "
             r"must be divisible by n_predict=(?P<n_predict>\d{1,4})|Expected num_speculative_tokens to be greater "
             r"than zero"),
     Pattern("only supported for", r"Eagle3 is only supported for .{1,300} models"),
     Pattern("does not yet support:", r"does not yet support:\s*(?P<feature>[^\[]{0,80}?speculat[^\[]{0,80}?|"
             r"speculative method '?[\w-]{1,40}'?)\s*(?:\[|$)"),
     Pattern("max_num_scheduled_tokens is set to", r"max_num_scheduled_tokens is set to (?P<scheduled>-?\d{1,9})"
             r"(?: based on the speculative decoding settings)?, which does not allow any tokens to be scheduled",
             read=_signed_read)),
    ("this vLLM refuses the speculative config: {method} (change the MTP/draft setting or the release)",
     "this vLLM refuses the speculative config: {feature}",
     "num_speculative_tokens {num_speculative_tokens} is more than this draft can propose: lower it",
     "the draft slots leave {scheduled} tokens to schedule: raise max_num_batched_tokens or lower "
     "num_speculative_tokens",
     "this vLLM refuses the speculative config (method, draft model or num_speculative_tokens)"),
    numbers=("method", "feature", "draft", "num_speculative_tokens", "n_predict", "scheduled"),
    examples=("ValueError: Unknown speculative decoding method: mlp_speculator",
              "ValueError: Unsupported speculative method: 'medusa'",
              "NotImplementedError: Draft model speculative decoding is not supported yet. Please consider using "
              "other speculative decoding methods such as ngram, medusa, eagle, or mtp.",
              "Value error, num_speculative_tokens must be provided with speculative model unless the draft model "
              "config contains an n_predict parameter. [type=value_error, input_value=ArgsKwargs((), {}), "
              "input_type=ArgsKwargs]",
              "ValueError: max_num_scheduled_tokens is set to -1792 based on the speculative decoding settings, which "
              "does not allow any tokens to be scheduled. Increase max_num_batched_tokens to accommodate the "
              "additional draft token slots, or decrease num_speculative_tokens."))


def _least_lora_rank(numbers: Numbers) -> Numbers:
    """The least --max-lora-rank that loads the adapter: its own rank."""
    rank = numbers.get("rank")
    return {"least_max_lora_rank": rank} if isinstance(rank, int) else {}


LORA_RANK_EXCEEDS_MAX = Cause(
    "lora_rank_exceeds_max", K,
    "a LoRA adapter's rank is above --max-lora-rank (\"LoRA rank 64 is greater than max_lora_rank 16.\"; the "
    "adapters of --lora-modules load at start-up)",
    (Pattern("is greater than max_lora_rank", r"LoRA rank (?P<rank>\d{1,6}) is greater than max_lora_rank "
             r"(?P<max_lora_rank>\d{1,6})"),),
    ("the adapter's rank {rank} is above max_lora_rank {max_lora_rank}: set --max-lora-rank {least_max_lora_rank}",),
    numbers=("rank", "max_lora_rank", "least_max_lora_rank"), derive=_least_lora_rank,
    examples=("ValueError: LoRA rank 64 is greater than max_lora_rank 16.",
              "RuntimeError: Worker failed with error 'LoRA rank 32 is greater than max_lora_rank 16.', please check "
              "the stack trace above for the root cause"))

WEIGHT_LOADING_KEYERROR = Cause(
    "weight_loading_keyerror", K,
    "the checkpoint holds a weight this vLLM's model code does not expect (a checkpoint layout, or a quantization, "
    "the model class does not handle; can be vLLM's own bug)",
    (Pattern("KeyError: '", r"\AKeyError: '(?P<weight>(?:\w{1,80}\.){2,16}\w{0,60}(?:weight|bias|scales?|qzeros|"
             r"g_idx|proj|experts)\w{0,40})'"),),
    ("this vLLM's model code has no weight {weight}: the checkpoint's layout or quantization is not supported",),
    numbers=("weight",),
    examples=("KeyError: 'model.layers.0.mlp.experts.w2_weight'",))

CAUSES: tuple[Cause, ...] = (
    KV_CACHE_TOO_SMALL, NO_CACHE_BLOCKS, AUTOFIT_IMPOSSIBLE, MAX_LEN_EXCEEDS_MODEL, TP_NOT_DIVISIBLE, PP_NOT_DIVISIBLE,
    QUANT_TP_MISALIGNED, NOT_ENOUGH_GPUS, EP_NOT_DIVISIBLE, DTYPE_UNSUPPORTED_GPU, DTYPE_UNSUPPORTED_MODEL,
    QUANTIZATION_UNSUPPORTED_GPU,
    QUANTIZATION_MISMATCH, QUANTIZATION_DTYPE_MISMATCH, QUANT_CONFIG_MISSING, UNSUPPORTED_ARCHITECTURE,
    TRUST_REMOTE_CODE, UNRECOGNIZED_ARGUMENT, ENGINE_ARGS_MISMATCH, CONFIG_INVALID_BATCHED_TOKENS, V1_UNSUPPORTED,
    ATTENTION_BACKEND_UNSUPPORTED, WEIGHT_LOADING_KEYERROR, SPECULATIVE_CONFIG_INVALID, LORA_RANK_EXCEEDS_MAX)
