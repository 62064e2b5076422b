"""The decisive line of a whole log: the root cause, not the last frame.

Multi-process logs interleave the API server, the engine core, the workers and Ray's actors, and end with a generic
wrapper. The first line of the highest rank decides (model.SPECIFIC > WEAK > GENERIC), whichever process said it; a
CUDA OOM takes its phase from the frames of its own traceback (per process: tracebacks interleave too); with only the
wrapper, the finding says the root cause is not in the log; with no cause at all, the last exception line is named.
"""

from __future__ import annotations

import re

from . import BY_ID, GENERIC_CAUSE, UNCAUGHT
from .crash import MODEL_CODE_ERROR
from .match import ANY_FRAME_NEEDLE, TRACEBACK_START, Match, match
from .model import GENERIC, WEAK, Cause, Finding, Numbers
from .resource import (
    CUDA_OOM_GRAPH_CAPTURE,
    CUDA_OOM_KV_ALLOCATION,
    CUDA_OOM_PROFILING,
    CUDA_OOM_SAMPLER_WARMUP,
    CUDA_OOM_UNKNOWN,
    CUDA_OOM_WEIGHTS,
)

MAX_LINE = 2000
MAX_FRAMES = 64
MAX_PROCESSES = 64
#: How many lines after the decisive one may still state its figures: a message wrapped by a terminal or re-wrapped
#: by the reporter, an OSError whose text runs over lines ("You are trying to access a gated repo.\nMake sure to have
#: access to it at https://huggingface.co/x/y.\n401 Client Error.").
CONTINUATION_LINES = 4
_FRAME = re.compile(r'\AFile "(?P<file>[^"]{1,500})", line \d{1,9}, in (?P<func>[\w<>.]{1,200})'
                    # IPython/Jupyter: "File ~/x/cache_engine.py:49, in CacheEngine.__init__(...)", or as a markdown
                    # link with the function lost ("File [~/x/cache_engine.py:49](http://...)")
                    r'|\AFile \[?(?P<nb_file>[^\s\[\]():,]{1,500}\.py):\d{1,9}(?:\]\([^)\s]{0,500}\)?)?'
                    r'(?:,? in (?P<nb_func>[\w<>.]{1,200}))?')
#: A method a V0 worker names as it relays an exception ("Exception in worker VllmWorkerProcess while processing method
#: determine_num_available_blocks: CUDA out of memory. ..."): a frame of its own.
_RELAYED = re.compile(r"while processing method (?P<func>\w{1,200})")
_EXCEPTION = re.compile(r"\A(?P<type>(?:[A-Za-z_][\w.]{0,100})?(?:Error|Exception|Exit|Interrupt))"
                        r"(?::\s*(?P<message>.*))?\Z")

#: The functions whose frames say which phase a CUDA OOM happened in (or the module, for a notebook's frame that lost
#: its function), checked in this order (a graph capture runs a dummy forward pass, which the profiling run does too:
#: the deeper phase's own function wins).
OOM_FRAMES: tuple[tuple[Cause, frozenset[str]], ...] = (
    (CUDA_OOM_GRAPH_CAPTURE, frozenset({"capture_model", "_capture_cudagraphs", "capture", "_warmup_and_capture",
                                        "capture_graphs", "capture_begin", "capture_end"})),
    (CUDA_OOM_SAMPLER_WARMUP, frozenset({"_dummy_sampler_run"})),
    (CUDA_OOM_KV_ALLOCATION, frozenset({"cache_engine.py", "initialize_kv_cache", "_allocate_kv_cache",
                                        "allocate_kv_cache",
                                        "_allocate_kv_cache_tensors", "initialize_kv_cache_tensors",
                                        "_init_cache_engine", "initialize_cache", "_reshape_kv_cache_tensors",
                                        "_init_cache"})),
    (CUDA_OOM_PROFILING, frozenset({"profile_run", "determine_available_memory", "determine_num_available_blocks",
                                    "_dummy_run"})),
    (CUDA_OOM_WEIGHTS, frozenset({"load_model", "load_weights", "get_model", "initialize_model", "_initialize_model",
                                  "weight_loader", "process_weights_after_loading", "create_weights",
                                  "gptq_marlin_repack", "awq_marlin_repack", "gptq_marlin_moe_repack"})),
)
#: The log's own phase (harness.logfacts.timeline.PHASES) where no frame tells it.
OOM_LOG_PHASES: dict[str, Cause] = {
    "weight loading": CUDA_OOM_WEIGHTS,
    "start-up and weight loading": CUDA_OOM_WEIGHTS,  # a log without "Starting to load model": mostly the weights
    "CUDA-graph capture": CUDA_OOM_GRAPH_CAPTURE,
}
MODEL_CODE = "/model_executor/models/"
#: A traceback's source line: a cause's words in the code that raised it, before the exception's own line.
SOURCE_LINE = "raise "
#: The files there that are vLLM's machinery, not a model's code: the registry inspects architectures in a subprocess
#: (its failure is model_inspection_failed, said on its own line).
NOT_MODEL_CODE = ("/registry.py",)
#: A frame's function while its module is being imported: a model file's frame there only imports what raised (a
#: kernel package failing at import, as lightop without its DTK on a Hygon DCU), so the model's code did not fail.
IMPORT_FRAME = "<module>"


def oom_phase(frames: list[tuple[str, str]]) -> Cause | None:
    """The phase the frames name: by a function's name, or (a frame whose function was lost) by the V0 module that
    does only that (worker/cache_engine.py allocates the KV cache)."""
    funcs = {func.rpartition(".")[2] for _, func in frames} | {file.rpartition("/")[2] for file, _ in frames}
    for cause, names in OOM_FRAMES:
        if funcs & names:
            return cause
    return None


def finding(cause: Cause, line: str, numbers: Numbers, process: str = "") -> Finding:
    return Finding(id=cause.id, kind=cause.kind, outcome=cause.outcome, line=line[:MAX_LINE], numbers=numbers,
                   hint=cause.hint(numbers), process=process)


def exception_numbers(line: str) -> Numbers | None:
    """`ValueError: boom` → {exception: ValueError, message: boom}; None when the line is not an exception's."""
    m = _EXCEPTION.match(line)
    if m is None:
        return None
    out: Numbers = {"exception": m.group("type")}
    if m.group("message"):
        out["message"] = m.group("message")[:500]
    return out


class CauseReader:
    """Fed every cleaned message (with its process prefix and level), in log order; `finding` says the root cause."""

    def __init__(self) -> None:
        self._best: Match | None = None
        self._best_process = ""
        self._frames: dict[str, list[tuple[str, str]]] = {}
        self._code_error: tuple[Numbers, str, str] | None = None  # a model's own code raised: numbers, line, process
        self._continuation = 0

    @property
    def best(self) -> Match | None:
        return self._best

    @property
    def continuing(self) -> bool:
        """Whether the next line may still state the decisive cause's figures (the parser reads it whatever it
        holds)."""
        return self._continuation > 0

    def feed(self, process: str, message: str, quiet: bool) -> Match | None:
        """Take one message; the Match it is, if any (refined: an OOM's phase from its traceback's frames)."""
        if not quiet:
            if message.startswith(TRACEBACK_START):
                self._frames_of(process).clear()
                return None
            if message.startswith(ANY_FRAME_NEEDLE):
                if (m := _FRAME.match(message)) is not None:
                    if len(frames := self._frames_of(process)) < MAX_FRAMES:
                        frames.append((m.group("file") or m.group("nb_file"),
                                       m.group("func") or m.group("nb_func") or ""))
                    return None
        found = match(message, quiet)
        if self._continuation and not quiet and process in (self._best_process, "") and (
                found is None or not self._decides(found)):
            self._continue(message)
        if found is None:
            if not quiet and self._code_error is None and (numbers := exception_numbers(message)):
                where = [f for f, func in self._frames.get(process, [])
                         if MODEL_CODE in f and not f.endswith(NOT_MODEL_CODE) and func != IMPORT_FRAME]
                if where:
                    numbers["where"] = where[-1].rpartition(MODEL_CODE)[2]
                    self._code_error = (numbers, message, process)
            return None
        if found.cause is CUDA_OOM_UNKNOWN and (phase := oom_phase(self._oom_frames(process, message))) is not None:
            found = Match(phase, found.rank, found.numbers, found.line, found.stops)
        if self._decides(found):
            self._best, self._best_process = found, process
            self._continuation = CONTINUATION_LINES
        return found

    def _continue(self, message: str) -> None:
        """A line after the decisive one that no cause claims: the figures of the decisive cause it states."""
        self._continuation -= 1
        best = self._best
        if best is None:
            return
        for also in best.cause.also:
            if also.name not in best.numbers and (value := also.read(message)) is not None:
                best.numbers[also.name] = value

    def _decides(self, found: Match) -> bool:
        """Whether `found` becomes the decisive line: the first of the highest rank, or its exception's own line."""
        return self._best is None or found.rank > self._best.rank or self._states_better(found)

    def _states_better(self, found: Match) -> bool:
        """The exception line after its own traceback's source line (`raise ValueError("No available memory ..."`):
        the same cause, said with the numbers and the whole message."""
        best = self._best
        return (best is not None and found.cause is best.cause and found.rank == best.rank
                and best.line.startswith(SOURCE_LINE) and not found.line.startswith(SOURCE_LINE))

    def _oom_frames(self, process: str, message: str) -> list[tuple[str, str]]:
        frames = self._frames.get(process, [])
        if (relayed := _RELAYED.search(message)) is not None:
            return [*frames, ("", relayed.group("func"))]
        return frames

    def _frames_of(self, process: str) -> list[tuple[str, str]]:
        frames = self._frames.get(process)
        if frames is None:
            if len(self._frames) >= MAX_PROCESSES:
                self._frames.clear()
            frames = self._frames[process] = []
        return frames

    def finding(self, error_line: str | None = None, log_phase: str | None = None) -> Finding | None:
        """The root cause: the first line of the highest rank; a model's own code raising beats a generic wrapper
        and an exception the catalogue does not know; that exception beats the wrapper alone; the wrapper alone says
        the root cause is not in the log. `error_line`: the log's last exception line (the parser keeps it);
        `log_phase`: the phase the log stopped in, for an OOM no frame placed."""
        best = self._best
        if best is not None and best.rank > GENERIC:
            cause = best.cause
            if cause is CUDA_OOM_UNKNOWN and log_phase in OOM_LOG_PHASES:
                cause = OOM_LOG_PHASES[log_phase]
            if best.rank > WEAK or self._code_error is None:
                return finding(cause, best.line, best.numbers, self._best_process)
        if self._code_error is not None:
            numbers, line, process = self._code_error
            return finding(MODEL_CODE_ERROR, line, numbers, process)
        if error_line and (raised := exception_numbers(error_line)) is not None:
            return finding(UNCAUGHT, error_line, raised)
        if best is not None:
            return finding(GENERIC_CAUSE, best.line, best.numbers, self._best_process)
        return None


def by_id(cause_id: str) -> Cause:
    return BY_ID[cause_id]
