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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _sidebyside import ROOT, poll_health, side_by_side

from harness.boot.session import RunOptions, RunSession
from harness.matrix.cells import select_cells
from harness.matrix.load import load_matrix
from harness.runtime.ports import free_port
from harness.runtime.process import ProcessRuntime
from harness.runtime.server_env import build_env

CELLS = ["mml2048-spec_off-kv_tight", "mml2048-spec_draft-kv_tight"]


def bare_loop(runtime: ProcessRuntime, cell, work: Path, interval: float = 0.5) -> tuple[str, float]:
    """By hand: start it, poll /health every `interval` until 200 or exit, stop it."""
    port = free_port()
    env = build_env(cell.env, cache_root=None, work_dir=work, base=os.environ)
    t0 = time.monotonic()
    proc = subprocess.Popen(runtime.argv(cell, port), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        verdict = poll_health(port, lambda: None if proc.poll() is None else f"exited({proc.returncode})", interval)
    finally:
        for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 30)):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=wait)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
    return verdict, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    loaded = load_matrix(ROOT / "examples" / "cpu-tiny.yaml")
    cells = select_cells(list(loaded.cells), CELLS, loaded.matrix)
    runtime = ProcessRuntime(loaded.matrix.command)
    with tempfile.TemporaryDirectory(prefix="bh-bench-") as tmp:
        session = RunSession.open(loaded, cells, RunOptions(results_dir=Path(tmp) / "results"), runtime=runtime)
        side_by_side(cells, session.boot, lambda cell, r: bare_loop(runtime, cell, Path(tmp) / f"bare-{r}-{cell.id}"),
                     args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
