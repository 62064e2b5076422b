"""The boot's phases as its log tells them: which line ends which phase (a milestone), and the durations vLLM prints.

Every wording from vLLM 0.6 (the V0 engine) to 0.34, one compiled regex per line shape, anchored on the whole message
so a line that merely looks alike (a prompt echo, a traceback) yields nothing. Figures printed once per rank keep the
slowest rank (when the phase ended for the engine); figures printed for the target and then a draft model in one
process add up, and a cumulative total ("torch.compile takes X s in total") keeps its last line.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from enum import Enum

from . import patterns as p
from .timeline import RANK, Durations, Milestone, Milestones

NUM = p.NUM
#: Days before each month in a leap year (a log's MM-DD has no year; 02-29 must parse).
_MONTH_START = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)


def _c(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


# --- phase lines (messages after split_line) ------------------------------------------------------------------------
# Format strings as the released sources have them (vllm/…, 0.6.0 … 0.34.0); the compile lines of 0.32+ may start with
# a model tag ("[backbone] ", "[eagle_head] "), which TAG allows.
TAG = r"\A(?:\[[^\]\n]{1,60}\]\s*)?"

# Where weight loading begins, in the worker: "Starting to load model %s..." (every model runner 0.6-0.34: V0's, V1's
# GPU/CPU/TPU/XPU), the V2 model runner's "Loading model from scratch..." (0.30+). Before it the engine starts its
# workers (their processes, imports, device and distributed init): not weight loading.
LOAD_START = _c(r"\A(?:Starting to load model\b|Loading model from scratch\b)")
# model_loader (0.8.5+): "Loading weights took %.2f seconds"
WEIGHTS = _c(r"\ALoading weights took\s*" + NUM + r"\s*seconds?")
# V1 model runner: "Model loading took %.4f GiB and %.6f seconds" (0.8.5–0.12), "Model loading took %s GiB and %.6f
# seconds" (0.15+), "Model loading took %s GiB memory and %.6f seconds" (0.12+, gpu_model_runner), "Model loading took
# %.4f GB and %.6f seconds" (0.8.0-0.8.4, V0 and V1: bytes / 2**30, a GiB figure)
MODEL_LOAD = _c(r"\AModel loading took\s*" + NUM + r"\s*Gi?B(?: memory)? and\s*" + NUM + r"\s*seconds?")
# V0 model runner: "Loading model weights took %.4f GB" (0.6–0.8, a GiB figure), "… %.4f GiB" (XPU)
V0_WEIGHTS = p.MODEL_WEIGHTS_V0
# compilation/backends.py: "Dynamo bytecode transform time: %.2f s" (0.6.6+)
DYNAMO = _c(TAG + r"Dynamo bytecode transform time:\s*" + NUM + r"\s*s")
# "Compiling a graph for general shape / shape %s / dynamic shape / compile range %s takes %.2f s"
COMPILE_GRAPH = _c(TAG + r"Compiling a graph for .{0,200}? takes\s*" + NUM + r"\s*s")
# monitor.py: "torch.compile takes %.2f s in total" (0.6.6–0.17: a process's running total, printed again, larger,
# after a draft model compiled), "torch.compile took %.2f s in total" and
# "torch.compile and initial profiling/warmup run together took %.2f s in total" (0.19+: one model's own time, tagged
# "[backbone] " / "[eagle_head] " from 0.32)
COMPILE_TOTAL = _c(TAG + r"torch\.compile (?:and initial profiling/warmup run together )?(takes|took)\s*" + NUM
                   + r"\s*s in total")
# The engine's own total, when no monitor line came: "init engine (...) took %.2f s (compilation: %.2f s)" (0.22+)
ENGINE_COMPILATION = _c(r"\(compilation:\s*" + NUM + r"\s*s\b")
# A compiled graph from the cache: "Directly load the compiled graph for shape %s from the cache" (0.7), "Directly load
# the compiled graph(s) for shape %s / dynamic shape / compile range %s from the cache, took %.3f s" (0.8.5+), "Directly
# load AOT compilation from path %s" (0.12+; a failed load says so next); 0.6.6: "Directly lookup the graph for shape %s
# from the cache"
CACHE_LOAD = _c(TAG + r"Directly (?:load (?:the compiled graph(?:\(s\))? .{0,200}?from the cache|AOT compilation from "
                      r"path)|lookup the graph for .{0,200}?from the cache)")
CACHE_LOAD_FAILED = _c(TAG + r"Compiling model again due to a load failure from .{0,500}?, reason: (.{1,300})")
# The end of compilation where no duration is printed: "saved AOT compiled function to %s" (0.15+), and the CPU model
# runner's "Warming up done." after "Warming up model for the compilation..." (0.9.2+)
COMPILE_DONE = _c(TAG + r"(?:saved AOT compiled function to\b|Warming up done\.?\Z)")
# Where compilation begins, so the weights are in even when no line said so (`--load-format dummy` prints none): the
# CPU model runner's "Warming up model for the compilation..." (0.9.2+), the monitor's "Starting torch.compile" (0.32+)
COMPILE_START = _c(TAG + r"(?:Warming up model for the compilation|Starting torch\.compile)\b")
# Graph capture: "Graph capturing finished in %.0f secs." (0.6.0), "… in %.0f secs, took %.2f GiB" (0.6.6+), "Encoder
# graph capturing finished in %.0f secs, took %.2f GiB (%d graphs)" (0.34, a second capture in the same process)
GRAPHS = _c(r"\A(?:Encoder g|G)raph capturing finished in\s*" + NUM + r"\s*secs?(?:, took\s*" + NUM + r"\s*GiB)?")
# The V2 model runner (0.30+) captures once while profiling memory, before the KV cache is sized, and once for real:
# the first capture's time counts, its memory does not (the same graphs), and it does not end the capture phase.
# V0 worker: "Memory profiling takes %.2f seconds" (0.6.6+, first line of a multi-line message)
PROFILING = _c(r"\AMemory profiling takes\s*" + NUM + r"\s*seconds?")
# V1 engine core, and V0 (LLMEngine, in the API server's process): the engine's first words.
ENGINE_FIRST = _c(r"\A(?:Initializing an? (?:V[01] )?LLM engine\b|Waiting for init message from front-end)")
# The KV cache is sized, after the engine checked that one request fits (a KV refusal comes before these): the
# engine core's "GPU KV cache size: N tokens" (V1; "CPU"/"XPU"/"GPU + host" …) and the concurrency line, and V0's
# "# GPU blocks: N, # CPU blocks: M" / "# cpu blocks: N". The worker's "Available KV cache memory" comes before the
# check, so it does not end the phase.
KV_SIZED = _c(r"\A(?:[A-Z][\w +]{0,20} KV cache size:\s*\d|Maximum concurrency for|#\s*\w{2,10} blocks:)")
ENFORCE_EAGER = _c(r"\AEnforce eager set|\benforce_eager=True\b")

#: Substrings one of which every phase line holds: a line with none of them cannot match a pattern here, and the
#: parser's pre-check (precheck.py, with the fact patterns' and the causes' needles) drops it before any regex runs.
KEYWORDS: tuple[str, ...] = (
    "took", "takes", "Starting to load model", "Loading model from scratch", "Dynamo bytecode", "Directly load",
    "Initializing a", "Waiting for init message", "load failure",
    "Directly lookup", "saved AOT", "Warming up", "Starting torch.compile",
    "KV cache size", "Maximum concurrency", "blocks:", "Enforce eager",
)


class Combine(Enum):
    """How one process's repeated figure adds up."""

    SUM = "sum"  # the target's and the draft model's weights, compiles, captures
    LAST = "last"  # a cumulative total


_COMBINE: dict[str, Combine] = {
    "weights_load_s": Combine.SUM, "model_load_s": Combine.SUM, "model_load_gib": Combine.SUM,
    "dynamo_transform_s": Combine.SUM, "compile_graphs_s": Combine.SUM, "compile_total_s": Combine.LAST,
    "compile_models_s": Combine.SUM,
    "graph_capture_s": Combine.SUM, "graph_capture_gib": Combine.SUM, "profiling_capture_gib": Combine.SUM,
    "profiling_s": Combine.SUM,
    "engine_init_s": Combine.LAST, "engine_compilation_s": Combine.LAST,
}


def _clock(stamp: str) -> int | None:
    """A header time "MM-DD HH:MM:SS[.fff]" as seconds into a leap year; None when it is not one. By position, not
    strptime: this runs for every line the parser reads, and it must be cheap."""
    try:
        date, clock = stamp.split(None, 1)
        month = int(date[0:2])
        if not 1 <= month <= 12:
            return None
        return ((_MONTH_START[month - 1] + int(date[3:5]) - 1) * 86400 + int(clock[0:2]) * 3600
                + int(clock[3:5]) * 60 + int(clock[6:8]))
    except (ValueError, IndexError):
        return None


class PhaseReader:
    """Feed it cleaned messages with their process prefix and header time; read `take_milestones()`, `durations` and,
    for a saved log, `log_milestones` (seconds measured on the log's own timestamps)."""

    def __init__(self) -> None:
        self._figures: dict[str, dict[str, float]] = {}  # figure → process → value
        self._cache_hit = False
        self._compiled = False
        self._cache_failure: str | None = None
        self.eager: bool | None = None
        self._reached: dict[Milestone, float | None] = {}  # milestone → log time (s) of its line, when stamped
        self._new: list[Milestone] = []
        self._origin: int | None = None  # seconds into a leap year of the log's first timestamp
        self._last_stamp: float | None = None

    # --- time on the log's own clock ---------------------------------------------------------------------------

    def stamp(self, stamp: str | None) -> None:
        """A header time "MM-DD HH:MM:SS[.fff]": the first one is the log's zero; later lines carry on from it."""
        if stamp is None:
            return
        if self._origin is None:
            self._origin = _clock(stamp)
        seconds = self.seconds_of(stamp)
        if seconds is None:
            return
        if self._last_stamp is None or seconds >= self._last_stamp:
            self._last_stamp = seconds

    @property
    def has_origin(self) -> bool:
        return self._origin is not None

    # --- milestones --------------------------------------------------------------------------------------------

    def mark(self, milestone: Milestone) -> None:
        """The line just read ends `milestone`'s phase; a later line may move it (the last rank) until a later
        milestone is reached."""
        if any(RANK[m] > RANK[milestone] for m in self._reached):
            return
        self._reached[milestone] = self._last_stamp
        self._new.append(milestone)

    def take_milestones(self) -> list[Milestone]:
        """The milestones marked since the last call (the watch times them on its own clock)."""
        new, self._new = self._new, []
        return new

    def reached(self, milestone: Milestone) -> bool:
        return milestone in self._reached

    def log_milestones(self) -> Milestones:
        """Seconds since the log's first timestamp; a line without one takes the last before it (None when none
        was). The first line is at the log's zero when only a later line carries a time."""
        at = {m.value: t for m, t in self._reached.items()}
        if Milestone.first_line in self._reached and at["first_line"] is None and self._origin is not None:
            at["first_line"] = 0.0
        return Milestones(**at)

    def seconds_of(self, stamp: str | None) -> float | None:
        """A header time on the log's clock (seconds since its zero), changing nothing; None before the zero is known
        or when `stamp` is no header time."""
        t = _clock(stamp) if stamp is not None else None
        if t is None or self._origin is None:
            return None
        seconds = float(t - self._origin)
        if seconds < -180 * 86400:  # the log crossed a new year
            seconds += 366 * 86400
        return seconds

    def log_elapsed(self) -> float | None:
        return self._last_stamp

    # --- one message -------------------------------------------------------------------------------------------

    def feed(self, process: str, msg: str) -> None:
        for needle, read in _READERS:
            if needle in msg:
                read(self, process, msg)

    def _figure(self, name: str, process: str, value: float | None) -> None:
        if value is None:
            return
        per = self._figures.setdefault(name, {})
        if _COMBINE[name] is Combine.SUM and process in per:
            per[process] += value
        else:
            per[process] = value

    def _weights(self, process: str, msg: str) -> None:
        if m := WEIGHTS.search(msg):
            self._figure("weights_load_s", process, p.to_float(m.group(1)))
            self.mark(Milestone.weights_loaded)
        elif m := MODEL_LOAD.search(msg):
            self._figure("model_load_gib", process, p.to_float(m.group(1)))
            self._figure("model_load_s", process, p.to_float(m.group(2)))
            self.mark(Milestone.weights_loaded)
        elif m := V0_WEIGHTS.search(msg):
            self._figure("model_load_gib", process, p.to_float(m.group(1)))
            self.mark(Milestone.weights_loaded)

    def _load_start(self, process: str, msg: str) -> None:
        if LOAD_START.search(msg):
            self.mark(Milestone.loading_started)  # a draft model's, after the weights are in, marks nothing

    def _compile(self, process: str, msg: str) -> None:
        if m := DYNAMO.search(msg):
            self._figure("dynamo_transform_s", process, p.to_float(m.group(1)))
        elif m := COMPILE_TOTAL.search(msg):
            cumulative = m.group(1) == "takes"
            self._figure("compile_total_s" if cumulative else "compile_models_s", process, p.to_float(m.group(2)))
            self._compiled = True
            self.mark(Milestone.compiled)
        elif m := COMPILE_GRAPH.search(msg):
            self._figure("compile_graphs_s", process, p.to_float(m.group(1)))
            self._compiled = True
            self.mark(Milestone.compiled)
        elif CACHE_LOAD.search(msg):
            self._cache_hit = self._compiled = True
            self.mark(Milestone.compiled)
        elif m := CACHE_LOAD_FAILED.search(msg):
            self._cache_hit, self._compiled = False, True  # it compiles again: the cache did not serve
            self._cache_failure = m.group(1)
        elif COMPILE_DONE.search(msg):
            self._compiled = True
            self.mark(Milestone.compiled)
        elif COMPILE_START.search(msg) and not self.reached(Milestone.weights_loaded):
            self.mark(Milestone.weights_loaded)

    def _graphs(self, process: str, msg: str) -> None:
        if m := GRAPHS.search(msg):
            self._figure("graph_capture_s", process, p.to_float(m.group(1)))
            if self.reached(Milestone.kv_sized):
                self._figure("graph_capture_gib", process, p.to_float(m.group(2)))
                self.mark(Milestone.graphs_captured)
            else:
                self._figure("profiling_capture_gib", process, p.to_float(m.group(2)))

    def _profiling(self, process: str, msg: str) -> None:
        if m := PROFILING.search(msg):
            self._figure("profiling_s", process, p.to_float(m.group(1)))

    def _engine_init(self, process: str, msg: str) -> None:
        if m := p.ENGINE_INIT.search(msg):
            self._figure("engine_init_s", process, p.to_float(m.group(1)))
            if c := ENGINE_COMPILATION.search(msg, m.end()):
                self._figure("engine_compilation_s", process, p.to_float(c.group(1)))
            self.mark(Milestone.engine_ready)

    def _engine_first(self, process: str, msg: str) -> None:
        if ENGINE_FIRST.search(msg):
            if not self.reached(Milestone.engine_started):
                self.mark(Milestone.engine_started)
            if self.eager is None and "enforce_eager=" in msg:
                self.eager = "enforce_eager=True" in msg

    def _eager(self, process: str, msg: str) -> None:
        if msg.startswith("Enforce eager set"):
            self.eager = True

    def _kv_sized(self, process: str, msg: str) -> None:
        if KV_SIZED.search(msg):
            self.mark(Milestone.kv_sized)

    @property
    def durations(self) -> Durations:
        def slowest(name: str) -> float | None:
            per = self._figures.get(name)
            return round(max(per.values()), 6) if per else None

        total = _first_known(slowest("compile_total_s"), slowest("compile_models_s"), slowest("engine_compilation_s"),
                             slowest("compile_graphs_s"))
        return Durations(
            weights_load_s=slowest("weights_load_s"), model_load_s=slowest("model_load_s"),
            model_load_gib=slowest("model_load_gib"), dynamo_transform_s=slowest("dynamo_transform_s"),
            compile_s=total,
            compile_cache_hit=self._cache_hit if self._compiled else None,
            compile_cache_failure=self._cache_failure,
            graph_capture_s=slowest("graph_capture_s"),
            graph_capture_gib=_first_known(slowest("graph_capture_gib"), slowest("profiling_capture_gib")),
            profiling_s=slowest("profiling_s"), engine_init_s=slowest("engine_init_s"),
        )


def _first_known(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


_READERS: tuple[tuple[str, Callable[[PhaseReader, str, str], None]], ...] = (
    ("Starting to load model", PhaseReader._load_start),
    ("Loading model from scratch", PhaseReader._load_start),
    ("weights took", PhaseReader._weights),
    ("Model loading took", PhaseReader._weights),
    ("Dynamo bytecode", PhaseReader._compile),
    ("torch.compile ", PhaseReader._compile),
    ("Compiling a graph", PhaseReader._compile),
    ("Directly load", PhaseReader._compile),
    ("Directly lookup", PhaseReader._compile),
    ("load failure", PhaseReader._compile),
    ("saved AOT", PhaseReader._compile),
    ("Warming up", PhaseReader._compile),
    ("Starting torch.compile", PhaseReader._compile),
    ("raph capturing finished", PhaseReader._graphs),
    ("Memory profiling takes", PhaseReader._profiling),
    ("init engine", PhaseReader._engine_init),
    ("Initializing a", PhaseReader._engine_first),
    ("Waiting for init message", PhaseReader._engine_first),
    ("Enforce eager", PhaseReader._eager),
    ("KV cache size", PhaseReader._kv_sized),
    ("Maximum concurrency", PhaseReader._kv_sized),
    ("blocks:", PhaseReader._kv_sized),
)
