#!/usr/bin/env python3
"""Start-up time of `boot-harness` per command (issue 33: goal <= 0.3 s for `--help`, `validate`, `cells`), next to a
bare interpreter, measured side by side in one run: each round runs every command once in a fresh process, in a
rotating order, so no command always gets the warmer machine.

    .venv/bin/python benchmarks/cli_startup.py [--rounds 15]

It prints, per command, the median wall time and CPU time of its process, and its wall time over the bare
interpreter's (`python -c pass`): what the harness's imports cost on top of Python itself. Only what a command needs
is imported when it needs it (the run owner, the runtimes, docker-py and the analysis stay out of `--help`).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 0.3
COMMANDS = {
    "python -c pass (bare)": [sys.executable, "-c", "pass"],
    "--help": [sys.executable, "-m", "harness.cli", "--help"],
    "validate": [sys.executable, "-m", "harness.cli", "validate", "--matrix", "matrix.yaml"],
    "cells": [sys.executable, "-m", "harness.cli", "cells", "--matrix", "matrix.yaml"],
    "kv": [sys.executable, "-m", "harness.cli", "kv", "tests/data/kv/models/tiny-llama", "--", "--max-model-len",
           "4096"],
}


def once(argv: list[str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of argv in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env={**os.environ, "GLM_MODEL_DIR": "/models/glm"})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    rounds = ap.parse_args().rounds
    names = list(COMMANDS)
    got: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            got[n].append(once(COMMANDS[n]))
    bare = statistics.median(w for w, _ in got[names[0]])
    print(f"{'command':24} {'wall s':>8} {'cpu s':>8} {'x bare':>7}  (medians of {rounds}; goal <= {GOAL_S} s)")
    for n in names:
        wall = statistics.median(w for w, _ in got[n])
        cpu = statistics.median(c for _, c in got[n])
        flag = "" if n == names[0] or n == "kv" else ("  ok" if wall <= GOAL_S else "  OVER")
        print(f"{n:24} {wall:8.3f} {cpu:8.3f} {wall / bare:7.1f}{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
