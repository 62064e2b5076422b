"""Stream a vLLM boot log into ``LogFacts``, one physical line at a time.

A watcher feeds the server's output as it arrives and acts on the returned ``Signal`` (a refusal line ends the wait
seconds before the process exits; a readiness line says to poll /health), so ``feed`` must be cheap on the thousands of
lines that say nothing, and must never raise: a parser crash would turn a boot's verdict into a harness error.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from harness.verdict.causes.decide import CauseReader
from harness.verdict.causes.match import AFTER_READY, STOP_NEEDLES, match

from . import patterns as p
from . import phases
from .classify import keep_first_specific, refusal_of
from .model import MESSAGE_MAX_CHARS, KvFacts, LogFacts, Refusal, Signal
from .precheck import worth_reading
from .text import MAX_LINE_BYTES, MAX_LINE_CHARS, QUIET_LEVELS, segments, split_line
from .timeline import Milestone, Timeline, phase_at, skipped

MAX_READY_LINES = 32
"""Readiness lines kept: a server logs a handful; the cap only bounds memory on a pathological log."""

_SIGNAL_RANK = {Signal.NONE: 0, Signal.READY: 1, Signal.REFUSAL: 2}
#: Lines read in full while the log has shown no timestamp yet (its zero for `facts`); past them a log without any
#: is not searched for one line by line.
_STAMP_SEARCH_LINES = 200
#: The lines the pre-check passed over that are kept for where the log ends (its last timestamp): more than a crash's
#: unstamped tail (a traceback, the resource tracker's warnings) after its last stamped line.
UNREAD_TAIL = 256
#: Of each, its head: where a timestamp is (behind a paste's or a process's prefix); the tail costs ≤ 128 KiB.
UNREAD_HEAD = 512


def _coerce(line: Any) -> str:
    if isinstance(line, str):
        return line
    if isinstance(line, (bytes, bytearray, memoryview)):
        return bytes(line[: MAX_LINE_BYTES]).decode("utf-8", errors="replace")
    return "" if line is None else str(line)


MAX_ERROR_CHARS = 1000

#: Past the parser's bound, what a line must hold to be read at all: a refusal's needle or a readiness line's words
#: (always read: they decide the verdict) ...
_DECISIVE = tuple(dict.fromkeys((*STOP_NEEDLES, "Starting vLLM", "Application startup complete")))
#: ... or the words of an exception's line (a crash's "last error") or of a KV figure (what the record is for): read
#: for the first SKIM_TELLING lines past the bound only, so a flood of them costs no more than any other.
_TELLING = ("Error: ", "Exception: ", "KV cache", "KV Cache", "blocks:", "Maximum concurrency",
            "Graph capturing finished", "CUDA graph")
SKIM_TELLING = 1000
#: Past the bound a line is searched in its first SKIM_CHARS characters only: every decisive line vLLM prints says
#: what it is within its first hundred characters, and a flood of 64 KiB lines must cost no more than short ones.
SKIM_CHARS = 4096


class LogParser:
    """Streaming: feed one physical line at a time (str, may contain ANSI, \\r, a trailing newline, binary junk decoded
    with errors='replace'); read ``facts`` whenever you like."""

    def __init__(self, full_chars: int | None = None) -> None:
        """`full_chars`: how many characters of log are read for every fact; past them, lines are only skimmed for
        what decides the boot (`skimmed_lines`). None: every line read in full (a saved log, `facts`)."""
        self._lines = 0
        #: Characters still read in full; below zero, lines are skimmed.
        self._budget: float = float("inf") if full_chars is None else full_chars
        self._skimmed = 0
        self._telling = SKIM_TELLING
        self._late_refusal: str | None = None
        #: Refusal-looking lines after readiness: a watcher notes each new one (`late_refusals`).
        self.late_refusals = 0
        #: /health answered 200 (the watch says so): a server that never logs a listening line is ready too.
        self._listening = False
        self._version: str | None = None
        self._kv: dict[str, float | int | str | None] = {}  # KvFacts' fields: numbers, and the device's name
        self._capture: float | None = None  # the first "Graph capturing finished" after the KV cache was sized
        self._early_capture: float | None = None  # the first before it: the V2 runner's profiling pass, or an excerpt's
        self._estimate: float | None = None  # the first "Estimated CUDA graph memory: X GiB total"
        self._refusal: Refusal | None = None
        self._causes = CauseReader()
        self._ready: list[str] = []
        self._error_line: str | None = None
        self._phases = phases.PhaseReader()
        #: Still looking for what any line may carry (the first line, the engine's first, the first timestamp).
        self._early = True
        #: The last lines the pre-check passed over, how many it has, how many were searched for a timestamp, and the
        #: last one found: where the log ends is its last timestamp, whichever lines the pre-check reads.
        self._unread: deque[str] = deque(maxlen=UNREAD_TAIL)
        self._unread_count = 0
        self._unread_searched = 0
        self._unread_stamp: str | None = None

    def feed(self, line: str) -> Signal:
        """Take one physical line; say whether it is a refusal, a readiness line, or neither. Never raises."""
        self._lines += 1
        try:
            text = _coerce(line)
            self._budget -= min(len(text), MAX_LINE_CHARS)
            if self._budget < 0:
                return self._skim(text)  # its head only: no copy of a long line
            if len(text) > MAX_LINE_CHARS:
                text = text[:MAX_LINE_CHARS]
            return self._read(text)
        except Exception:  # noqa: BLE001 - a log line must never break the watcher; an unparsed line is just noise
            return Signal.NONE

    def _skim(self, text: str) -> Signal:
        """A line past the bound: read (its head) only when it may decide the boot, which nothing does once it is
        ready."""
        self._skimmed += 1
        head = text[:SKIM_CHARS]
        self._unread.append(text[:UNREAD_HEAD])
        self._unread_count += 1
        if self._ready or self._listening:
            return Signal.NONE
        for needle in _DECISIVE:
            if needle in head:
                return self._read(head)
        if self._telling > 0:
            for needle in _TELLING:
                if needle in head:
                    self._telling -= 1
                    return self._read(head)
        return Signal.NONE

    def listening(self) -> None:
        """The server answered /health 200: from here on, as after a listening line, no line is a refusal."""
        self._listening = True

    def _read(self, text: str) -> Signal:
        """One line read for what it says: the cheap checks first, the patterns only on lines that may match."""
        # Past the first lines the cheap checks are all that most lines meet: the phase milestones that any line
        # may end (the first line, the engine's first) are looked for only until they are reached.
        first = self._early and not self._phases.reached(Milestone.first_line) and bool(text.strip())
        engine = self._early and "EngineCore" in text and not self._phases.reached(Milestone.engine_started)
        unstamped = self._early and not self._phases.has_origin and self._lines <= _STAMP_SEARCH_LINES
        if not (first or engine or unstamped or self._causes.continuing or worth_reading(text)):
            self._unread.append(text if len(text) <= UNREAD_HEAD else text[:UNREAD_HEAD])
            self._unread_count += 1
            if self._early and self._phases.reached(Milestone.engine_started) and (
                    self._phases.has_origin or self._lines > _STAMP_SEARCH_LINES):
                self._early = False
            return Signal.NONE
        signal = Signal.NONE
        for segment in segments(text):
            parts = split_line(segment)
            self._phases.stamp(parts.stamp)
            if first:
                self._phases.mark(Milestone.first_line)
                first = False
            if (p.CPU_WORKER_FILE in segment and not self._ready
                    and own_text(parts.source, parts.message) is not None):
                self._kv["device"] = "cpu"  # only the CPU backend has this worker (the block is then 128)
            if parts.process.startswith("(EngineCore") and not self._phases.reached(Milestone.engine_started):
                self._phases.mark(Milestone.engine_started)
            seen = self._feed_message(parts.level, parts.message, parts.process, parts.source)
            if _SIGNAL_RANK[seen] > _SIGNAL_RANK[signal]:
                signal = seen
        return signal

    def take_milestones(self) -> list[Milestone]:
        """The milestones the lines fed since the last call reached (or moved): a watcher times them itself."""
        return self._phases.take_milestones()

    @property
    def facts(self) -> LogFacts:
        """A snapshot: later feeds do not change it, and changing it does not change the parser."""
        timeline = self._log_timeline()
        return LogFacts(
            vllm_version=self._version,
            kv=KvFacts(**self._kv, cuda_graph_gib=self._graph_gib()),
            refusal=self._refusal.model_copy() if self._refusal is not None else None,
            cause=self._causes.finding(self._error_line, timeline.phase.name if timeline.phase else None),
            ready_lines=list(self._ready),
            error_line=self._error_line,
            lines=self._lines,
            timeline=timeline,
            enforce_eager=self._phases.eager,
            refusal_after_ready=self._late_refusal,
            skimmed_lines=self._skimmed,
        )

    def _log_timeline(self) -> Timeline:
        """The timeline as the log's own timestamps tell it: the phase is where the log stopped."""
        at = self._phases.log_milestones()
        end = self._phases.log_elapsed()
        tail = self._phases.seconds_of(self._last_unread_stamp())
        if tail is not None and (end is None or tail > end):
            end = tail
        device = self._kv.get("device")
        skip = skipped(bool(self._phases.eager), device if isinstance(device, str) else None)
        return Timeline(milestones=at, durations=self._phases.durations,
                        phase=phase_at(at, end, skip) if end is not None else None)

    def _last_unread_stamp(self) -> str | None:
        """The timestamp of the last stamped line the pre-check passed over: the lines passed over since the last
        call are searched from the newest (each line once, however often `facts` is read)."""
        new = min(self._unread_count - self._unread_searched, len(self._unread))
        self._unread_searched = self._unread_count
        for i in range(1, new + 1):
            for segment in reversed(segments(self._unread[-i])):
                if (stamp := split_line(segment).stamp) is not None:
                    self._unread_stamp = stamp
                    return stamp
        return self._unread_stamp

    # --- one message ---------------------------------------------------------------------------------------------

    def _feed_message(self, level: str | None, msg: str, process: str = "", source: str | None = None) -> Signal:
        if not msg:
            return Signal.NONE
        quiet = level in QUIET_LEVELS
        if self._ready or self._listening:
            # Readiness ends the refusal watch: vLLM refuses while its engine starts; a line like one later (an echo,
            # a request's error) is kept as a note, and as the last error if the server then dies, never as the cause.
            late = match(msg, quiet)
            found = None
            if late is not None and late.cause.id in AFTER_READY:
                found = self._causes.feed(process, msg, quiet)
            elif refusal_of(late) is not None:
                self.late_refusals += 1
                if self._late_refusal is None:
                    self._late_refusal = msg[:MESSAGE_MAX_CHARS]
        else:
            found = self._causes.feed(process, msg, quiet)
            refusal = refusal_of(found)
            if refusal is not None:
                self._refusal = keep_first_specific(self._refusal, refusal)
                return Signal.REFUSAL
        if found is None and p.ERROR_LINE.match(msg):
            self._error_line = msg[:MAX_ERROR_CHARS]
        # A fact belongs to the record that states it: a request log echoing a prompt ("Received request …: prompt:
        # 'GPU KV cache size: …'") states none, whatever the parser has seen so far (an excerpt may start anywhere).
        # Past the listening line vLLM logs no boot fact at all, so a look-alike no rule recognises is ignored too.
        text = own_text(source, msg) if not self._ready else None
        if text is not None:
            for needle, extract in _EXTRACTORS:
                if needle in text:
                    extract(self, text)
            self._phases.feed(process, text)
        if ("Starting vLLM" in msg or "Application startup complete" in msg) and p.READY.search(msg):
            if len(self._ready) < MAX_READY_LINES:
                self._ready.append(msg[:MAX_LINE_CHARS])
            self._phases.mark(Milestone.listening)
            return Signal.READY
        return Signal.NONE

    def _first(self, key: str, value: float | int | str | None) -> None:
        """Keep the first logged value: tensor-parallel workers repeat the same line."""
        if value is not None and key not in self._kv:
            self._kv[key] = value

    def _smallest(self, key: str, value: float | None) -> None:
        """Keep the smallest logged value: the engine sizes the pool by its tightest worker."""
        old = self._kv.get(key)
        if value is not None and (not isinstance(old, float | int) or value < old):
            self._kv[key] = value

    def _largest(self, key: str, value: float | None) -> None:
        """Keep the largest logged value: each worker captures its own graphs, and the one needing most must fit."""
        old = self._kv.get(key)
        if value is not None and (not isinstance(old, float | int) or value > old):
            self._kv[key] = value

    def _version_from(self, msg: str) -> None:
        if self._version is None:
            m = p.VERSION.search(msg) or p.VERSION_LOGO.search(msg)
            if m:
                self._version = m.group(1)

    def _model_load(self, msg: str) -> None:
        if m := p.MODEL_LOAD.search(msg) or p.MODEL_WEIGHTS_V0.search(msg):
            self._first("model_load_gib", p.to_float(m.group(1)))

    def _kv_cache(self, msg: str) -> None:
        if m := p.AVAILABLE_KV.search(msg) or p.AVAILABLE_KV_V0.search(msg) or p.MEMORY_PROFILING_V0.search(msg):
            self._smallest("available_gib", p.to_float(m.group(1)))
            self._first("device", "gpu")
        if m := p.CPU_KV_SET.search(msg):
            value = p.to_float(m.group(2))
            self._first("reserved_gib", value)
            if m.group(1) == "Auto":  # sized from free memory, as the GPU worker's "Available KV cache memory" is
                self._smallest("available_gib", value)
            self._kv["device"] = "cpu"  # the CPU worker's own line beats the shared "Available KV cache memory"
        if m := p.KV_TOKENS.search(msg):
            self._first("kv_tokens", p.to_int(m.group(1)))
            word = msg[:m.start()].split()[-1:]
            if word and word[0] in ("GPU", "CPU", "XPU", "TPU", "NPU", "HPU"):
                self._kv["device"] = word[0].lower()  # the device word of the capacity line is the last say

    def _blocks(self, msg: str) -> None:
        if (m := p.BLOCKS_V0.search(msg)) and (device := p.DEVICE_WORDS.get(m.group(1).lower())):
            self._kv["device"] = device  # like the V1 capacity line, the sized pool's device word is the last say

    def _mla_backend(self, msg: str) -> None:
        if m := p.MLA_BACKEND.search(msg):
            self._first("mla_backend", m.group(1))

    def _block_size(self, msg: str) -> None:
        if m := p.ATTENTION_BLOCK.search(msg):
            self._kv["block_size"] = p.to_int(m.group(1))  # the hybrid's raise is the last word on the block size
        elif m := p.KV_BLOCK.search(msg):
            self._first("block_size", p.to_int(m.group(1)))

    def _hybrid(self, msg: str) -> None:
        if m := p.MAMBA_PADDING.search(msg):
            self._first("mamba_padding_pct", p.to_float(m.group(1)))
        elif m := p.PADDING_LAYERS.search(msg):
            self._first("padding_layers", p.to_int(m.group(1)))
        elif m := p.CPU_SSM_RESET.search(msg):
            self._first("cpu_ssm_dtype", m.group(1))
        elif m := p.MAMBA_MODE.search(msg):
            self._first("mamba_cache_mode", m.group(1))

    def _reserved(self, msg: str) -> None:
        if m := p.RESERVED_KV.search(msg):
            self._first("reserved_gib", p.to_float(m.group(1)))
            self._first("device", "gpu")

    def _concurrency(self, msg: str) -> None:
        if m := p.CONCURRENCY.search(msg):
            if "max_concurrency" not in self._kv:
                self._first("concurrency_tokens", p.to_int(m.group(1)))
                self._first("max_concurrency", p.to_float(m.group(2)))

    def _graph(self, msg: str) -> None:
        if m := p.GRAPH_CAPTURED.search(msg):
            value = p.to_float(m.group(2))
            if self._phases.reached(Milestone.kv_sized):
                if self._capture is None:
                    self._capture = value
            elif self._early_capture is None:
                self._early_capture = value
        elif m := p.GRAPH_POOL.search(msg):
            self._largest("cuda_graph_actual_gib", p.to_float(m.group(1)))
            self._largest("cuda_graph_estimated_gib", p.to_float(m.group(2)))
        elif m := p.GRAPH_ESTIMATED.search(msg):
            value = p.to_float(m.group(1))
            if self._estimate is None:
                self._estimate = value
            self._largest("cuda_graph_estimated_gib", value)

    def _graph_gib(self) -> float | None:
        """cuda_graph_gib: the measured capture beats the estimate whichever comes first, and the V2 runner's
        profiling capture (before the KV size) only fills a gap. Until a KV size line is read, a capture cannot be
        told from that pass (an excerpt may start anywhere), so it counts as the measured one. 0.34's extensible KV
        cache logs its size after its only capture: no estimate is logged there, so the gap-filler is that capture."""
        sized = self._phases.reached(Milestone.kv_sized)
        for value in (self._capture, None if sized else self._early_capture, self._estimate, self._early_capture):
            if value is not None:
                return value
        return None

    def _offload(self, msg: str) -> None:
        if m := p.OFFLOAD_CAP.search(msg):
            if "offload_cap_gib" not in self._kv:
                self._first("offload_cap_gib", p.to_float(m.group(1)))
                self._first("offload_uncapped_gib", p.to_float(m.group(2)))

    def _floor(self, msg: str) -> None:
        if m := p.KV_FLOOR.search(msg):
            self._first("floor_raised_bytes", p.to_int(m.group(2)))

    def _autofit(self, msg: str) -> None:
        if m := p.AUTOFIT_REDUCED.search(msg):
            self._first("autofit_max_model_len", p.to_int(m.group(2)))
        elif m := p.AUTOFIT_KEPT.search(msg):
            self._first("autofit_max_model_len", p.to_int(m.group(1) or m.group(2)))

    def _engine_init(self, msg: str) -> None:
        if m := p.ENGINE_INIT.search(msg):
            self._first("engine_init_s", p.to_float(m.group(1)))


# (substring that must be present, extractor)
_EXTRACTORS: tuple[tuple[str, Callable[[LogParser, str], None]], ...] = (
    ("version", LogParser._version_from),
    ("Model loading took", LogParser._model_load),
    ("Loading model weights took", LogParser._model_load),
    ("kv_cache_size=", LogParser._kv_cache),
    ("blocks:", LogParser._blocks),
    ("KV cache", LogParser._kv_cache),
    ("KV Cache", LogParser._kv_cache),
    ("for KV Cache as specified", LogParser._reserved),
    ("Maximum concurrency", LogParser._concurrency),
    ("Graph capturing finished", LogParser._graph),
    ("CUDA graph memory", LogParser._graph),
    ("CUDA graph pool memory", LogParser._graph),
    ("expert offload", LogParser._offload),
    ("KV floor", LogParser._floor),
    ("Auto-fit", LogParser._autofit),
    ("init engine", LogParser._engine_init),
    ("MLA backend", LogParser._mla_backend),
    ("block size to", LogParser._block_size),
    ("Padding mamba page size", LogParser._hybrid),
    ("padding layers", LogParser._hybrid),
    ("SSM cache type", LogParser._hybrid),
    ("Mamba cache mode", LogParser._hybrid),
)


def own_text(source: str | None, msg: str) -> str | None:
    """What a record says for itself: None when it echoes a client (the request logger's records, by the file its
    header names or, without a header, by their message forms), else the message up to any client text quoted in it
    (`prompt: '…'`, a JSON body's `"prompt": "…"`)."""
    if source is not None and source in p.REQUEST_LOGGER_SOURCES:
        return None
    if p.ECHO_START.match(msg):
        return None
    quoted = p.CLIENT_TEXT.search(msg) if ("prompt" in msg or "output" in msg or "content" in msg) else None
    return msg[:quoted.start()] if quoted else msg


def parse_lines(lines: Iterable[str]) -> LogFacts:
    """Facts of a log given as physical lines (an open text file, a list, a generator)."""
    parser = LogParser()
    for line in lines:
        parser.feed(line)
    return parser.facts


def _text_lines(text: str) -> Iterator[str]:
    start = 0
    for m in re.finditer(r"\r\n|\r|\n", text):
        yield text[start: m.start()]
        start = m.end()
    if start < len(text):
        yield text[start:]


def parse_text(text: str) -> LogFacts:
    """Facts of a whole log held in memory; splits on \\n and \\r (\\r\\n counts as one line end)."""
    return parse_lines(_text_lines(text))


def parse_file(path: str | os.PathLike[str]) -> LogFacts:
    """Facts of a log file, streamed (harness.files.iter_lines: a regular file only, a line cut at MAX_LINE_BYTES);
    undecodable bytes become U+FFFD."""
    from harness.files import iter_lines

    return parse_lines(iter_lines(path, MAX_LINE_BYTES))
