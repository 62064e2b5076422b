#!/usr/bin/env python3
"""Container runtime: the harness's time to verdict against a bare `docker run` + poll loop, same image and cells.

    bash scripts/setup-container-example.sh; .venv/bin/python benchmarks/container_overhead.py [--rounds N]

Each round boots two cells of examples/cpu-container.yaml (unpatched image: one boots, one the draft model tips into a
KV refusal) through the harness (testcontainers, live log watch, probe, teardown) and by hand: `docker run -d`, poll
/health every 0.5 s until 200 or the container exits, `docker rm -f`. Prints verdict latency after the decisive event
(target p95 <= 0.3 s) and wall time per cell, harness vs bare (target overhead <= 3 %).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _sidebyside import ROOT, poll_health, side_by_side

from harness.boot.session import RunOptions, RunSession
from harness.matrix.cells import select_cells
from harness.matrix.load import load_matrix
from harness.runtime.container import ContainerRuntime
from harness.runtime.ports import free_port
from harness.runtime.server_env import build_env

CELLS = ["image_unpatched-spec_off-floor_none", "image_unpatched-spec_draft-floor_none"]


def bare_docker(matrix, cell, interval: float = 0.5) -> tuple[str, float]:
    port, name = free_port(), f"bh-bench-bare-{cell.id}"
    argv = ["docker", "run", "-d", "--init", "--name", name, "-p", f"127.0.0.1:{port}:8000"]
    if matrix.shm_size:
        argv += ["--shm-size", matrix.shm_size]
    for k, v in build_env(cell.env, cache_root=None).items():
        argv += ["-e", f"{k}={v}"]
    argv += [cell.image, *cell.server_args]
    t0 = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True)
    def exited() -> str | None:
        state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name],
                               capture_output=True, text=True).stdout.split()
        return f"exited({state[1]})" if state and state[0] == "exited" else None

    try:
        verdict = poll_health(port, exited, interval)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    return verdict, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--cell", action="append", dest="cells", metavar="ID", help=f"cells to boot (default: {CELLS})")
    args = ap.parse_args()
    loaded = load_matrix(ROOT / "examples" / "cpu-container.yaml")
    cells = select_cells(list(loaded.cells), args.cells or CELLS, loaded.matrix)
    runtime = ContainerRuntime.for_matrix(loaded)
    with tempfile.TemporaryDirectory(prefix="bh-bench-") as tmp:
        session = RunSession.open(loaded, cells, RunOptions(results_dir=Path(tmp) / "results"), runtime=runtime)
        side_by_side(cells, session.boot, lambda cell, r: bare_docker(loaded.matrix, cell), args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
