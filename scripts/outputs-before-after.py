#!/usr/bin/env python3
"""Every command's text output on the shipped examples, on an earlier commit's code and on this tree's: the proof
that a refactor changed no byte a user reads (issue 41: "the records, CLI outputs and exit codes are byte-identical").

    python scripts/outputs-before-after.py                   # against 9fc699a (before issue 41's refactors)
    python scripts/outputs-before-after.py --before REF      # against another commit
    python scripts/outputs-before-after.py --keep DIR        # also keep both sides' outputs in DIR/{before,after}

`git archive REF` gives the old code; each side runs every case in one child process (`harness.cli.main` in-process,
PYTHONPATH at that side's tree), from this repository's root and on its inputs (examples/, tests/data/: the same
bytes for both), with COLUMNS fixed and stdout a pipe (a StringIO; the `--help` cases and the plugin's pytest --help
also through a real pipe, as children). A case is its stdout, stderr, exit code and every file it wrote (under one
scratch folder, the same path on both sides; a binary file by its sha256). What varies from run to run is normalised
on both sides alike: the scratch and code paths, a fake run's ids, times and durations (the `VOLATILE` cases only).
scripts/json-outputs.py compares the `--json` outputs; this file every other output.

Exit 1 when a case differs and `KNOWN` does not name it with the issue that changed it on purpose.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

ROOT = Path(__file__).resolve().parent.parent
BEFORE = "9fc699a"
NIGHTS = ["examples/runs/cpu-tiny-night1", "examples/runs/cpu-tiny-night2", "examples/runs/cpu-tiny-night3"]
TINY = "tests/data/kv/models/tiny-llama"
#: What the example matrices need set to be planned here (the tiny models the tests ship; no server is started).
ENV = {"TINY_MODELS": "tests/data/kv/models", "VLLM_CPU_VENV": "/nonexistent/venv",
       "ARCH_MODELS": "tests/data/kv/models", "COLUMNS": "120", "LINES": "40", "NO_COLOR": "1"}
#: Variables the bad-matrix corpus relies on being unset (as tests/reliability/bad_input_table.py).
UNSET = ("BOOT_HARNESS_TEST_UNSET", "BOOT_HARNESS_TEST_UNSET_TOO", "MODEL", "VLLM_IMAGE", "FORCE_COLOR", "TERM")
MATRICES = ["examples/cpu-tiny.yaml", "examples/cpu-weights.yaml", "examples/cpu-architectures.yaml",
            "examples/cpu-container.yaml", "matrix.yaml"]
GOOD = sorted(f"tests/data/good_matrices/{p.name}" for p in (ROOT / "tests/data/good_matrices").glob("*.yaml"))
BAD = [f"{d}/{p.name}" for d in ("tests/data/bad_matrices", "tests/reliability/data/bad_matrices")
       for p in sorted((ROOT / d).iterdir()) if p.suffix in (".yaml", ".yml") or p.is_dir()]
LOGS = sorted(str(p.relative_to(ROOT)) for d in ("tests/data/logs", *(f"{n}/logs" for n in NIGHTS))
              for p in (ROOT / d).rglob("*.log"))
COMMANDS = ["validate", "cells", "run", "repro", "gc", "merge", "facts", "compare", "analyze", "frontier", "report",
            "check", "history", "kv", "plan", "bisect"]
#: Cases whose output holds what a fresh run makes anew each time (run ids, clock times, durations).
VOLATILE = ("bisect-", "run-fake", "merge-fake")
SCRATCH_NAME = "boot-harness-outputs-scratch"

class Known(NamedTuple):
    """A difference made on purpose: the issue that made it, why, and the changed lines it may account for (a regex
    each changed line must match; None: any line of the cases it names)."""

    issue: str
    why: str
    lines: str | None = None


#: A fresh record's `stop` (how the teardown ended its server), and null in a record written again from an older one.
STOP = (r'\s*("stop": (\{|null,)|"how": "(exited|terminated|killed|left|unknown)",|"(grace_s|gone_s)": ("<f>"|null),'
        r'|"exit_code": (-?\d+|null),|"left": \d+,|"note": (null|".*")|\},)')

#: Differences made on purpose since 9fc699a, by case name prefix. Any other changed line fails the comparison.
KNOWN: dict[str, Known] = {
    "repro-patched": Known("issue 42", "a patched cell's file is made under RESULTS_DIR/repro/patches/CELL/ (was the "
                                       "shared work dir)", r".*(repro/patches/|/patches/).*"),
    "help-repro": Known("issue 42", "repro --help says the printed steps keep a patched cell's file under "
                                    "RESULTS_DIR/repro/patches/CELL/", r".*repro/(patches/)?CELL/.*|.*sha256sum -c.*|"
                                                                       r"in order\."),
    "help-check": Known("issue 41 (4)", "check --json is new", r"usage: boot-harness check .*|.*--json.*|\s{8,}\S.*"),
    "help-report": Known("issue 41 (4)", "report --json is new", r".*--json.*|\s{8,}\S.*"),
    "help-bisect": Known("issue 43", "bisect --from is new", r".*--from RUN.*|\s{8,}\S.*"),
    "pytest-help": Known("issue 41 (6)", "the plugin's options are --boot-* only (the old spellings still read, "
                                         "with a deprecation line, but are no longer listed)",
                         r"\s+--boot-.*|\s{8,}\S.*"),
    "bisect-fake": Known("issue 43; the stop record", "bisect's answer says how many ends were read from records "
                                                      "(was `from the run`), and bisect.json keeps the runs read from "
                                                      "(`read_from`, `from`); each boot's record says how its server "
                                                      "was stopped (`stop`)",
                         r'\s*("read_from": \[|null|\],?|"from": \[\],?)|.*0 read from (records|the run)\.|' + STOP),
    "bad-cells-tests_data_bad_matrices_expect_reason_misspelt": Known(
        "issue 40, round four", "the reasons a `refused` expectation may name list the two new config refusals "
                                "(speculative_config_invalid, lora_rank_exceeds_max)", r'.*unknown reason .*'),
    "bad-validate-tests_data_bad_matrices_expect_reason_misspelt": Known(
        "issue 40, round four", "the reasons a `refused` expectation may name list the two new config refusals "
                                "(speculative_config_invalid, lora_rank_exceeds_max)", r'.*unknown reason .*'),
    "run-fake": Known("the stop record", "each fresh cell record says how its server was stopped (`stop`)", STOP),
    "merge-": Known("the stop record", "a merged record written again from an older one holds `stop: null`", STOP),
    "facts-": Known("issue 41 (this check)", "a saved log ends at its last timestamp, whichever lines the parser's "
                                            "pre-check reads (it was the last line read: issue 40's pre-check reads "
                                            "other lines, which moved it)", r"  the log ends in .* for [0-9.]+ s"),
}


# --- the cases ------------------------------------------------------------------------------------------------------

class Case:
    """One command line: `argv` run in-process, or `child` (a whole command line run as a child, through a pipe)."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str] | None = None,
                 child: list[str] | None = None, runtime: str | None = None):
        self.name, self.argv, self.env, self.child, self.runtime = name, argv, env or {}, child, runtime


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name: str, *argv: str, **kw: Any) -> None:
        out.append(Case(name, list(argv), **kw))

    add("help", "--help")
    add("version", "--version")
    add("no-command")
    for c in COMMANDS:
        add(f"help-{c}", c, "--help")
        add(f"help-{c}-narrow", c, "--help", env={"COLUMNS": "72"})
    out.append(Case("help-piped", [], child=["-m", "harness.cli", "--help"]))
    out.append(Case("help-report-piped", [], child=["-m", "harness.cli", "report", "--help"]))
    out.append(Case("pytest-help", [], child=["-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                                              "--help"]))
    for m in [*MATRICES, *GOOD]:
        stem = Path(m).stem
        add(f"validate-{stem}", "validate", "--matrix", m)
        add(f"cells-{stem}", "cells", "--matrix", m)
        add(f"dry-run-{stem}", "run", "--matrix", m, "--dry-run", "--results-dir", "{scratch}/results")
    add("cells-select", "cells", "--matrix", MATRICES[0], "--select", "spec=draft", "--shard", "1/2")
    add("cells-glob", "cells", "--matrix", MATRICES[0], "--select", "mml4096-*")
    add("dry-run-select", "run", "--matrix", MATRICES[0], "--dry-run", "--select", "kv=tight", "--shard", "2/2",
        "--timeout-s", "30", "--results-dir", "{scratch}/results")
    add("dry-run-resume", "run", "--matrix", MATRICES[0], "--dry-run", "--resume", NIGHTS[0])
    for m, cid in ((MATRICES[0], "mml2048-spec_draft-kv_tight"), (MATRICES[0], "mml4096-spec_off-kv_tight"),
                   (MATRICES[3], "image_unpatched-spec_off-floor_none"),
                   (MATRICES[3], "image_patched-spec_draft-floor_env"),
                   (MATRICES[4], "mml131072-mtp_off-floor_none-image_unpatched"),
                   (MATRICES[4], "mml262144-mtp4-floor_bytes-image_patched"),
                   ("tests/data/good_matrices/docker-patched.yaml", "build_release-mml32768"),
                   ("tests/data/good_matrices/docker-patched.yaml", "build_kvfloor-mml131072")):
        patched = "image_patched" in cid or "build_" in cid
        add(f"repro{'-patched' if patched else ''}-{Path(m).stem}-{cid}", "repro", "--matrix", m, cid,
            "--results-dir", "{scratch}/results", "--port", "8123")
    add("repro-unknown-cell", "repro", "--matrix", MATRICES[0], "no-such-cell")
    for log in LOGS:
        add(f"facts-{log.replace('/', '_')}", "facts", log)
    add("kv-fits", "kv", TINY, "--platform", "cpu", "--available-bytes", "3145728", "--", "--max-model-len", "2048")
    add("kv-refused", "kv", TINY, "--platform", "cpu", "--available-bytes", "3145728", "--", "--max-model-len", "4096")
    add("kv-gib", "kv", TINY, "--available-gib", "0.01", "--vllm-version", "0.11.0", "--", "--max-model-len", "2048",
        "--block-size", "32")
    for log in LOGS[-12:]:
        add(f"kv-log-{log.replace('/', '_')}", "kv", TINY, "--log", log)
    for m in MATRICES[:3]:
        add(f"plan-{Path(m).stem}", "plan", "--matrix", m, "--platform", "cpu")
    add("plan-gpu", "plan", "--matrix", MATRICES[0], "--gpu", "NVIDIA H100 80GB HBM3")
    add("plan-from", "plan", "--matrix", MATRICES[0], "--from", NIGHTS[0])
    for n in NIGHTS:
        name = Path(n).name
        add(f"report-{name}", "report", n)
        add(f"report-{name}-80", "report", n, env={"COLUMNS": "80"})
        add(f"report-{name}-200", "report", n, env={"COLUMNS": "200"})
        add(f"report-{name}-axis", "report", n, "--axis", "spec", "--length-axis", "max_model_len")
        add(f"report-{name}-md", "report", n, "--markdown", "-")
        add(f"report-{name}-files", "report", n, "--html", "{scratch}/r.html", "--markdown", "{scratch}/r.md",
            "--plot", "{scratch}/kv.png")
        add(f"analyze-{name}", "analyze", n)
        add(f"analyze-{name}-block", "analyze", n, "--block-size", "16")
        add(f"compare-pairs-{name}", "compare", n, "--axis", "spec")
        add(f"compare-pairs-kv-{name}", "compare", n, "--axis", "kv")
        add(f"check-{name}", "check", n)
        add(f"check-{name}-results", "check", f"{n}/results.json")
    for i, j in ((0, 1), (1, 2), (0, 2), (2, 0)):
        add(f"compare-{i + 1}-{j + 1}", "compare", NIGHTS[i], NIGHTS[j])
    add("compare-tight", "compare", NIGHTS[0], NIGHTS[2], "--tolerance", "0", "--time-tolerance", "1%,0s",
        "--memory-tolerance", "1%,1B")
    add("history", "history", "examples/runs")
    add("history-80", "history", "examples/runs", env={"COLUMNS": "80"})
    add("history-last", "history", *NIGHTS[:2], "--select", "spec=draft", "--last", "1")
    add("history-md", "history", "examples/runs", "--markdown", "-")
    add("history-files", "history", "examples/runs", "--html", "{scratch}/h.html", "--markdown", "{scratch}/h.md")
    add("merge-one", "merge", NIGHTS[0], "--out", "{scratch}/merged")
    add("merge-two", "merge", NIGHTS[0], NIGHTS[1], "--out", "{scratch}/merged")
    add("merge-matrix", "merge", NIGHTS[2], "--out", "{scratch}/merged", "--matrix", MATRICES[0])
    add("run-fake", "run", "--matrix", "{scratch}/fake.yaml", "--results-dir", "{scratch}/results", runtime="run")
    add("bisect-fake", "bisect", "--matrix", "{scratch}/fake.yaml", "c_a", "--good", REFS[0], "--bad", REFS[-1],
        "--refs", *REFS[1:-1], "--results-dir", "{scratch}/results", runtime="bisect")
    add("bisect-fake-md", "bisect", "--matrix", "{scratch}/fake.yaml", "c_a", "--good", REFS[0], "--bad", REFS[-1],
        "--refs", *REFS[1:-1], "--results-dir", "{scratch}/results", "--markdown", "-", runtime="bisect")
    out += bad_input()
    return out


def bad_input() -> list[Case]:
    """The bad-input table's files (each through `validate` and `cells`) and bad command lines of every command."""
    out = []
    for f in BAD:
        out.append(Case(f"bad-validate-{f.replace('/', '_')}", ["validate", "--matrix", f]))
        out.append(Case(f"bad-cells-{f.replace('/', '_')}", ["cells", "--matrix", f]))
    m, n = MATRICES[0], NIGHTS[0]
    lines = {
        "unknown-command": ["nonsense"], "unknown-flag": ["report", n, "--nonsense"],
        "no-matrix": ["cells", "--matrix", "no/such.yaml"], "matrix-dir": ["cells", "--matrix", "examples"],
        "select-axis": ["cells", "--matrix", m, "--select", "nope=1"],
        "select-value": ["cells", "--matrix", m, "--select", "spec=nope"],
        "select-none": ["run", "--matrix", m, "--dry-run", "--select", "mml9*"],
        "shard-bad": ["cells", "--matrix", m, "--shard", "3/2"], "shard-word": ["cells", "--matrix", m,
                                                                               "--shard", "x"],
        "timeout-bad": ["run", "--matrix", m, "--dry-run", "--timeout-s", "-1"],
        "parallel-bad": ["run", "--matrix", m, "--dry-run", "--parallel", "zero"],
        "resume-missing": ["run", "--matrix", m, "--dry-run", "--resume", "no/such/run"],
        "report-missing": ["report", "no/such/run"], "report-file": ["report", "README.md"],
        "report-axis": ["report", n, "--axis", "nope"], "report-md-dir": ["report", n, "--markdown", "examples"],
        "check-missing": ["check", "no/such/run"], "analyze-missing": ["analyze", "no/such/run"],
        "analyze-axis": ["analyze", n, "--length-axis", "nope"], "analyze-block": ["analyze", n, "--block-size", "0"],
        "compare-three": ["compare", n, n, n], "compare-axis": ["compare", n, "--axis", "nope"],
        "compare-tolerance": ["compare", n, NIGHTS[1], "--time-tolerance", "fast"],
        "compare-memory-tolerance": ["compare", n, NIGHTS[1], "--memory-tolerance", "10%,lots"],
        "history-missing": ["history", "no/such/runs"], "history-empty": ["history", "tests/data/schemas"],
        "history-last": ["history", "examples/runs", "--last", "0"],
        "facts-missing": ["facts", "no/such.log"], "facts-dir": ["facts", "examples"],
        "kv-no-model": ["kv", "no/such/model", "--available-bytes", "1G"],
        "kv-bytes": ["kv", TINY, "--available-bytes", "lots", "--", "--max-model-len", "2048"],
        "kv-version": ["kv", TINY, "--available-bytes", "1G", "--vllm-version", "x"],
        "kv-flag": ["kv", TINY, "--available-bytes", "1G", "--", "--max-model-len", "many"],
        "kv-nothing": ["kv", TINY],
        "plan-from-missing": ["plan", "--matrix", m, "--from", "no/such/run"],
        "plan-platform": ["plan", "--matrix", m, "--platform", "tpu"],
        "merge-exists": ["merge", n, "--out", "examples"], "merge-missing": ["merge", "no/such/run", "--out",
                                                                            "{scratch}/m"],
        "repro-no-cell": ["repro", "--matrix", m], "gc-engine": ["gc", "--engine", "lxc"],
        "frontier-axis": ["frontier", "--matrix", m, "--axis", "nope", "--results-dir", "{scratch}/r"],
        "frontier-hi": ["frontier", "--matrix", m, "--lo", "4096", "--hi", "2048", "--results-dir", "{scratch}/r"],
        "bisect-no-ends": ["bisect", "--matrix", m, "mml2048-spec_off-kv_tight"],
        "bisect-unknown-cell": ["bisect", "--matrix", m, "nope", "--good", "a", "--bad", "b"],
        "bisect-tolerance": ["bisect", "--matrix", m, "mml2048-spec_off-kv_tight", "--good", "a", "--bad", "b",
                             "--on", "time", "--time-tolerance", "x"],
        "bisect-repeat": ["bisect", "--matrix", m, "mml2048-spec_off-kv_tight", "--good", "a", "--bad", "b",
                          "--repeat", "0"],
    }
    for name, argv in lines.items():
        out.append(Case(f"bad-{name}", argv))
    return out


# --- the fake runtimes (bisect and run without a server) -------------------------------------------------------------

REFS = [f"cmd:/opt/build-{i:02d}/vllm serve" for i in range(8)]
FAKE_MATRIX = ("name: fk\ncommand: [fake-vllm]\nmodel: m\ntimeout_s: 10\nlinger_s: 0\n"
               "axes:\n  c: {a: {}, b: {args: [--max-model-len, '4096']}}\nexpect:\n  - {outcome: booted}\n")


def _runtime(kind: str) -> Callable[[Any], Any]:
    """A FakeRuntime whose verdict is decided by the build (bisect) or by the cell (run)."""
    from harness.runtime.fake import FakeRuntime, Script

    class ByBuild(FakeRuntime):
        def script_for(self, cell: Any) -> Any:
            with self._lock:
                self.started.append(cell.id)
            if kind == "bisect":
                build = int(Path(cell.command[0]).parent.name.split("-")[1])
                return Script.refused_kv() if build >= 5 else Script.booted()
            return Script.refused_kv() if cell.id.endswith("b") else Script.booted()

    runtime = ByBuild()
    return lambda loaded: runtime


# --- running one side -----------------------------------------------------------------------------------------------

def _files(folder: Path) -> dict[str, str]:
    """Every file under `folder`: a text file's text, a binary one's sha256 and size."""
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            data = p.read_bytes()
            try:
                out[str(p.relative_to(folder))] = data.decode("utf-8")
            except UnicodeDecodeError:
                out[str(p.relative_to(folder))] = f"<binary {len(data)} B sha256 {hashlib.sha256(data).hexdigest()}>"
        elif p.is_symlink():
            out[str(p.relative_to(folder))] = f"<link to {os.readlink(p)}>"
    return out


@contextlib.contextmanager
def _environ(extra: dict[str, str]):
    saved = dict(os.environ)
    for k in UNSET:
        os.environ.pop(k, None)
    os.environ.update({**ENV, **extra})
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_case(case: Case, scratch: Path) -> dict[str, Any]:
    """Run `case` from the repository root with `{scratch}` in its argv standing for `scratch` (emptied first)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    if case.runtime:
        (scratch / "fake.yaml").write_text(FAKE_MATRIX, encoding="utf-8")
    argv = [a.replace("{scratch}", str(scratch)) for a in case.argv]
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        with _environ(case.env):
            if case.child:
                env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
                # -P: the code is PYTHONPATH's, never the working folder's; pytest from the scratch folder, so
                # no conftest of this tree is read
                proc = subprocess.run([sys.executable, "-P", *case.child], capture_output=True, text=True, env=env,
                                      cwd=scratch, check=False, timeout=120)
                code, out, err = proc.returncode, proc.stdout, proc.stderr
            else:
                from harness.cli import main

                o, e = io.StringIO(), io.StringIO()
                runtimes = _runtime(case.runtime) if case.runtime else None
                with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
                    try:
                        code = main(argv, runtimes=runtimes) if runtimes else main(argv)
                    except SystemExit as exc:  # argparse's --help and --version
                        code = exc.code if isinstance(exc.code, int) else 1
                out, err = o.getvalue(), e.getvalue()
    finally:
        os.chdir(cwd)
    files = _files(scratch)
    files.pop("fake.yaml", None)
    return {"rc": code, "stdout": out, "stderr": err, "files": files}


def normalise(text: str, name: str, code: Path, scratch: Path) -> str:
    """The same text from either side: the scratch folder and the code's tree as names; in a VOLATILE case, what a
    fresh run makes anew (run ids, clock times, durations, process ids)."""
    text = text.replace(str(scratch), "<scratch>").replace(str(code / "harness"), "<code>/harness")
    text = text.replace(str(ROOT), "<repo>")
    if name.startswith(VOLATILE):
        text = re.sub(r"\d{8}-\d{6}-([\w.]+?(?:-bisect)?)-[0-9a-f]{4}\b", r"<stamp>-\1-<hex>", text)
        text = re.sub(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?", "<time>", text)
        text = re.sub(r"\b\d+\.\d+ ?(s|ms)\b", "<dur>", text)
        text = re.sub(r"longest phase: [^—\n]*?<dur>", "longest phase: <phase> <dur>", text)
        text = re.sub(r'("(?:[a-z_]+_s|[a-z_]*_at|elapsed|pid|pgid|start_time|[a-z_]*_mono)": )[-0-9.e]+',
                      r"\1<n>", text)
    elif name.endswith("-files") or name.startswith("report-") or name.startswith("history"):
        text = re.sub(r"(generated|written) (at |on )?\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?\S*", r"\1 <time>", text)
    return text


#: A fresh run's record keys whose values are its clock's and its machine's (a VOLATILE case's records drop them).
VOLATILE_KEYS = frozenset({"port", "pid", "pgid", "taken", "samples", "started_at", "finished_at", "created_at",
                           "by_phase", "peak_phase"})


def _steady(obj: Any) -> Any:
    """A VOLATILE case's JSON less what a fresh run measures: every float a "<f>", VOLATILE_KEYS dropped (which
    phases a memory sample fell in depends on the clock too)."""
    if isinstance(obj, dict):
        return {k: _steady(v) for k, v in obj.items() if k not in VOLATILE_KEYS}
    if isinstance(obj, list):
        return [_steady(v) for v in obj]
    return "<f>" if isinstance(obj, float) else obj


def _file(path: str, text: str, name: str, code: Path, scratch: Path) -> str:
    if name.startswith(VOLATILE) and path.endswith(".json"):
        text = json.dumps(_steady(json.loads(text)), indent=1)
    return normalise(text, name, code, scratch)


def worker(out_dir: Path, only: str | None) -> int:
    """Run every case on the harness this process imports; write out_dir/<case>.json."""
    import harness

    code = Path(harness.__file__).resolve().parent.parent
    scratch = Path(tempfile.gettempdir()) / SCRATCH_NAME
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "_code").write_text(str(code), encoding="utf-8")
    for case in cases():
        if only and not re.search(only, case.name):
            continue
        got = run_case(case, scratch)
        got = {k: (normalise(v, case.name, code, scratch) if isinstance(v, str) else v) for k, v in got.items()}
        got["files"] = {normalise(k, case.name, code, scratch): _file(k, v, case.name, code, scratch)
                        for k, v in got["files"].items()}
        got["argv"] = case.child or case.argv
        (out_dir / f"{case.name}.json").write_text(json.dumps(got, indent=1, sort_keys=True), encoding="utf-8")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


# --- comparing ------------------------------------------------------------------------------------------------------

def known(name: str) -> Known | None:
    return next((k for prefix, k in KNOWN.items() if name.startswith(prefix)), None)


def diff(before: dict[str, Any], after: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What differs: unified-diff lines per part (stdout, stderr, the exit code, each file), and the changed lines
    alone (each a removed or an added one)."""
    shown, changed = [], []
    if before["rc"] != after["rc"]:
        shown.append(f"  exit code {after['rc']}, was {before['rc']}")
        changed.append(f"exit code {after['rc']}, was {before['rc']}")
    parts = [("stdout", before["stdout"], after["stdout"]), ("stderr", before["stderr"], after["stderr"])]
    for f in sorted(set(before["files"]) | set(after["files"])):
        parts.append((f"file {f}", before["files"].get(f, "<absent>"), after["files"].get(f, "<absent>")))
    for what, b, a in parts:
        if a == b:
            continue
        lines = list(difflib.unified_diff(b.splitlines(), a.splitlines(), "before", "after", n=0, lineterm=""))[2:]
        shown += [f"  {what}:"] + ["    " + d for d in lines[:40]] + (["    …"] if len(lines) > 40 else [])
        changed += [d[1:] for d in lines if d[:1] in "+-"]
    return shown, changed


def explained(name: str, changed: list[str]) -> Known | None:
    """The known difference that accounts for every changed line of `name`, if one does."""
    k = known(name)
    if k is None or (k.lines is not None and not all(re.fullmatch(k.lines, line) for line in changed)):
        return None
    return k


def side(tree: Path, out_dir: Path, only: str | None) -> None:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", str(out_dir)] + (["--only", only] if only else [])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    if Path((out_dir / "_code").read_text(encoding="utf-8")) != tree.resolve():
        raise SystemExit(f"{out_dir}: ran the harness of {(out_dir / '_code').read_text()}, not {tree}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE})")
    parser.add_argument("--keep", type=Path, help="keep both sides' outputs in KEEP/before and KEEP/after")
    parser.add_argument("--only", help="only the cases whose name matches this regex")
    parser.add_argument("--verbose", "-v", action="store_true", help="also show the known differences' lines")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker, args.only)
    with tempfile.TemporaryDirectory(prefix="outputs-before-after-") as tmp:
        base = args.keep or Path(tmp)
        old = Path(tmp) / "tree"
        old.mkdir()
        archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        for d in ("before", "after"):
            shutil.rmtree(base / d, ignore_errors=True)
        side(old, base / "before", args.only)
        side(ROOT, base / "after", args.only)
        same = 0
        bad: list[str] = []
        accounted: dict[str, list[str]] = {}
        for f in sorted((base / "after").glob("*.json")):
            name = f.stem
            a = json.loads(f.read_text(encoding="utf-8"))
            b = json.loads((base / "before" / f.name).read_text(encoding="utf-8"))
            shown, changed = diff(b, a)
            if not shown:
                same += 1
                continue
            k = explained(name, changed)
            if k is not None:
                accounted.setdefault(f"{k.issue}: {k.why}", []).append(name)
                if args.verbose:
                    print(f"{name}: differs as {k.issue} made it", *shown, sep="\n")
                continue
            bad.append(name)
            print(f"{name}: DIFFERS" + (" (beyond what its known difference accounts for)" if known(name) else ""),
                  *shown, sep="\n")
        for why, names in accounted.items():
            print(f"known, {len(names)} case(s): {why}: {', '.join(names[:4])}{', …' if len(names) > 4 else ''}")
        print(f"{same} identical, {sum(map(len, accounted.values()))} differ as known, {len(bad)} unexplained"
              + (f": {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
