"""Where a boot's time went, as data: the milestones a boot passes, the durations vLLM logged, and the phase a verdict
found the server in.

A milestone is the moment a phase *ended* (weights loaded, KV sized, graphs captured, …), so the phase a server is in
is the one that ends at the next milestone it has not reached. One order for all of them, because the same order
decides which phase a stalled server was in and which phase a slow boot spent its time in.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field


class Milestone(enum.StrEnum):
    """A boot's milestones in the order a boot passes them; each is the end of the phase `PHASES` names."""

    pulled = "pulled"
    started = "started"
    first_line = "first_line"
    engine_started = "engine_started"
    loading_started = "loading_started"
    weights_loaded = "weights_loaded"
    compiled = "compiled"
    kv_sized = "kv_sized"
    graphs_captured = "graphs_captured"
    engine_ready = "engine_ready"
    listening = "listening"
    healthy = "healthy"
    served = "served"
    decided = "decided"


ORDER: tuple[Milestone, ...] = tuple(Milestone)
RANK = {m: i for i, m in enumerate(ORDER)}

#: The phase that ends at each milestone, as a person names it.
PHASES: dict[Milestone, str] = {
    Milestone.pulled: "image pull",
    Milestone.started: "server start",
    Milestone.first_line: "imports",
    Milestone.engine_started: "API server set-up / engine process start",
    Milestone.loading_started: "engine start-up / worker start",
    Milestone.weights_loaded: "weight loading",
    Milestone.compiled: "torch.compile",
    Milestone.kv_sized: "profiling and KV sizing",
    Milestone.graphs_captured: "CUDA-graph capture",
    Milestone.engine_ready: "warm-up",
    Milestone.listening: "API server start",
    Milestone.healthy: "/health",
    Milestone.served: "probe request",
    Milestone.decided: "verdict",
}

#: A phase whose start the log did not mark is named with the one before it: weights counted from the engine's first
#: line hold the worker's start-up too (a log without "Starting to load model", a record from before it was read).
JOINED: dict[Milestone, tuple[Milestone, str]] = {
    Milestone.weights_loaded: (Milestone.loading_started, "start-up and weight loading"),
}


def span_name(before: Milestone | None, ends: Milestone) -> str:
    """The name of the span from milestone `before` (None: the start) to `ends`."""
    joined = JOINED.get(ends)
    if joined is not None and (before is None or RANK[before] < RANK[joined[0]]):
        return joined[1]
    return PHASES[ends]


def span_names(ends: Milestone) -> tuple[str, ...]:
    """Every name a span ending at `ends` may have (a legend's, a colour's key)."""
    return (PHASES[ends], JOINED[ends][1]) if ends in JOINED else (PHASES[ends],)


#: What each milestone is, for the schema and docs/results.md.
MEANINGS: dict[Milestone, str] = {
    Milestone.pulled: "the image is present (pulled if it had to be); containers only",
    Milestone.started: "the process was spawned / the container is running",
    Milestone.first_line: "the server's first log line",
    Milestone.engine_started: "the engine's first line (the engine core process, or V0's engine initialising)",
    Milestone.loading_started: "a worker starts loading the weights (\"Starting to load model …\", V2's \"Loading "
                                "model from scratch\"; the last rank's before any weights are in)",
    Milestone.weights_loaded: "the weights are loaded (the last rank's, and a draft model's, line)",
    Milestone.compiled: "torch.compile finished, or its graphs came from the cache",
    Milestone.kv_sized: "the KV cache is sized (its size lines)",
    Milestone.graphs_captured: "CUDA graphs are captured",
    Milestone.engine_ready: "the engine is ready (\"init engine ... took\")",
    Milestone.listening: "the API server listens",
    Milestone.healthy: "/health answered 200",
    Milestone.served: "the probe completion was answered",
    Milestone.decided: "the harness decided the verdict",
}


class Milestones(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pulled: float | None = Field(None, description=MEANINGS[Milestone.pulled])
    started: float | None = Field(None, description=MEANINGS[Milestone.started])
    first_line: float | None = Field(None, description=MEANINGS[Milestone.first_line])
    engine_started: float | None = Field(None, description=MEANINGS[Milestone.engine_started])
    loading_started: float | None = Field(None, description=MEANINGS[Milestone.loading_started])
    weights_loaded: float | None = Field(None, description=MEANINGS[Milestone.weights_loaded])
    compiled: float | None = Field(None, description=MEANINGS[Milestone.compiled])
    kv_sized: float | None = Field(None, description=MEANINGS[Milestone.kv_sized])
    graphs_captured: float | None = Field(None, description=MEANINGS[Milestone.graphs_captured])
    engine_ready: float | None = Field(None, description=MEANINGS[Milestone.engine_ready])
    listening: float | None = Field(None, description=MEANINGS[Milestone.listening])
    healthy: float | None = Field(None, description=MEANINGS[Milestone.healthy])
    served: float | None = Field(None, description=MEANINGS[Milestone.served])
    decided: float | None = Field(None, description=MEANINGS[Milestone.decided])

    def reached(self) -> list[tuple[Milestone, float]]:
        """The milestones that happened, in boot order."""
        return [(m, t) for m in ORDER if (t := getattr(self, m.value)) is not None]


class Durations(BaseModel):
    """What vLLM itself logged about its phases, in seconds / GiB as printed. With several ranks, the slowest rank's
    figure (that is when the phase ended for the engine); within one process, the figures of the target and a draft
    model add up, and a cumulative total ("torch.compile takes X s in total") counts once, its last line."""

    model_config = ConfigDict(extra="forbid")

    weights_load_s: float | None = Field(None, description="\"Loading weights took X seconds\" (V0: \"Loading model "
                                                           "weights took X GB\" has no time)")
    model_load_s: float | None = Field(None, description="\"Model loading took X GiB and Y seconds\"")
    model_load_gib: float | None = Field(None, description="\"Model loading took X GiB\" (V0: \"Loading model weights "
                                                           "took X GB\")")
    dynamo_transform_s: float | None = Field(None, description="\"Dynamo bytecode transform time: X s\"")
    compile_s: float | None = Field(None, description="\"torch.compile takes X s in total\" (≤0.17: a process's "
                                                      "running total, its last line), the sum of each model's "
                                                      "\"torch.compile took X s in total\" (0.19+), else the init "
                                                      "line's \"(compilation: X s)\", else the sum of \"Compiling a "
                                                      "graph ... takes X s\"")
    compile_cache_hit: bool | None = Field(None, description="true when the compiled graph came from the cache, false "
                                                             "when it was compiled, null when nothing was compiled")
    compile_cache_failure: str | None = Field(None, description="why vLLM could not load the cached compilation "
                                                                "(\"Compiling model again due to a load failure from "
                                                                "…, reason: …\")")
    graph_capture_s: float | None = Field(None, description="\"Graph capturing finished in X secs\"")
    graph_capture_gib: float | None = Field(None, description="\"..., took X GiB\" of the captures after the KV cache "
                                                              "was sized (0.30+ also captures while profiling: the "
                                                              "same graphs, counted only when no later capture came)")
    profiling_s: float | None = Field(None, description="V0: \"Memory profiling takes X seconds\"")
    engine_init_s: float | None = Field(None, description="\"init engine (profile, create kv cache, warmup model) "
                                                          "took X s\"")


class PhaseAt(BaseModel):
    """Where the server was at a moment: the phase after the last milestone it had reached, and for how long."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the phase, as PHASES names the one that ends at the next milestone")
    after: Milestone | None = Field(None, description="the last milestone reached; null when none")
    for_s: float = Field(description="seconds since that milestone (since the start when none)")

    def describe(self) -> str:
        from harness.units import fmt_seconds

        return f"in {self.name} for {fmt_seconds(self.for_s)}"


class PhaseSpan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ends: Milestone
    name: str
    seconds: float


class Timeline(BaseModel):
    """One boot's timeline: milestones on the harness's clock (seconds since the cell started; `facts` measures them
    from the log's own timestamps instead), the durations vLLM logged, and the phase the verdict came in."""

    model_config = ConfigDict(extra="forbid")

    milestones: Milestones = Field(default_factory=Milestones)
    durations: Durations = Field(default_factory=Durations)
    phase: PhaseAt | None = Field(None, description="where the server was when the verdict came")

    def spans(self) -> list[PhaseSpan]:
        """The time between consecutive milestones, each span named by the phase that ends at its milestone; the
        first span starts at 0 (the cell's start). `decided` is left out: it is the harness's, not the server's."""
        out, last, before = [], 0.0, None
        for m, t in self.milestones.reached():
            if m is Milestone.decided:
                break
            out.append(PhaseSpan(ends=m, name=span_name(before, m), seconds=round(max(0.0, t - last), 3)))
            last, before = max(last, t), m
        return out

    def longest(self) -> PhaseSpan | None:
        spans = self.spans()
        return max(spans, key=lambda s: s.seconds) if spans else None


def skipped(eager: bool, device: str | None) -> frozenset[Milestone]:
    """The milestones a boot will not pass: no torch.compile and no graphs when eager, no CUDA graphs on a CPU."""
    out = set()
    if eager or device == "cpu":
        out.add(Milestone.graphs_captured)
    if eager:
        out.add(Milestone.compiled)
    return frozenset(out)


def phase_at(milestones: Milestones, t: float, skip: frozenset[Milestone] = frozenset()) -> PhaseAt:
    """The phase a server is in at `t` (same clock as the milestones): the one ending at the next milestone after the
    last one reached by `t`, skipping milestones this boot will not pass (`skip`: graphs under --enforce-eager)."""
    reached = [(m, at) for m, at in milestones.reached() if at <= t and m is not Milestone.decided]
    last, since = (reached[-1] if reached else (None, 0.0))
    start = RANK[last] + 1 if last is not None else 0
    # the image is present before a cell starts (pulled in preflight): no server is ever "in" the pull
    upcoming = [m for m in ORDER[start:] if m not in skip and m not in (Milestone.pulled, Milestone.decided)]
    name = PHASES[upcoming[0]] if upcoming else PHASES[Milestone.decided]
    # a recorded boot that passed its next milestone without the line that starts a phase: the span's own name
    ahead = next((m for m, at in milestones.reached() if at > t and m is not Milestone.decided), None)
    if ahead in JOINED and getattr(milestones, JOINED[ahead][0].value) is None:
        name = span_name(last, ahead)
    return PhaseAt(name=name, after=last, for_s=round(max(0.0, t - since), 3))
