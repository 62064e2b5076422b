"""Real boots through the CLI: a matrix run to its run directory, what a run left (its records, its processes), a
printed repro command booted in a shell, and a real boot's timeline checked against its log."""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
from pathlib import Path

from tests.cli import boot_harness, start_boot_harness
from tests.helpers.env import ROOT

CPU_EXAMPLE = ROOT / "examples" / "cpu-tiny.yaml"
#: `boot-harness ARGS` (tests/cli.py), with a deadline long enough for real boots.
harness_cli = functools.partial(boot_harness, timeout=1800)


def run_matrix(matrix: Path, results: Path, env: dict | None = None, *args: str):
    """`boot-harness run` of a whole matrix into `results`: (the process, its one run dir, cell id → cell record)."""
    proc = harness_cli("run", "--matrix", str(matrix), "--results-dir", str(results), *args, env=env)
    run_dir = only_run_dir(results)
    return proc, run_dir, {c["cell_id"]: c for c in read_run(run_dir)["cells"]}


def read_run(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def only_run_dir(results_dir: Path) -> Path:
    runs = [p for p in results_dir.iterdir() if (p / "results.json").exists()]
    assert len(runs) == 1, runs
    return runs[0]


def interrupt_when_started(argv: list[str], env: dict, started, settle_s: float, sig=None) -> tuple[int, str, float]:
    """Start a harness command, wait until `started()` is true (its server exists), let it settle, send SIGINT;
    returns (exit code, output, seconds from the signal to the harness's exit: a figure, not a bound; the 120 s wait
    for the exit is only a guard against a hang)."""
    import signal as _signal
    import time

    sig = _signal.SIGINT if sig is None else sig
    proc = start_boot_harness(*argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not started():
            time.sleep(0.2)
        assert started(), "the server never started"
        time.sleep(settle_s)
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=120)
        return proc.returncode, out, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()


def stopped_mid_boot(run_dir: Path) -> None:
    """A run interrupted while its server booted was stopped, not waited for: it has no cell (the verdict is void) and
    no server's log in it reached readiness. What an interrupt proves, read from the run, not from a clock."""
    run = read_run(run_dir)
    assert run["status"] == "interrupted" and run["cells"] == [], [c["cell_id"] for c in run["cells"]]
    logs = sorted((run_dir / "logs").glob("*.log"))
    assert logs, f"no server log in {run_dir / 'logs'}"
    ready = [p.name for p in logs if "Application startup complete" in p.read_text(errors="replace")]
    assert ready == [], f"the harness waited for the boot instead of stopping it: {ready}"


def processes_with(needle: str) -> list[int]:
    """PIDs whose command line contains `needle` (a run-unique path or port): what a leak check looks for."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


def boots_in_a_shell(command: str, port: int, timeout_s: float, cleanup: list[str], env: dict | None = None) -> None:
    """Run a printed repro command with bash, as a user pasting it would, and assert that its server answers /health 200
    on `port` within `timeout_s`; `cleanup` (an argv, e.g. `docker rm -f NAME`) runs afterwards either way."""
    import time

    import requests

    shell = subprocess.Popen(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env={**os.environ, **(env or {})})
    try:
        deadline, healthy = time.monotonic() + timeout_s, False
        while time.monotonic() < deadline and shell.poll() is None and not healthy:
            try:
                healthy = requests.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except requests.RequestException:
                time.sleep(0.5)
        assert healthy, (shell.stdout.read() if shell.poll() is not None else f"no /health 200 within {timeout_s} s")
    finally:
        subprocess.run(cleanup, capture_output=True, env={**os.environ, **(env or {})})
        shell.wait(timeout=60)


_WEIGHTS = re.compile(r"^(\(\w+ pid=\d+\)) .*\] Loading weights took ([\d.]+) seconds$")
_INIT = re.compile(r"\] init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s")


#: The milestones every booted CPU cell passes (no CUDA graphs on a CPU; eager cells compile nothing).
BOOTED_MILESTONES = {"started", "first_line", "engine_started", "loading_started", "weights_loaded", "kv_sized",
                     "engine_ready", "listening", "healthy", "served", "decided"}


def check_timeline(cell: dict, log: Path) -> None:
    """A real boot's timeline: milestones on the harness's clock in boot order, the ones its outcome implies, and
    durations equal to the figures in its saved log (read here with plain regexes, not the harness's parser)."""
    t = cell["timeline"]
    m = {k: v for k, v in t["milestones"].items() if v is not None}
    order = [k for k in t["milestones"] if k in m]  # the schema's order is the boot order
    assert [m[k] for k in order] == sorted(m[k] for k in order), f"{cell['cell_id']}: milestones out of order: {m}"
    assert m["decided"] == cell["timings"]["verdict_s"]
    if cell["outcome"] == "booted":
        assert BOOTED_MILESTONES <= set(m), f"{cell['cell_id']}: missing {BOOTED_MILESTONES - set(m)}"
        assert t["phase"]["after"] == "served"
    elif cell["reason"] == "kv_cache_too_small":
        assert {"engine_started", "weights_loaded"} <= set(m) and "healthy" not in m
        assert t["phase"]["name"] == "profiling and KV sizing", t["phase"]
    per_process: dict[str, float] = {}
    init = None
    for line in log.read_text(errors="replace").splitlines():
        if w := _WEIGHTS.match(line):
            per_process[w.group(1)] = per_process.get(w.group(1), 0.0) + float(w.group(2))
        if i := _INIT.search(line):
            init = float(i.group(1))
    d = t["durations"]
    assert d["weights_load_s"] == (round(max(per_process.values()), 6) if per_process else None)
    assert d["engine_init_s"] == init
