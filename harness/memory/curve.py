"""From samples to the record: the peak and the phase it came in, the peak per phase, the headroom, the logged sizes
held against the steps the curve took, and the curve thinned to at most MAX_SAMPLES points keeping every local peak.

Phases are the timeline's (harness.logfacts.timeline): a sample at t belongs to the phase the server was in at t, so
the curve and the timeline say the same thing about the same moment.
"""

from __future__ import annotations

import math

from harness.logfacts.model import KvFacts
from harness.logfacts.timeline import ORDER, RANK, Milestone, Milestones, phase_at, span_name
from harness.memory.model import MAX_SAMPLES, DeviceMemory, LoggedMemory, MemoryCurve
from harness.memory.probe import Limit
from harness.memory.sampler import Samples
from harness.units import GIB

#: How long a log line may take to reach the harness after the server wrote it (a pipe, an engine's log stream: 0.2-0.4
#: s measured on podman): the memory a KV size line announces may show in the curve before the line arrives, so its
#: step is measured from the level this long before the line.
LOG_LAG_S = 1.0
#: vLLM's default --gpu-memory-utilization.
DEFAULT_UTILIZATION = 0.9


def thin(points: list[tuple[float, int]], most: int = MAX_SAMPLES) -> list[tuple[float, int]]:
    """At most `most` points: the first and the last, and of each of (most - 2) / 2 equal runs of samples its lowest
    and its highest in time order — so every peak and every dip wider than a run is kept, the global peak always."""
    if len(points) <= most:
        return list(points)
    inner = points[1:-1]
    buckets = (most - 2) // 2
    size = math.ceil(len(inner) / buckets)
    out = [points[0]]
    for i in range(0, len(inner), size):
        run = inner[i:i + size]
        lo = min(range(len(run)), key=lambda k: run[k][1])
        hi = max(range(len(run)), key=lambda k: run[k][1])
        out += [run[k] for k in sorted({lo, hi})]
    out.append(points[-1])
    return out


def _level_before(points: list[tuple[float, int]], t: float) -> int:
    """The last sample at or before `t` (the first sample when none is that early)."""
    before = [b for s, b in points if s <= t]
    return before[-1] if before else points[0][1]


def _next_phase(after: Milestone, skip: frozenset[Milestone]) -> Milestone | None:
    """The milestone ending the phase that follows `after` in this boot (one it passed or may pass)."""
    for m in ORDER[ORDER.index(after) + 1:]:
        if m not in skip and m is not Milestone.decided:
            return m
    return None


def _step(points: list[tuple[float, int]], start: float, end: float | None) -> int | None:
    """How far the curve rose in (start, end] — through the first sample after `end` too, the level the phase had
    reached by its end (an allocation that ends the phase lands between two samples) — above the level at `start`."""
    inside = [b for s, b in points if start < s <= (end if end is not None else math.inf)]
    after = next((b for s, b in points if end is not None and s > end), None)
    if after is not None:
        inside.append(after)
    return max(inside) - _level_before(points, start) if inside else None


def _logged(points: list[tuple[float, int]], milestones: Milestones, kv: KvFacts,
            skip: frozenset[Milestone]) -> list[LoggedMemory]:
    """Weights rise while they load (the phase ending at weights_loaded); the KV tensors are allocated right after
    their size is logged, in the phase after kv_sized. On a GPU that same phase captures the CUDA graphs (no line
    parts the two), so the graphs' measured step is that phase's rise less the logged KV size."""
    reached = dict(milestones.reached())
    out: list[LoggedMemory] = []

    def add(what: str, gib: float | None, ends: Milestone | None, start: float | None, less: int = 0) -> None:
        if gib is None or gib <= 0 or ends is None:
            return
        measured = _step(points, start, reached.get(ends)) if points and start is not None else None
        before = max((m for m in reached if RANK[m] < RANK[ends]), key=RANK.__getitem__, default=None)
        out.append(LoggedMemory(what=what, logged_bytes=int(gib * GIB), phase=span_name(before, ends),
                                measured_bytes=None if measured is None else measured - less))

    prior = [t for m, t in reached.items() if RANK[m] < RANK[Milestone.weights_loaded]]
    add("weights", kv.model_load_gib, Milestone.weights_loaded, max(prior, default=0.0))
    kv_gib = kv.reserved_gib if kv.reserved_gib is not None else kv.available_gib
    sized = reached.get(Milestone.kv_sized)
    sized = None if sized is None else max(0.0, sized - LOG_LAG_S)
    add("kv_cache", kv_gib, _next_phase(Milestone.kv_sized, skip), sized)
    if Milestone.graphs_captured not in skip:
        kv_bytes = int(kv_gib * GIB) if kv_gib and kv_gib > 0 else 0
        actual = kv.cuda_graph_actual_gib if kv.cuda_graph_actual_gib is not None else kv.cuda_graph_gib
        add("cuda_graphs", actual, Milestone.graphs_captured, sized, kv_bytes)
        add("cuda_graphs_estimate", kv.cuda_graph_estimated_gib, Milestone.graphs_captured, sized, kv_bytes)
    return out


def _devices(samples: Samples, limit: Limit, utilization: float) -> list[DeviceMemory]:
    by_index: dict[int, list] = {}
    for reading in samples.devices:
        for d in reading:
            by_index.setdefault(d.index, []).append(d)
    out = []
    for index, rows in sorted(by_index.items()):
        total = limit.device_totals.get(index)
        server = max(r.server_bytes for r in rows)
        out.append(DeviceMemory(
            index=index, total_bytes=total or 0, peak_server_bytes=server,
            peak_used_bytes=max(r.used_bytes for r in rows),
            peak_others_bytes=max(max(0, r.used_bytes - r.server_bytes) for r in rows),
            headroom_bytes=int(total * utilization) - server if total else None))
    return out


def summarize(samples: Samples, source, interval_s: float, milestones: Milestones, kv: KvFacts,
              skip: frozenset[Milestone] = frozenset(), utilization: float | None = None) -> MemoryCurve:
    """The record of one boot's curve. `utilization`: the cell's --gpu-memory-utilization (GPU curves only)."""
    points, limit = samples.points, samples.limit
    gpu = bool(limit.device_totals)
    util = (utilization if utilization is not None else DEFAULT_UTILIZATION) if gpu else None
    curve = MemoryCurve(source=source, interval_s=interval_s, limit_bytes=limit.bytes, limit_kind=limit.kind,
                        taken=len(points), samples=thin(points), stopped=samples.stopped,
                        gpu_memory_utilization=util)
    if not points:
        return curve
    by_phase: dict[str, int] = {}
    for t, b in points:
        name = phase_at(milestones, t, skip).name
        by_phase[name] = max(b, by_phase.get(name, b))
    peak_t, peak = max(points, key=lambda p: p[1])
    devices = _devices(samples, limit, util) if gpu and util is not None else []
    if devices:
        headroom = min((d.headroom_bytes for d in devices if d.headroom_bytes is not None), default=None)
    else:
        headroom = limit.bytes - peak if limit.bytes is not None else None
    return curve.model_copy(update=dict(
        peak_bytes=peak, peak_at_s=peak_t, peak_phase=phase_at(milestones, peak_t, skip).name, by_phase=by_phase,
        headroom_bytes=headroom, devices=devices, logged=_logged(points, milestones, kv, skip)))
