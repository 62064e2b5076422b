"""One `boot-harness run` of one fake server that floods its log, with the harness's own peak RSS: shared by
test_server_faults.py and benchmarks/log_flood_rss.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.cli import boot_harness
from tests.helpers.reliability import fake_matrix

#: `boot-harness ARGS`, then its own peak RSS on stderr: VmHWM, the high-water mark of this process image's memory.
#: (Not getrusage's ru_maxrss: Linux carries it across exec, so it would report the forking parent's RSS if larger.)
WRAPPER = ("import re, sys\nfrom harness.cli import main\nrc = main(sys.argv[1:])\n"
           "hwm = re.search(r'VmHWM:\\s+(\\d+) kB', open('/proc/self/status').read()).group(1)\n"
           "print(f'BOOT_HARNESS_MAXRSS_KB {hwm}', file=sys.stderr)\n"
           "sys.exit(rc)\n")


def flood_run(mb: float, when: str, probe_delay: float, runtime: str, work: Path, timeout_s: float,
              **fake_env: str) -> dict:
    """One `boot-harness run` of one flooding cell; returns its peak RSS, outcome, log size and wall time.
    `fake_env`: more FAKE_VLLM_* knobs (FAKE_VLLM_FLOOD_LINE_KB, FAKE_VLLM_LOG_REQUESTS)."""
    work.mkdir(parents=True, exist_ok=True)
    env = {"FAKE_VLLM_SCENARIO": "flood", "FAKE_VLLM_FLOOD_MB": str(mb), "FAKE_VLLM_FLOOD_WHEN": when,
           "FAKE_VLLM_PROBE_DELAY": str(probe_delay), "FAKE_VLLM_DELAY": "0.1", **fake_env}
    matrix = fake_matrix(work / "flood.yaml", {"flood": env}, runtime=runtime, timeout_s=timeout_s)
    results = work / "results"
    t0 = time.monotonic()
    proc = boot_harness("run", "--matrix", matrix, "--results-dir", results, program=(sys.executable, "-c", WRAPPER),
                        timeout=timeout_s + 120)
    wall = time.monotonic() - t0
    rss = [line for line in proc.stderr.splitlines() if line.startswith("BOOT_HARNESS_MAXRSS_KB")]
    if not rss:
        raise RuntimeError(f"the harness did not report its RSS (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    (run_dir,) = [p for p in results.iterdir() if (p / "results.json").exists()]
    cell = json.loads((run_dir / "results.json").read_text())["cells"][0]
    log = run_dir / cell["log_path"]
    cut = cell.get("log_cut") or {}
    return {"peak_rss_mb": int(rss[0].split()[1]) / 1024, "outcome": f"{cell['outcome']}/{cell['reason']}",
            "detail": cell["detail"],
            "log_mb": log.stat().st_size / 2**20, "wall_s": wall, "verdict_s": cell["timings"]["verdict_s"],
            "rc": proc.returncode,
            # what the server wrote (the saved log is held to log_max_mb) and the lines only skimmed past the cap
            "written_mb": cut.get("written_bytes", log.stat().st_size) / 2**20,
            "skimmed_lines": cut.get("skimmed_lines", 0)}
