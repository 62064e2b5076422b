"""`gc`, `merge` and `facts`: cleaning up after a killed harness, joining shard runs, reading a saved log."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from harness.cli.common import USAGE_EXIT, add_command, say_to, stderr
from harness.emit import emit
from harness.exitcodes import ExitCode


def register(sub: argparse._SubParsersAction) -> dict:
    p = add_command(sub, "gc", "remove the containers, server processes and work dirs a killed harness left (every run "
                    "does this first, too)", ["boot-harness gc", "boot-harness gc --engine podman"],
                    {0: "swept (what was removed is listed)", **USAGE_EXIT})
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="the results directory whose killed runs' process groups and work dirs to remove")
    p.add_argument("--engine", action="append", choices=["docker", "podman"],
                   help="container engines to sweep (default: every one that answers)")
    p.add_argument("--all", action="store_true", help="also containers of harness runs that are still alive")

    p = add_command(sub, "merge", "merge the runs of a matrix's shards into one run directory",
                    ["boot-harness merge boot-results/*/ --out merged/nightly --matrix matrix.yaml"],
                    {0: "merged (an incomplete set of shards is merged as `interrupted`)", **USAGE_EXIT})
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (one per shard)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the merged run directory to create (must not exist, or be empty)")
    p.add_argument("--matrix", "-m", type=Path, default=None,
                   help="the matrix file, for the cells' order (default: the path the runs recorded, if unchanged)")

    p = add_command(sub, "facts", "what the parser finds in a saved vLLM server log: KV numbers and the refusal",
                    ["boot-harness facts results/<run-id>/logs/<cell>.log", "boot-harness facts server.log --json"],
                    {0: "read (also when the log holds nothing decisive)", **USAGE_EXIT})
    p.add_argument("logfile", type=Path, help="a vLLM server log (a cell's logs/<cell>.log, or one saved by hand)")
    p.add_argument("--json", action="store_true", help="one JSON object (same keys as a cell record's kv/refusal)")
    return {"gc": cmd_gc, "merge": cmd_merge, "facts": cmd_facts}


def cmd_gc(args: argparse.Namespace, out: Console) -> int:
    from harness.runtime.compile_cache import RUN_DIR_NAME
    from harness.runtime.engine import DEFAULT_HOSTS
    from harness.sweep import sweep

    engines = args.engine or list(DEFAULT_HOSTS)
    swept = sweep(args.results_dir, engines, everything=args.all)
    say = say_to(out)
    for name in swept.containers:
        say(f"removed container {name}")
    for pgid in swept.process_groups:
        say(f"killed process group {pgid}")
    for pid, cell in swept.processes:
        say(f"killed process {pid} (cell {cell}: outside its process group, it carried the server's id)")
    for work in swept.work_dirs:
        what = "the run's compile cache" if work.name == RUN_DIR_NAME else "work dir"
        say(f"removed {what} {work}")
    for note in swept.notes:
        say(f"gc: {note}")
    reached = [e for e in engines if e not in swept.engines_unreachable]
    say(f"gc: {len(swept.containers)} container(s), {len(swept.process_groups)} process group(s), "
        f"{len(swept.processes)} other process(es), {len(swept.work_dirs)} work dir(s) removed "
        f"(engines swept: {', '.join(reached) or 'none answered'})")
    return ExitCode.OK


def cmd_merge(args: argparse.Namespace, out: Console) -> int:
    from harness.scale.merge import merge_runs

    result = merge_runs(list(args.run_dirs), args.out, args.matrix)
    say = say_to(stderr())
    for w in result.warnings:
        say(f"merge: {w}")
    run = result.run
    s = run.summary
    say_to(out)(f"merged {len(result.sources)} run(s), {s.get('cells', 0)} cells ({s.get('matched', 0)} matched, "
                f"{s.get('mismatched', 0)} mismatched) into {result.run_dir}: {run.status}")
    say_to(out)(f"results: {result.run_dir / 'results.json'}")
    return ExitCode.OK


def cmd_facts(args: argparse.Namespace, out: Console) -> int:
    from rich.text import Text

    from harness.escape import terminal, terminal_line
    from harness.files import iter_lines
    from harness.logfacts import parse_file
    from harness.logfacts.engine_config import read_engine_config
    from harness.logfacts.text import MAX_LINE_BYTES
    from harness.predict.facts_json import facts_output
    from harness.predict.stated import Bytes, gib_shown, stated

    facts = parse_file(args.logfile)  # a missing, non-regular or unreadable file: one line naming it
    said = stated(facts, read_engine_config(iter_lines(args.logfile, MAX_LINE_BYTES)))
    cause = facts.cause
    if args.json:
        emit(facts_output(facts, said))
        return ExitCode.OK
    say = say_to(out, whole=True)  # the log's own lines, quoted: whole
    say(Text.assemble((terminal_line(str(args.logfile)), "bold"),
                      terminal(f"  vLLM {facts.vllm_version or '?'}  ({facts.lines} lines)")))
    if said.cap_bytes is not None:
        say(f"  {said.cap_key}: {said.cap_bytes:,} ({Bytes(low=said.cap_bytes, high=said.cap_bytes).show()}, "
            f"from {said.cap_source})")
    exact = None if said.cap_bytes is None else Bytes(low=said.cap_bytes, high=said.cap_bytes)
    for key, value in facts.kv.model_dump().items():
        if value is not None and key != said.cap_key:
            shown = gib_shown(value, exact if key == "reserved_gib" else None, "the cap") if key.endswith("_gib") \
                else value
            say(f"  {key}: {shown}")
    if cause is not None:
        say(Text.assemble("  cause: ", (cause.id or "(not in the catalogue)", "yellow"),
                          f"  {cause.kind} → {cause.outcome}", f"  {cause.process}" if cause.process else ""))
        say(f"    line: {cause.line}")
        for key, value in cause.numbers.items():
            say(f"    {key}: {gib_shown(value) if key.endswith('_gib') and isinstance(value, float) else value}")
        say(Text.assemble("    hint: ", (cause.hint, "bold")))
    if facts.refusal:
        r = facts.refusal
        say(Text.assemble("  refusal: ", (terminal(str(r.kind)), "yellow")))
        derived = {"needed_gib": said.need_bytes, "available_gib": said.available_bytes}
        for key in ("max_seq_len", "needed_gib", "available_gib", "estimated_max_model_len", "derived_max_model_len"):
            if (value := getattr(r, key)) is not None:
                say(f"    {key}: {gib_shown(value, derived[key]) if key in derived else value}")
        if said.how:
            say(f"    derived: {said.how}")
        say(f"    message: {r.message}")
    elif facts.ready_lines:
        say("  ready: " + facts.ready_lines[-1])
    elif cause is None:
        say("  no cause, no refusal and no readiness line")
    _print_timeline(facts.timeline, out)
    return ExitCode.OK


def _print_timeline(t, out: Console) -> None:
    """Milestones on the log's own clock (its timestamps), vLLM's durations, where the log stopped."""
    say = say_to(out)
    reached = t.milestones.reached()
    if reached:
        say("  timeline (seconds since the log's first timestamp): "
            + ", ".join(f"{m.value} {at:g}" for m, at in reached if at is not None))
    if (slow := t.longest()) is not None:
        say(f"  longest phase: {slow.name}, {slow.seconds:g} s (it ends at {slow.ends.value})")
    durations = t.durations.model_dump(exclude_none=True)
    if durations:
        say("  durations vLLM logged: " + ", ".join(f"{k} {v}" for k, v in durations.items()))
    if t.phase is not None:
        say(f"  the log ends {t.phase.describe()}")
