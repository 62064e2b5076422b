#!/usr/bin/env python3
"""Verdict latency and wall-time overhead of the harness, against a bare poll loop, on real vLLM boots.

    . "$(bash scripts/setup-cpu-example.sh | tail -1)"; .venv/bin/python benchmarks/verdict_latency.py [--rounds N]

Each round boots the same two cells of examples/cpu-tiny.yaml (one that boots, one the draft model tips into a KV
refusal) twice, side by side in this one run: once through the harness (CellRunner: the real watch loop, health poll,
probe, teardown) and once with what people do by hand — start `vllm serve`, poll /health every 0.5 s until 200 or the
process exits, then stop it. It prints:
- verdict latency after the decisive event: the readiness line (boots) or the refusal line (refusals) as the harness
  saw it arrive, to the verdict; p50 / p95 / max (target p95 <= 0.3 s; a boot's includes the 1-token probe);
- wall time per cell, harness vs bare loop, and the ratio (target overhead <= 3 %);
- how much sooner the harness knows a refusal than the bare loop, which has to wait for the exit.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.cells import expand_cells, select_cells  # noqa: E402
from harness.matrix.load import load_matrix  # noqa: E402
from harness.results.store import RunStore  # noqa: E402
from harness.runner import CellRunner, watch_config  # noqa: E402
from harness.runtime.ports import free_port  # noqa: E402
from harness.runtime.process import SERVER_ENV, ProcessRuntime, cell_dirs  # noqa: E402

CELLS = ["mml2048-spec_off-kv_tight", "mml2048-spec_draft-kv_tight"]


def bare_loop(runtime: ProcessRuntime, cell, work: Path, interval: float = 0.5) -> tuple[str, float]:
    """By hand: start it, poll /health until 200 or exit, stop it. Returns (verdict, wall seconds)."""
    port = free_port()
    argv = runtime.argv(cell, port)
    env = {**os.environ, **SERVER_ENV, **cell_dirs(work), **cell.env}
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    verdict = "timeout"
    try:
        while time.monotonic() - t0 < 600:
            if proc.poll() is not None:
                verdict = "exited"
                break
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    verdict = "healthy"
                    break
            except requests.RequestException:
                pass
            time.sleep(interval)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    return verdict, time.monotonic() - t0


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    k = max(0, min(len(values) - 1, round(p / 100 * (len(values) - 1))))
    return values[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    loaded = load_matrix(ROOT / "examples" / "cpu-tiny.yaml")
    cells = select_cells(expand_cells(loaded.matrix), [",".join(CELLS[:1]), CELLS[1]], loaded.matrix)
    runtime = ProcessRuntime(loaded.matrix.command)
    runtime.preflight(cells)
    with tempfile.TemporaryDirectory(prefix="bh-bench-") as tmp:
        store = RunStore.create(Path(tmp) / "results", loaded, runtime.name)
        runner = CellRunner(loaded, runtime, store, watch_config(loaded))
        latencies: list[float] = []
        rows = []
        for r in range(args.rounds):
            for cell in cells:
                order = ["harness", "bare"] if r % 2 == 0 else ["bare", "harness"]
                got = {}
                for who in order:
                    if who == "harness":
                        res = runner.run(cell)
                        t = res.timings
                        event = t.ready_line_s if res.outcome == "booted" else t.event_s
                        lat = (t.verdict_s - event) if (event is not None and t.verdict_s is not None) else None
                        if lat is not None:
                            latencies.append(lat)
                        got[who] = (res.outcome, t.total_s, lat, t.verdict_s)
                    else:
                        verdict, wall = bare_loop(runtime, cell, Path(tmp) / f"bare-{r}-{cell.id}")
                        got[who] = (verdict, wall, None, wall)
                rows.append((r, cell.id, got))
                h, b = got["harness"], got["bare"]
                print(f"round {r} {cell.id}: harness {h[0]} verdict {h[3]:.2f}s total {h[1]:.2f}s "
                      f"(latency {h[2] if h[2] is None else f'{h[2]:.3f}s'}) | bare {b[0]} {b[1]:.2f}s", flush=True)
    print("\n== verdict latency after the decisive event (harness) ==")
    if latencies:
        print(f"n={len(latencies)}  p50={statistics.median(latencies):.3f}s  p95={pct(latencies, 95):.3f}s  "
              f"max={max(latencies):.3f}s  (target p95 <= 0.3 s)")
    print("\n== wall time per cell: harness / bare poll loop ==")
    for cid in CELLS:
        hs = [g["harness"][1] for _, c, g in rows if c == cid]
        bs = [g["bare"][1] for _, c, g in rows if c == cid]
        hv = [g["harness"][3] for _, c, g in rows if c == cid]
        ratio = sum(hs) / sum(bs)
        print(f"{cid}: harness total {statistics.mean(hs):.2f}s, bare {statistics.mean(bs):.2f}s, "
              f"ratio {ratio:.3f} (overhead {100 * (ratio - 1):+.1f} %; target <= +3 %); "
              f"harness verdict at {statistics.mean(hv):.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
