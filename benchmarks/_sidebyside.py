"""Shared by the benchmarks: boot cells through the harness and through a bare loop in the same run, alternating the
order each round so neither side always gets the warmer machine, and print latency and wall-time ratios."""

from __future__ import annotations

import resource
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.matrix.cells import Cell  # noqa: E402 - sys.path first
from harness.results.model import CellResult  # noqa: E402 - sys.path first

#: (cell, round) -> (verdict, wall seconds) for the bare side.
Bare = Callable[[Cell, int], tuple[str, float]]


def poll_health(port: int, exited: Callable[[], str | None], interval: float = 0.5, limit_s: float = 600) -> str:
    """What people write by hand: ask /health every `interval` until 200, or until the server is gone."""
    import time

    import requests

    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        gone = exited()
        if gone is not None:
            return gone
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return "healthy"
        except requests.RequestException:
            pass
        time.sleep(interval)
    return "timeout"


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))]


def side_by_side(cells: list[Cell], boot: Callable[[Cell], CellResult], bare: Bare, rounds: int) -> None:
    """`boot` is a RunSession's: the harness path every entry point takes."""
    latencies: list[float] = []
    health_lat: list[float] = []  # readiness line -> /health 200 seen
    probe_lat: list[float] = []  # /health 200 -> the one-token probe answered (the verdict)
    rows: list[tuple[str, dict]] = []
    cpu: list[tuple[float, float]] = []  # (harness CPU seconds, wall seconds) per harness cell, all its threads
    for r in range(rounds):
        for cell in cells:
            got: dict[str, tuple] = {}
            for who in (("harness", "bare") if r % 2 == 0 else ("bare", "harness")):
                if who == "harness":
                    before = resource.getrusage(resource.RUSAGE_SELF)
                    res = boot(cell)
                    after = resource.getrusage(resource.RUSAGE_SELF)
                    cpu.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
                                res.timings.total_s))
                    t = res.timings
                    event = t.ready_line_s if res.outcome == "booted" else t.event_s
                    lat = None if event is None or t.verdict_s is None else t.verdict_s - event
                    if lat is not None:
                        latencies.append(lat)
                    if res.outcome == "booted" and t.ready_s is not None and t.ready_line_s is not None:
                        health_lat.append(t.ready_s - t.ready_line_s)
                        probe_lat.append(t.verdict_s - t.ready_s)
                    got[who] = (f"{res.outcome}/{res.reason}", t.total_s, lat, t.verdict_s)
                else:
                    verdict, wall = bare(cell, r)
                    got[who] = (verdict, wall, None, wall)
            rows.append((cell.id, got))
            h, b = got["harness"], got["bare"]
            lat = "n/a" if h[2] is None else f"{h[2]:.3f}s"
            print(f"round {r} {cell.id}: harness {h[0]} verdict at {h[3]:.2f}s, total {h[1]:.2f}s "
                  f"(latency {lat}) | bare {b[0]} {b[1]:.2f}s", flush=True)
    print("\n== verdict latency after the decisive event (readiness line for boots, refusal line for refusals) ==")
    if latencies:
        print(f"n={len(latencies)}  p50={statistics.median(latencies):.3f}s  p95={pct(latencies, 95):.3f}s  "
              f"max={max(latencies):.3f}s   target: p95 <= 0.300s")
    if health_lat:
        print(f"  boots, split: readiness line -> /health 200 seen p95={pct(health_lat, 95):.3f}s; "
              f"/health 200 -> probe served (verdict) p95={pct(probe_lat, 95):.3f}s")
    if cpu:
        used, wall = sum(c for c, _ in cpu), sum(w for _, w in cpu)
        print(f"  the harness's own CPU (every thread of this process; not the server's, not the engine's): "
              f"{used / len(cpu):.2f} s per cell, {100 * used / wall:.1f} % of one core over the cell's wall time")
    print("\n== wall time per cell: harness (start to torn down) / bare loop (start to its verdict, torn down) ==")
    for cell in cells:
        hs = [g["harness"][1] for cid, g in rows if cid == cell.id]
        bs = [g["bare"][1] for cid, g in rows if cid == cell.id]
        hv = [g["harness"][3] for cid, g in rows if cid == cell.id]
        ratio = sum(hs) / sum(bs)
        print(f"{cell.id}: harness {statistics.mean(hs):.2f}s vs bare {statistics.mean(bs):.2f}s -> ratio {ratio:.3f} "
              f"(overhead {100 * (ratio - 1):+.1f} %, target <= +3 %); harness verdict at {statistics.mean(hv):.2f}s")
