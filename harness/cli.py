"""`boot-harness`: the command line over the library. Bad input or a missing runtime → one line on stderr, exit 2."""

from __future__ import annotations

import argparse
import faulthandler
import json
import math
import signal
import sys
from pathlib import Path

from rich.console import Console

from harness import __version__
from harness.cli_scale import add_merge_parser, add_parallel_options, add_shard_option, apply_shard, cmd_merge
from harness.errors import UsageError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _add_matrix(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", "-m", required=True, help="the matrix file (YAML)")


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--select", "-s", action="append", metavar="EXPR",
                   help="cells to take: `axis=value[|value]` terms and id globs, comma-joined (repeatable)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="boot-harness", description=__doc__)
    parser.add_argument("--version", action="version", version=f"boot-harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="check a matrix file and exit 0, or print what is wrong and exit 2")
    _add_matrix(p)

    p = sub.add_parser("cells", help="list cell ids, one a line")
    _add_matrix(p)
    _add_selection(p)
    add_shard_option(p)
    p.add_argument("--json", action="store_true", help="one JSON object per cell: id, axes, argv, env, expected")

    p = sub.add_parser("run", help="boot every selected cell and record the results")
    _add_matrix(p)
    _add_selection(p)
    p.add_argument("--results-dir", type=Path, default=Path("results"), help="where run directories go (default: results)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="finish an interrupted run: only cells it lacks")
    p.add_argument("--dry-run", action="store_true", help="print what each cell would run, run nothing")
    p.add_argument("--timeout-s", type=float, help="override the matrix's per-cell deadline")
    p.add_argument("--keep-work", action="store_true", help="keep each cell's TMPDIR and caches under the run dir")
    add_shard_option(p)
    add_parallel_options(p)

    p = sub.add_parser("repro", help="print (or run) exactly what the harness runs for one cell")
    _add_matrix(p)
    p.add_argument("cell_id", help="a cell id (see `boot-harness cells`)")
    p.add_argument("--exec", action="store_true", help="run the cell attached, streaming its log, and record it")
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="where --exec records the run, and where patched files for the command are kept")
    p.add_argument("--timeout-s", type=float, help="override the matrix's per-cell deadline")
    p.add_argument("--port", type=int, default=8000, help="host port the printed command serves on (default 8000)")

    p = sub.add_parser("gc", help="remove containers and server processes left by a harness that was killed")
    p.add_argument("--results-dir", type=Path, default=Path("results"))
    p.add_argument("--engine", action="append", choices=["docker", "podman"],
                   help="container engines to sweep (default: every one that answers)")
    p.add_argument("--all", action="store_true", help="also containers of harness runs that are still alive")

    add_merge_parser(sub)

    p = sub.add_parser("facts", help="what the parser finds in a saved vLLM server log")
    p.add_argument("logfile", type=Path)
    p.add_argument("--json", action="store_true", help="one JSON object (same keys as a cell record's kv/refusal)")

    from harness.cli_analysis import register

    COMMANDS.update(register(sub))
    return parser


def _check_timeout(args: argparse.Namespace) -> None:
    """--timeout-s must be a finite number of seconds above 0: a negative one would time every cell out at once, 0
    used to mean "the matrix's", nan and inf would never time out."""
    t = getattr(args, "timeout_s", None)
    if t is not None and not (math.isfinite(t) and t > 0):
        raise UsageError(f"--timeout-s: must be a finite number of seconds greater than 0 (got {t:g})")


def cmd_validate(args: argparse.Namespace, out: Console) -> int:
    from harness.cells import expand_cells
    from harness.matrix.load import load_matrix

    loaded = load_matrix(args.matrix)
    cells = expand_cells(loaded.matrix, str(args.matrix))
    expected = sum(1 for c in cells if c.expected)
    out.print(f"{args.matrix}: ok — {len(cells)} cells on {len(loaded.matrix.axes)} axes, "
              f"{expected} with an expectation", highlight=False)
    return EXIT_OK


def _selected(args: argparse.Namespace):
    from harness.cells import expand_cells, select_cells
    from harness.matrix.load import load_matrix

    loaded = load_matrix(args.matrix)
    cells = select_cells(expand_cells(loaded.matrix, str(args.matrix)), args.select, loaded.matrix)
    return loaded, apply_shard(args, cells)


def cmd_cells(args: argparse.Namespace, out: Console) -> int:
    from harness.secrets import Masker, secret_values

    _, cells = _selected(args)
    if not cells:
        Console(stderr=True).print(f"shard {args.shard_text}: none of the {args.shard_total} selected cells hashes "
                                   "into this shard", highlight=False)
    for c in cells:
        if args.json:
            masker = Masker(secret_values() | secret_values(c.env, c.server_args))
            print(json.dumps({"id": c.id, "axes": c.axes, "server_args": masker.argv(c.server_args),
                              "env": masker.env(c.env),
                              "image": c.image, "expected": None if not c.expected else
                              {"outcome": c.expected.outcome, "reason": c.expected.reason}}))
        else:
            print(c.id)
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    from harness.progress import LiveProgress, summary_table
    from harness.results.store import RunStore
    from harness.runner import CellRunner, Interrupted, watch_config
    from harness.runtime import make_runtime
    from harness.runtime.base import CellContext
    from harness.shell import format_shell
    from harness.secrets import Masker
    from harness.cli_scale import check_resume_shard, empty_shard_run, plan_parallel, run_planned

    _check_timeout(args)
    loaded, cells = _selected(args)
    if not cells:  # an empty shard: not an error (see docs/scale.md)
        return empty_shard_run(args, loaded, out)
    runtime = make_runtime(loaded)
    if args.dry_run:  # touches nothing: no engine, no pull, no file (see Runtime.planned_command_line)
        run_dir = (args.resume or Path(args.results_dir) / "<run-id>")
        for c in cells:
            ctx = CellContext(run_dir=run_dir, work_dir=run_dir / "work" / c.id, masker=Masker(),
                              matrix_dir=loaded.base_dir)
            tokens, steps = runtime.planned_command_line(c, ctx)
            print("\n".join([f"# {c.id}", *(f"#   {step}" for step in steps), format_shell(tokens)]))
        return EXIT_OK
    plan = plan_parallel(loaded, args)  # bad --parallel / no NVML for a GPU matrix: exit 2 before anything runs
    _gc_before_run(args.results_dir if not args.resume else args.resume.parent, runtime.name)
    _preflight(runtime, cells)
    if args.resume:
        store = RunStore.open(args.resume, loaded)
        check_resume_shard(store.run.shard, args.shard_text, args.resume)
        todo = [c for c in cells if c.id not in store.done()]
        store.run.status = "running"
    else:
        store = RunStore.create(args.results_dir, loaded, runtime.name, selection=args.select, shard=args.shard_text)
        todo = cells
    store.order = [c.id for c in cells]
    err = Console(stderr=True)
    err.print(f"run directory: {store.run_dir}  ({len(todo)} of {len(cells)} cells to boot"
              f"{f', shard {args.shard_text}' if args.shard_text else ''})", highlight=False)
    if plan is not None:
        err.print(plan.describe(), highlight=False)
    runner = CellRunner(loaded, runtime, store, watch_config(loaded, args.timeout_s), keep_work=args.keep_work)
    try:
        with LiveProgress(todo, err) as progress:
            run_planned(plan, todo, runner, progress)
    except (Interrupted, KeyboardInterrupt):
        err.print(f"interrupted: finished cells are kept in {store.run_dir} (continue with --resume {store.run_dir})",
                  highlight=False)
        return EXIT_INTERRUPTED
    run = store.finish("complete")
    out.print(summary_table(run))
    out.print(f"results: {store.run_dir / 'results.json'}", highlight=False)
    selected = {c.id for c in cells}
    bad = [c for c in run.cells if c.cell_id in selected and (c.matched is False or c.outcome == "error")]
    return EXIT_MISMATCH if bad else EXIT_OK


def _preflight(runtime, cells, gpu_checks: bool = True) -> None:
    """The runtime's checks before any cell runs, with image pulls shown as they go and what they found printed."""
    from harness.runtime.pull import PullDisplay

    err = Console(stderr=True)
    if hasattr(runtime, "pull_observer"):
        runtime.pull_observer = PullDisplay(err)
    if gpu_checks:
        runtime.preflight(cells)
    else:
        runtime.preflight(cells, gpu_checks=False)
    for note in getattr(runtime, "notes", []):
        err.print(note, highlight=False, markup=False, emoji=False, soft_wrap=True)


def _gc_before_run(results_dir: Path, runtime_name: str) -> None:
    from harness.gc import sweep_before_run

    swept = sweep_before_run(results_dir, runtime_name)
    if swept.containers or swept.process_groups or swept.work_dirs:
        Console(stderr=True).print(f"gc: removed {len(swept.containers)} leftover container(s), "
                                   f"{len(swept.process_groups)} leftover process group(s) and "
                                   f"{len(swept.work_dirs)} work dir(s) of killed runs", highlight=False)


def cmd_gc(args: argparse.Namespace, out: Console) -> int:
    from harness.gc import sweep
    from harness.runtime.engine import DEFAULT_HOSTS

    engines = args.engine or list(DEFAULT_HOSTS)
    swept = sweep(args.results_dir, engines, everything=args.all)
    for name in swept.containers:
        out.print(f"removed container {name}", highlight=False)
    for pgid in swept.process_groups:
        out.print(f"killed process group {pgid}", highlight=False)
    for work in swept.work_dirs:
        out.print(f"removed work dir {work}", highlight=False)
    reached = [e for e in engines if e not in swept.engines_unreachable]
    out.print(f"gc: {len(swept.containers)} container(s), {len(swept.process_groups)} process group(s), "
              f"{len(swept.work_dirs)} work dir(s) removed "
              f"(engines swept: {', '.join(reached) or 'none answered'})", highlight=False)
    return EXIT_OK


def cmd_repro(args: argparse.Namespace, out: Console) -> int:
    from harness.cells import expand_cells
    from harness.matrix.load import load_matrix
    from harness.runtime import make_runtime
    from harness.runtime.base import CellContext
    from harness.secrets import Masker
    from harness.shell import format_shell

    _check_timeout(args)
    loaded = load_matrix(args.matrix)
    cells = {c.id: c for c in expand_cells(loaded.matrix, str(args.matrix))}
    if args.cell_id not in cells:
        raise UsageError(f"{args.matrix}: no cell {args.cell_id!r} (see `boot-harness cells --matrix {args.matrix}`)")
    cell = cells[args.cell_id]
    runtime = make_runtime(loaded)
    if not args.exec:
        if loaded.matrix.runtime != "process":
            _preflight(runtime, [cell], gpu_checks=False)
        keep = args.results_dir / "repro" / cell.id
        ctx = CellContext(run_dir=keep, work_dir=keep, masker=Masker(), matrix_dir=loaded.base_dir)
        print(format_shell(runtime.command_line(cell, ctx, args.port)))
        return EXIT_OK
    from harness.progress import summary_table
    from harness.results.store import RunStore
    from harness.runner import CellRunner, Interrupted, run_cells, watch_config

    _gc_before_run(args.results_dir, runtime.name)
    _preflight(runtime, [cell])
    store = RunStore.create(args.results_dir, loaded, runtime.name, selection=[cell.id])
    store.order = [cell.id]
    runner = CellRunner(loaded, runtime, store, watch_config(loaded, args.timeout_s),
                        echo=lambda line: print(line, flush=True))
    try:
        results = run_cells([cell], runner)
    except (Interrupted, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    run = store.finish("complete")
    out.print(summary_table(run))
    out.print(f"results: {store.run_dir / 'results.json'}", highlight=False)
    r = results[0]
    return EXIT_MISMATCH if r.matched is False or r.outcome == "error" else EXIT_OK


def cmd_facts(args: argparse.Namespace, out: Console) -> int:
    from harness.logfacts import parse_file

    if not args.logfile.is_file():
        raise UsageError(f"{args.logfile}: no such file")
    facts = parse_file(args.logfile)
    reason = facts.refusal.kind if facts.refusal else ("ready" if facts.ready_lines else None)
    record = {"vllm_version": facts.vllm_version, "reason": reason, "kv": facts.kv.model_dump(),
              "refusal": facts.refusal.model_dump() if facts.refusal else None}
    if args.json:
        print(json.dumps(record, indent=2))
        return EXIT_OK
    out.print(f"[bold]{args.logfile}[/]  vLLM {facts.vllm_version or '?'}  ({facts.lines} lines)", highlight=False)
    for key, value in record["kv"].items():
        if value is not None:
            out.print(f"  {key}: {value}", highlight=False)
    if facts.refusal:
        r = facts.refusal
        out.print(f"  refusal: [yellow]{r.kind}[/]", highlight=False)
        for key in ("max_seq_len", "needed_gib", "available_gib", "estimated_max_model_len", "derived_max_model_len"):
            if getattr(r, key) is not None:
                out.print(f"    {key}: {getattr(r, key)}", highlight=False)
        out.print(f"    message: {r.message}", highlight=False, markup=False)
    elif facts.ready_lines:
        out.print("  ready: " + facts.ready_lines[-1], highlight=False, markup=False)
    else:
        out.print("  no refusal and no readiness line", highlight=False)
    return EXIT_OK


COMMANDS = {"validate": cmd_validate, "cells": cmd_cells, "run": cmd_run, "repro": cmd_repro, "gc": cmd_gc,
            "facts": cmd_facts, "merge": cmd_merge}


def _stacks_on_sigusr2() -> None:
    """`kill -USR2 PID` prints every thread's Python stack to stderr and the run goes on: what a harness that looks
    stuck is waiting for, without a debugger (the reliability tests ask for it before they give up on a run)."""
    if not hasattr(signal, "SIGUSR2"):
        return
    try:
        faulthandler.register(signal.SIGUSR2, file=sys.stderr.fileno(), all_threads=True)
    except (AttributeError, OSError, ValueError):  # stderr is no file (main() called in-process under capture)
        pass


def main(argv: list[str] | None = None) -> int:
    _stacks_on_sigusr2()
    args = build_parser().parse_args(argv)
    out = Console()
    try:
        return COMMANDS[args.command](args, out)
    except UsageError as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `boot-harness cells ... | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
