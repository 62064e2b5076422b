#!/usr/bin/env python3
"""Run every `boot-harness ...` and `pytest tests/test_boot_matrix.py ...` command that README.md and docs/*.md show in
a ```bash or ```sh block, as written, from the root of a copy of the repository.

    python scripts/check-docs.py            # one line per command: ok / FAILED, exit 1 if any failed

Only what a GPU or an engine would do is stood in: the commands boot on the in-process FakeRuntime
(the FakeRuntime, handed in by tests/standins/cli: every cell boots), the GPU is the stand-in NVML. What the docs leave
to the reader is filled in the one way a reader would: `[optional parts]` are left out, `<run-id>`-style placeholders
name a run made first (the CPU example, booted the same way), `M`/`F` the CPU example's matrix, `RESULTS_DIR` `results`.
A command passes when it neither prints a traceback nor exits 2 (bad input; 4 for pytest): a doc that shows a command
the CLI rejects, or a flag that no longer exists, fails here. Exit 1 (an expectation the fake boots do not meet) is
allowed.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "results" / "README.md"]
BLOCK = re.compile(r"```(bash|sh)\n(.*?)```", re.S)
WANTED = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(?:boot-harness\s|pytest\s+tests/test_boot_matrix\.py)")


def commands(path: Path) -> list[tuple[int, str]]:
    """(line number, command) for each wanted command of the file's bash/sh blocks, continuation lines joined."""
    text = path.read_text()
    out = []
    for m in BLOCK.finditer(text):
        first = text[:m.start(2)].count("\n") + 1
        lines = m.group(2).splitlines()
        i = 0
        while i < len(lines):
            n, line = first + i, lines[i]
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i].strip()
            i += 1
            line = re.sub(r"\s{2,}#.*$", "", line.strip()).removeprefix("$ ")
            if WANTED.match(line):
                out.append((n, line))
    return out


def fill(command: str, run_id: str) -> str:
    """The command as a reader types it: optional parts dropped, placeholders named."""
    command = re.sub(r"\s*\[[^\]]*\]", "", command)
    for placeholder in ("<run-id>", "<run_id>", "<last-night>", "<tonight>", "<run>"):
        command = command.replace(placeholder, run_id)
    command = re.sub(r"\bRESULTS_DIR\b", "results", command)
    command = re.sub(r"(--matrix|-m)\s+[MF]\b", r"\1 examples/cpu-tiny.yaml", command)
    command = command.replace("<cell>", "mml2048-spec_off-kv_tight")
    return command


def workspace() -> Path:
    ws = Path(tempfile.mkdtemp(prefix="bh-docs-"))
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        if (ROOT / rel).is_file():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, ws / rel)
    return ws


def main() -> int:
    ws = workspace()
    standin = ws / "tests" / "standins"
    # the fake runtime by argument: a stand-in `boot-harness` first on PATH, the pytest plugin's fixture overridden
    env = {**os.environ, "PYTHONPATH": f"{standin / 'nvml'}:{standin / 'cli'}", "PYTEST_PLUGINS": "fake_runtime_plugin",
           "STANDIN_NVML_HOLD_S": "0", "VLLM_CPU_VENV": str(ws / ".no-venv"), "TINY_MODELS": str(ws / ".no-models"),
           "GLM_MODEL_DIR": str(ws / ".no-models"),
           "PATH": f"{standin / 'cli'}:{Path(sys.executable).parent}:{os.environ['PATH']}"}
    try:
        first = subprocess.run(["boot-harness", "run", "--matrix", "examples/cpu-tiny.yaml"], cwd=ws, env=env,
                               capture_output=True, text=True, timeout=300)
        runs = sorted(p.name for p in (ws / "results").iterdir() if (p / "results.json").exists())
        if not runs:
            print(f"could not make the example run: {first.stderr[-2000:]}")
            return 1
        (ws / "merged").mkdir(exist_ok=True)
        shutil.copytree(ws / "results" / runs[0], ws / "merged" / f"nightly-{runs[0]}")
        shutil.copytree(ws / "results" / runs[0], ws / "shards" / "boot-run-shard-1" / runs[0])  # a CI download
        failed = 0
        for doc in DOCS:
            for n, shown in commands(doc):
                command = fill(shown, runs[0])
                proc = subprocess.run(["bash", "-c", command], cwd=ws, env=env, capture_output=True, text=True,
                                      timeout=600)
                usage = 4 if " pytest " in f" {command} " else 2  # pytest's usage error is 4
                bad = proc.returncode == usage or "Traceback" in proc.stderr + proc.stdout
                where = f"{doc.relative_to(ROOT)}:{n}"
                if bad:
                    failed += 1
                    said = (proc.stderr.strip().splitlines() or ["(nothing on stderr)"])[-1]
                    print(f"FAILED {where}: {shlex.join(['bash', '-c', command])} → exit {proc.returncode}: {said}")
                else:
                    print(f"ok     {where}: {command} (exit {proc.returncode})")
        return 1 if failed else 0
    finally:
        shutil.rmtree(ws, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
