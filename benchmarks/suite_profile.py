"""Where the test suite's time goes: its slowest tests and the real vLLM boots each test folder makes.

    python benchmarks/suite_profile.py sample BOOTS.tsv &          # while the suite runs: every vLLM API server started
    bash scripts/test.sh --report-log=REPORT.jsonl                 # (pytest-reportlog, in the test extra)
    python benchmarks/suite_profile.py report REPORT.jsonl BOOTS.tsv [--top 15]

`sample` polls /proc twice a second for new vLLM API server processes (on the host or in a container: a container's
processes are in the host's /proc too) and writes one line each: the time, the pid and the test that started it,
found as PYTEST_CURRENT_TEST in the environment of the process or of an ancestor, or else of the harness that owns its
container (the `boot-harness.owner-pid` label). `report` prints the slowest tests (setup + call + teardown) and the
boots per folder, a boot without a recorded test placed by time in the test that was running then.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

SERVER = re.compile(r"vllm\.entrypoints\.openai\.api_server|vllm serve")


def _read(pid: int | str, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


def _test_of(pid: int) -> str:
    """PYTEST_CURRENT_TEST of the process or its nearest ancestor that has it ('' when none does)."""
    seen = 0
    while pid > 1 and seen < 32:
        for entry in _read(pid, "environ").split(b"\0"):
            if entry.startswith(b"PYTEST_CURRENT_TEST="):
                return entry.split(b"=", 1)[1].decode(errors="replace").rsplit(" (", 1)[0]
        stat = _read(pid, "stat").decode(errors="replace")
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            return ""
        seen += 1
    return ""


def _container_owner(pid: int) -> int | None:
    m = re.search(rb"([0-9a-f]{64})", _read(pid, "cgroup"))
    if not m:
        return None
    for engine in ("docker", "podman"):
        try:
            out = subprocess.run([engine, "inspect", "-f", '{{index .Config.Labels "boot-harness.owner-pid"}}',
                                  m.group(1).decode()], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.isdigit():
            return int(out)
    return None


def sample(out_path: Path) -> None:
    seen: set[str] = set()
    with out_path.open("a", buffering=1) as out:
        while True:
            for entry in os.listdir("/proc"):
                if not entry.isdigit() or entry in seen:
                    continue
                seen.add(entry)
                cmd = _read(entry, "cmdline").replace(b"\0", b" ").decode(errors="replace")
                if not SERVER.search(cmd) or "fake" in cmd:
                    continue
                pid = int(entry)
                test = _test_of(pid)
                if not test:
                    owner = _container_owner(pid)
                    test = _test_of(owner) if owner else ""
                out.write(f"{time.time():.1f}\t{pid}\t{test}\n")
            time.sleep(0.5)


def _tests(report_log: Path) -> dict[str, dict]:
    """nodeid -> {'s': seconds over its phases, 'start', 'stop'}."""
    tests: dict[str, dict] = {}
    for line in report_log.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("$report_type") != "TestReport":
            continue
        nodeid = rec["nodeid"].split("@", 1)[0]
        t = tests.setdefault(nodeid, {"s": 0.0, "start": rec["start"], "stop": rec["stop"]})
        t["s"] += rec["duration"]
        t["start"], t["stop"] = min(t["start"], rec["start"]), max(t["stop"], rec["stop"])
    return tests


def folder(nodeid: str) -> str:
    parts = nodeid.split("::", 1)[0].split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def report(report_log: Path, boots: Path, top: int) -> None:
    tests = _tests(report_log)
    wall = max(t["stop"] for t in tests.values()) - min(t["start"] for t in tests.values())
    print(f"{len(tests)} tests, {wall:.0f} s from the first test's start to the last one's end\n")
    print(f"slowest {top} (setup + call + teardown):")
    for nodeid, t in sorted(tests.items(), key=lambda kv: -kv[1]["s"])[:top]:
        print(f"  {t['s']:7.1f} s  {nodeid}")
    per_folder: Counter[str] = Counter()
    per_test: Counter[str] = Counter()
    unplaced = 0
    for line in boots.read_text().splitlines():
        parts = line.split("\t")
        when, test = float(parts[0]), (parts[2] if len(parts) > 2 else "")
        if not test:
            running = [n for n, t in tests.items() if t["start"] <= when <= t["stop"]]
            test = running[0] if running else ""
        if not test:
            unplaced += 1
            continue
        per_folder[folder(test)] += 1
        per_test[test.split("[", 1)[0]] += 1
    by_folder_s: defaultdict[str, float] = defaultdict(float)
    for nodeid, t in tests.items():
        by_folder_s[folder(nodeid)] += t["s"]
    print(f"\nreal vLLM boots per folder ({sum(per_folder.values())} in all"
          f"{f', {unplaced} outside any test' if unplaced else ''}), and the folder's test time:")
    for f in sorted(by_folder_s, key=lambda f: -by_folder_s[f]):
        print(f"  {per_folder[f]:4d} boots  {by_folder_s[f]:7.0f} s  {f}")
    print("\nboots per test function:")
    for test, n in per_test.most_common():
        print(f"  {n:4d}  {test}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sample")
    s.add_argument("out", type=Path)
    r = sub.add_parser("report")
    r.add_argument("report_log", type=Path)
    r.add_argument("boots", type=Path)
    r.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    if args.cmd == "sample":
        sample(args.out)
    else:
        report(args.report_log, args.boots, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
