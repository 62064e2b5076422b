"""Causes of kind crash: the server died and the log says why only in general terms (a wrapper), in a model's own
code, or in an exception the catalogue does not know. `crashed`, with the line that shows the most."""

from __future__ import annotations

from .model import ANNOUNCES, GENERIC, WEAK, Cause, CauseKind, Pattern
from .shapes import EXC

K = CauseKind.crash

ENGINE_CORE_FAILED_ROOT_CAUSE_NOT_SHOWN = Cause(
    "engine_core_failed_root_cause_not_shown", K,
    "only the API server's wrapper is in the log (\"Engine core initialization failed. See root cause above\"): the "
    "root cause is not in the log, the engine core's output was not captured",
    (Pattern("Engine core initialization failed", rank=GENERIC),
     Pattern("Engine process failed to start", rank=GENERIC),
     Pattern("Failed core proc", rank=GENERIC),
     # the engine core's own wrapper for a worker that died (0.9+, multiproc_executor.py): the worker's cause is above
     # it when its output was captured
     Pattern("WorkerProc initialization failed", rank=GENERIC),
     # a launcher that hid vLLM's output (InstructLab: "vLLM failed to start.  Retry with --enable-serving-output")
     Pattern("Retry with --enable-serving-output", rank=GENERIC),
     # the engine core's or a worker's own line before its traceback (0.8.5-0.34: logger.exception("EngineCore failed
     # to start.")): the exception that follows is the cause; a paste cut before it holds no cause
     Pattern("failed to start.", r"\b(?:EngineCore|WorkerProc) failed to start\.", rank=ANNOUNCES, stops=False)),
    ("the root cause is not in the log: the engine core's output was not captured (keep the engine's stderr)",),
    aliases=("engine_init_failed",), stops=True,
    examples=("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
              "RuntimeError: Engine process failed to start. See stack trace for the root cause.",
              "Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
              "trace for root cause."))

MODEL_CODE_ERROR = Cause(
    "model_code_error", K,
    "an exception raised inside a model's implementation (vllm/model_executor/models/…): a bug or an unsupported "
    "variant of the model, told by the traceback's frames (decide.py)",
    # the model's code reading an attribute the checkpoint's config class lacks: the config names the model's code
    # even where the paste lost the frames
    (Pattern("AttributeError: '", r"\A(?P<exception>AttributeError): '(?P<config>\w{1,80}Config)' "
             r"object has no attribute '(?P<attribute>\w{1,80})'"),
     # one of vLLM's own layers lacking what a quantization method reads (0.8.3's 'ColumnParallelLinear' object has
     # no attribute 'input_scale'); V0's MQ engine logs the bare message, class-less, before its traceback
     Pattern("' object has no attribute '", r"\A(?:(?P<exception>AttributeError): )?'(?P<layer>\w{0,60}"
             r"(?:Linear|MoE|Embedding|Attention|LMHead))' object has no attribute '(?P<attribute>\w{1,80})'")),
    ("{exception} in the model's code ({where}): a vLLM bug or an unsupported variant of this model",
     "the model's code reads {attribute}, which this checkpoint's {config} lacks: a variant of the model this vLLM "
     "does not support (or a bug)",
     "vLLM's {layer} layer has no {attribute}: this vLLM's code for the model's layers or its quantization does not "
     "fit this checkpoint (a vLLM bug: try another release)",
         "an exception in the model's code: a vLLM bug or an unsupported variant of this model"),
    numbers=("exception", "message", "where", "config", "layer", "attribute"),
    examples=("AttributeError: 'LlavaConfig' object has no attribute 'vision_config'",
              "'ColumnParallelLinear' object has no attribute 'input_scale'"))

#: The faults of a kernel's launch or run, as CUDA (and HIP) word them after "CUDA error: ".
_KERNEL_FAULT = (r"(?:CUDA|HIP) error: (?P<error>invalid configuration argument|an illegal memory access was "
                 r"encountered|an illegal instruction was encountered|misaligned address|unspecified launch failure|"
                 r"device-side assert triggered|too many resources requested for launch)\b")

CUDA_KERNEL_ERROR = Cause(
    "cuda_kernel_error", K,
    "a GPU kernel failed to launch or faulted (\"CUDA error: invalid configuration argument\", \"an illegal memory "
    "access was encountered\"): a bug in vLLM or in a kernel for this model, shape or GPU, not the machine",
    tuple(Pattern(f"{api} error: ", EXC + _KERNEL_FAULT) for api in ("CUDA", "HIP")),
    ("a GPU kernel failed ({error}): a vLLM or kernel bug for this model or shape (try --enforce-eager or another "
     "attention backend)",),
    numbers=("error",),
    examples=("RuntimeError: CUDA error: an illegal memory access was encountered",
              "CUDA error: invalid configuration argument"))

UNCAUGHT_EXCEPTION = Cause(
    "uncaught_exception", K,
    "the boot ended on an exception the catalogue does not know: the line names it (type and message, or only the "
    "message where a launcher logs no more: KServe's \"Failed to start model server: <message>\")",
    # weak: a cause the launcher's line states (a refusal's message, the engine's wrapper) is matched first, being
    # earlier in the catalogue, and any line above it that names a cause wins
    (Pattern("Failed to start model server", r"Failed to start model server: (?P<message>\S.{0,499})", rank=WEAK),),
    ("the boot ended on {exception}: {message}",
     "the launcher logged the exception's message only (no type, no traceback): {message}",
     "the boot ended on an exception the catalogue does not know"),
    numbers=("exception", "message"),
    examples=("2024-07-01 07:28:04.488 1 kserve ERROR [__main__.py:<module>():254] Failed to start model server: "
              "integer division or modulo by zero",))

CAUSES: tuple[Cause, ...] = (ENGINE_CORE_FAILED_ROOT_CAUSE_NOT_SHOWN, CUDA_KERNEL_ERROR, MODEL_CODE_ERROR,
                             UNCAUGHT_EXCEPTION)
