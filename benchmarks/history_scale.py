#!/usr/bin/env python3
"""`boot-harness history` at a year's scale: 365 nights × 64 cells, read and told (terminal table, markdown, HTML,
JSON), with its time and peak memory. Goal: < 2 s and < 300 MB on the 2-core CPU machine.

    .venv/bin/python benchmarks/history_scale.py [--nights 365] [--cells 64] [--rounds 3] [--samples N] [--keep DIR]

The nights are written first as ordinary run directories (tests/synthetic.py records, each cell with a timeline, KV
figures, argv and env as a nightly cell has them; a version bump, a refusal streak and a slower weight load along the
way; with `--samples N`, a memory curve of N samples on 8 GPUs too), then each round reads them in a fresh child
process — the records only, never the server logs — so the peak RSS is the command's own: interpreter, imports,
every record and every output. `--keep DIR` writes the nights there once and reads them again on later runs (give
another DIR for another `--samples`).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

GOAL_S, GOAL_MB = 2.0, 300


def memory_curve(samples: int, weights_s: float):
    """A boot's memory record as the sampler leaves it on 8 GPUs: `samples` [t, bytes] pairs (500 at most are kept)."""
    from harness.memory.model import DeviceMemory, LoggedMemory, MemoryCurve

    gib = 1 << 30
    curve = [(round(0.2 * k, 3), int(gib * min(70, 2 + k * 70 / max(1, samples - 1)))) for k in range(samples)]
    return MemoryCurve(source="nvml", interval_s=0.2, limit_bytes=8 * 80 * gib, limit_kind="device_total",
                       peak_bytes=max((b for _, b in curve), default=None), peak_at_s=curve[-1][0] if curve else None,
                       peak_phase="warm-up", by_phase={"weight loading": 60 * gib, "warm-up": 70 * gib},
                       headroom_bytes=2 * gib, gpu_memory_utilization=0.9,
                       devices=[DeviceMemory(index=i, total_bytes=80 * gib, peak_server_bytes=70 * gib,
                                             peak_used_bytes=71 * gib, headroom_bytes=2 * gib) for i in range(8)],
                       logged=[LoggedMemory(what="weights", logged_bytes=60 * gib, phase="weight loading",
                                            measured_bytes=int(59.5 * gib))],
                       taken=int(weights_s / 0.2), samples=curve)


def write_nights(where: Path, nights: int, cells: int, samples: int = 0) -> None:
    from harness.logfacts.timeline import Durations, Milestones, Timeline
    from harness.results.model import Timings
    from tests.synthetic import _T0, make_cell, make_run, write_run

    for n in range(nights):
        slow = 80.0 if n >= nights // 2 else 0.0
        records = []
        for i in range(cells):
            refused = i % 8 == 0 and n >= nights - 30
            weights = 41.0 + slow + (n * 7 + i) % 5 * 0.3
            ms = Milestones(started=0.1, first_line=2.0, engine_started=6.0, weights_loaded=6.0 + weights,
                            kv_sized=8.0 + weights, graphs_captured=30.0 + weights, engine_ready=31.0 + weights,
                            listening=32.0 + weights, healthy=33.0 + weights, served=33.4 + weights,
                            decided=33.5 + weights)
            argv = ["vllm", "serve", "--model", "/models/glm", "--max-model-len", str(131072 * (1 + i % 2)),
                    "--tensor-parallel-size", "8", "--port", str(40000 + i), "--kv-cache-memory-bytes",
                    str(10 << 30), "--speculative-config", '{"method":"mtp","num_speculative_tokens":4}']
            c = make_cell(f"mml{131072 * (1 + i % 2)}-case{i:02d}", {"max_model_len": str(131072 * (1 + i % 2)),
                                                                     "case": f"{i:02d}"},
                          "refused" if refused else "booted", argv=argv,
                          env={"VLLM_USE_V1": "1", "HF_TOKEN": "***", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"},
                          kv={"available_gib": 9.47, "kv_tokens": 122_620, "max_concurrency": 0.94},
                          refusal={"kind": "kv_insufficient", "max_seq_len": 131072, "needed_gib": 2.07,
                                   "available_gib": 1.74, "estimated_max_model_len": 110080} if refused else None,
                          expected=("booted", None), log_tail=[f"INFO line {k} of the server's log" for k in range(8)])
            records.append(c.model_copy(update={
                "vllm_version": "0.33.1" if n >= nights - 30 else "0.33.0", "port": 40000 + i,
                "timings": Timings(ready_s=33.0 + weights, event_s=33.0 + weights, verdict_s=33.5 + weights,
                                   total_s=36.0 + weights),
                "timeline": Timeline(milestones=ms, durations=Durations(weights_load_s=weights, engine_init_s=25.0)),
                "memory": memory_curve(samples, weights) if samples else None}))
        run = make_run(f"nightly-{n:03d}", records, "nightly")
        # the last night at _T0, the others before it: a start past this host's clock would be skipped as future
        write_run(run.model_copy(update={"started_at": _T0 - timedelta(days=nights - 1 - n)}), where)


def measure(where: Path) -> None:
    """One round, in this (fresh) process: read and tell everything; print seconds and peak RSS as JSON."""
    import io
    from contextlib import redirect_stdout

    from harness.analysis.history import build_history
    from harness.analysis.history_runs import read_nights
    from harness.emit import render
    from harness.report.history import render_html, render_markdown, render_table
    from harness.report.text import plain_console, show

    t0 = time.perf_counter()
    warnings: list[str] = []
    nights = read_nights([where], warnings.append)
    t_read = time.perf_counter() - t0
    h = build_history(nights, warnings=warnings)
    t_analyse = time.perf_counter() - t0 - t_read
    sink = io.StringIO()
    with redirect_stdout(sink):
        show(plain_console(), render_table(h))
    sizes = {"markdown": len(render_markdown(h)), "html": len(render_html(h)), "json": len(render(h.output()))}
    total = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"read_s": t_read, "analyse_s": t_analyse, "total_s": total, "peak_mb": peak_mb,
                      "runs": len(h.runs), "cells": len(h.cells), "steps": sum(len(c.time_changes) for c in h.cells),
                      **sizes}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nights", type=int, default=365)
    ap.add_argument("--cells", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--samples", type=int, default=0, help="give each cell a memory curve of this many samples (the "
                    "sampler keeps 500 at most); 0: none, as before memory curves")
    ap.add_argument("--keep", type=Path, help="write (or reuse) the nights here instead of a temporary folder")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        measure(args.measure)
        return
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp) / "nights"
        if not (where.exists() and any(where.iterdir())):
            t0 = time.perf_counter()
            write_nights(where, args.nights, args.cells, args.samples)
            print(f"wrote {args.nights} nights × {args.cells} cells"
                  + (f" with {args.samples} memory samples each" if args.samples else "")
                  + f" in {time.perf_counter() - t0:.1f} s (not timed)")
        results = []
        for _ in range(args.rounds):
            out = subprocess.run([sys.executable, __file__, "--measure", str(where)], capture_output=True, text=True,
                                 check=True, cwd=ROOT)
            results.append(json.loads(out.stdout))
    r = results[-1]
    total = statistics.median(x["total_s"] for x in results)
    peak = max(x["peak_mb"] for x in results)
    print(f"{r['runs']} runs × {r['cells']} cells, {r['steps']} boot-time steps found; outputs: markdown "
          f"{r['markdown']:,} B, HTML {r['html']:,} B, JSON {r['json']:,} B")
    med = {k: statistics.median(x[k] for x in results) for k in ("read_s", "analyse_s")}
    print(f"read (every run's records, as strictly as load_run): {med['read_s']:.2f} s; streaks, changes and change "
          f"points: {med['analyse_s']:.2f} s; outputs: {total - med['read_s'] - med['analyse_s']:.2f} s (medians of "
          f"{len(results)})")
    print(f"in all: {total:.2f} s (goal < {GOAL_S:g} s) {'ok' if total < GOAL_S else 'OVER'}")
    print(f"peak RSS: {peak:.0f} MB (goal < {GOAL_MB} MB) {'ok' if peak < GOAL_MB else 'OVER'}")


if __name__ == "__main__":
    main()
