"""The hostile-input table of docs/reliability.md: for each class of hostile input, how many inputs the suite tries
(the test cases of its file, as pytest collects them) and how many the harness held before the fixes and holds now.
test_hostile_table.py keeps the doc in sync with the collection; "now" is every case, since CI lands nothing that fails.

    python -m tests.reliability.hostile_table           # print the table
    python -m tests.reliability.hostile_table --write   # rewrite it in docs/reliability.md
    python -m tests.reliability.hostile_table --before REF   # run today's cases against the harness of REF (a git
                                                             # worktree in a temp dir): the figures of BEFORE
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

from tests.doc_block import DocBlock
from tests.helpers.env import ROOT

DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- hostile:begin (python -m tests.reliability.hostile_table --write) -->", "<!-- hostile:end -->"
BLOCK = DocBlock(DOC, BEGIN, END)

#: (file, the class of input it tries, what was at stake)
CLASSES = [
    ("test_hostile_owned.py", "touches what is not its own: processes and folders",
     "forged and malformed `active/` records (someone else's group, pgid 0, -1, 2**63, NaN, FIFO, link, folder), "
     "`compile_cache:` at `/`, `~`, `.`, the repo, a 0700 folder in it, links out of work dirs"),
    ("test_hostile_files.py", "hostile files: loses or hides records, blocks, replaces",
     "FIFOs, `/dev/zero`, `/dev/null`, links, 70 MiB and 5,000-deep files as matrix, model, log, results.json or a "
     "cell; missing, torn, NaN, repeated cell records through every command; `report` to devices and links; "
     "`merge` of links out of a run"),
    ("test_hostile_matrix.py", "the matrix and `--select`: accepted silently or cells lost",
     "`1`/`'1'`, `true`/`'True'`, null names, NUL, 300-character values, 2^40 cells, 4,301-digit integers, container "
     "keys on `runtime: process`, `probe: \"no\"`, `1.0e+9`, `!!set`, `${VAR}` in `setup:`, `a=1,a=2`, `''`"),
    ("test_hostile_secrets.py", "leaks secrets",
     "`--api_key`, `--api-k`, `--hf-t=`, `--speculative-config.hf_token`, a token in JSON, `HF_TOKEN=` in `command`, "
     "`user:password@` URLs, another variable quoting a token: in output, every file of the run, errors"),
    ("test_hostile_echoes.py", "secrets as names, and secrets echoed re-encoded",
     "an `--api-key` axis through ids, file names, `cells --json`, `run --dry-run`, `repro`, `report` and records; a "
     "server echoing a token JSON- and `\\u`-escaped, URL-encoded, split by SGR codes and across lines, upper-cased, "
     "in base64 (Basic auth at each alignment), hex, cut to a prefix"),
    ("test_hostile_values.py", "tracebacks and silent acceptance: numbers, dtypes, flag values",
     "FP8/int8/auto/fp16 checkpoints, `num_hidden_layers: 1e9`, `--available-gib 1e400`, `--block-size 10**30`, "
     "`repro --port 70000`, `compare --tolerance nan`, `--length-axis nope`, `plan --vllm-version x`, `plan --from` "
     "another matrix, `merge --matrix missing.yaml`, records with -1/0/huge lengths"),
    # issue 39 (4, 5); against 33569ba (the commit before its fix) 8 of its 37 cases held
    ("test_hostile_output.py", "drives a terminal or a rendered page: output of every command",
     "`<script>`, `<img onerror>`, `<details open>`, `[l](javascript:…)`, a backtick, `\\|`, OSC 0 and OSC 8, SGR "
     "blink, BEL, CR, C1 in axis values, env, argv, paths, log names, run and cell ids, axis keys, matrix name, "
     "runtime, memory phases, scheduler variables: every command's terminal output, errors, markdown, shell lines"),
    ("test_hostile_watch.py", "the watch and the nights: floods, late refusals, future-dated runs",
     "6 MB of log past a 1 MiB `log_max_mb` (head, tail and a count kept, the rest only skimmed), a refusal line "
     "after `Application startup complete`, a run started in 9999 through `history` and `compare`, a start within "
     "and past the clocks' skew, `log_max_mb: true`/`\"64\"`/`0.5`/`.nan`"),
    ("test_hostile_procs.py", "server processes that escape teardown and gc",
     "a double-forked setsid daemon, a child in its own process group, a server in a new session listening on its "
     "port (booted, refused, crashed, SIGKILLed harness + `gc`); a /proc that lies; pid reuse; a forker; bystanders"),
    ("test_hostile_bounds.py", "unchecked values and unbounded work: hangs, tracebacks, memory",
     "`gpus: [0, 1, 0]`, `true` in every number key, `memory_interval_s: 1e-9`, 6,666 `exclude` rules over 10,000 "
     "cells, servers logging `1` and `2024_nightly` as their version, folders 1,200 deep under `history` and "
     "`merge`, a 5,000-digit `BUILDKITE_PARALLEL_JOB_COUNT`, `kv_lora_rank: 0`, a run whose records pass the per-run "
     "bound, `merge` of shards with another matrix name, harness version or scheduler, or cells not theirs"),
    ("test_hostile_links.py", "writes through, truncates or removes what a run folder holds; two owners of one run",
     "links as a cell's log, `logs/`, `work/`, `work/<cell>`, `.owner.json`, `active/`, `cells/`, `patches/`, "
     "`compile-cache`, `.lock`; a hard link or FIFO as a log; someone's real `work/<cell>/`, `compile-cache/`; "
     "each planted before `run --resume` and mid-run; the run held under another TMPDIR; GPU host locks as links"),
    # issue 41 (4) / 42: every --json a typed model with an exported schema
    ("test_hostile_json.py", "breaks a `--json` output: not one object, not its schema, a value rewritten",
     "quotes, backslashes, a newline, OSC, a bidi override, NUL, U+1F680, `</script>`, a 2,000-character line in "
     "axis values, cause lines and hints, exceptions, refusal messages, argv and env, through `report`, `check`, "
     "`analyze`, `compare` (two runs, pairs), `history`, `facts`, `cells`; `--json` with `--markdown -`"),
]

#: The cases held by the harness of main before the fixes (0d5ff7a), of those tried there (2026-12-04): `--before
#: 0d5ff7a` for files, secrets and values. Not tried there: the three report writes to /dev/full and /dev/null, which
#: the old harness, as root, would really have replaced. test_hostile_matrix.py imports two new constants (the limits
#: it generates inputs from): run with them added to the old harness/matrix/cells.py, nothing else.
#: test_hostile_owned.py forges records with the new ActiveRecord: run with the old sweep.py, scratch.py and
#: compile_cache.py restored.
BEFORE_REF = "0d5ff7a"
#: Round two (issue 39) was tried against its own base, 33569ba: each file's new cases on the harness files of that
#: commit (a new module a test imports copied in, nothing else).
ROUND_TWO_REF = "33569ba"
BEFORE: dict[str, tuple[int, int, str]] = {
    "test_hostile_owned.py": (14, 54, BEFORE_REF),
    "test_hostile_files.py": (2, 70, BEFORE_REF),
    "test_hostile_matrix.py": (8, 71, BEFORE_REF),
    "test_hostile_secrets.py": (0, 33, BEFORE_REF),
    "test_hostile_values.py": (29, 81, BEFORE_REF),
    "test_hostile_output.py": (8, 37, ROUND_TWO_REF),
    "test_hostile_echoes.py": (1, 29, ROUND_TWO_REF),  # MIN_PREFIX added to the old masking.py
    "test_hostile_watch.py": (2, 21, ROUND_TWO_REF),  # the two skew cases that keep a run held
    "test_hostile_procs.py": (6, 11, ROUND_TWO_REF),  # the bystanders and the scan's own cases
    "test_hostile_bounds.py": (18, 65, ROUND_TWO_REF),
    "test_hostile_json.py": (7, 10, "9fc699a"),  # its base, with the new schemas copied in (check and report had no
                                                 # --json)
    "test_hostile_links.py": (2, 19, ROUND_TWO_REF),  # the plants before a resume and the two TMPDIRs (the rest need
                                                       # the new writers' API)
}
#: Cases never run against the old harness (it would have damaged this machine): -k expression.
UNSAFE_BEFORE = "not (markdown-to-dev-full or markdown-to-a-link-to-dev-full or html-to-dev-null)"


def _files() -> list[str]:
    return [f"tests/reliability/{name}" for name, _, _ in CLASSES]


def collected() -> dict[str, int]:
    """Test cases per file, by pytest's own collection."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-n", "0",
                          *_files()], cwd=ROOT, capture_output=True, text=True, timeout=300)
    counts: collections.Counter[str] = collections.Counter()
    for line in out.stdout.splitlines():
        if "::" in line:
            counts[Path(line.split("::", 1)[0]).name] += 1
    if not counts:
        raise SystemExit(f"collection found nothing:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    return dict(counts)


def render(counts: dict[str, int] | None = None) -> str:
    counts = collected() if counts is None else counts
    lines = [BEGIN, "", "| class | inputs tried | held before (at) | held now | what | tests |",
             "|---|---|---|---|---|---|"]
    total = held_before = tried_before = 0
    for name, title, what in CLASSES:
        n = counts.get(name, 0)
        held, tried, ref = BEFORE.get(name, (0, 0, "—"))
        total, held_before, tried_before = total + n, held_before + held, tried_before + tried
        lines.append(f"| {title} | {n} | {held} of {tried} ({ref}) | {n} | {what} | `{name}` |")
    lines.append(f"| **all** | **{total}** | **{held_before} of {tried_before}** | **{total}** | | |")
    lines += ["", END]
    return "\n".join(lines)


def current() -> str | None:
    return BLOCK.current()


def write() -> None:
    BLOCK.write(render())


def before(ref: str) -> str:
    """Today's hostile cases run against the harness of `ref`: a detached worktree of it in a temp dir with this
    checkout's tests/ copied over, pytest's per-file pass counts as `file: held of tried` lines (a case that needs a
    name the old harness lacks fails there: that file's note in BEFORE says what was added to run it)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hostile-before-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), ref], cwd=ROOT, check=True,
                       capture_output=True, timeout=120)
        try:
            shutil.rmtree(tree / "tests")
            shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
            out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-n", "0",
                                  "-k", UNSAFE_BEFORE, *_files()], cwd=tree, capture_output=True, text=True,
                                 env={**os.environ, "PYTHONPATH": str(tree)}, timeout=3600).stdout
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True,
                           timeout=120)
    held: collections.Counter[str] = collections.Counter()
    tried: collections.Counter[str] = collections.Counter()
    for line in out.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED", "ERROR") and "::" in rest:
            name = Path(rest.split("::", 1)[0]).name
            tried[name] += 1
            held[name] += word == "PASSED"
    return "\n".join(f"{name}: {held[name]} of {tried[name]}" for name in sorted(tried))


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--write" in args:
        write()
    elif "--before" in args:
        print(before(args[args.index("--before") + 1]))
    else:
        print(render())
