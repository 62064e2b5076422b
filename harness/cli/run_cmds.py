"""`run` and `repro`: boot cells (through harness.boot.session, the run owner) or print exactly what one would run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from harness.cli import values
from harness.cli.common import (
    USAGE_EXIT,
    add_command,
    add_matrix,
    add_parallel,
    add_selection,
    add_shard,
    add_timeout,
    echo,
    say_to,
    stderr,
)
from harness.errors import RunStopped, UsageError
from harness.exitcodes import ExitCode

if TYPE_CHECKING:
    from harness.boot.session import RunSession


def register(sub: argparse._SubParsersAction) -> dict:
    p = add_command(sub, "run", "boot every selected cell for real and record why it booted or refused",
                    ["boot-harness run --matrix matrix.yaml",
                     "boot-harness run --matrix matrix.yaml --select mtp=mtp4 --dry-run",
                     "boot-harness run --matrix matrix.yaml --shard 1/2 --parallel auto --results-dir boot-results",
                     "boot-harness run --matrix matrix.yaml --resume results/<run-id>"],
                    {0: "every cell met its expectation", 1: "a cell missed its expectation or errored", **USAGE_EXIT,
                     130: "interrupted: finished cells are kept (--resume goes on)"},
                    "Results go to RESULTS_DIR/<run-id>/ (results.json, cells/, logs/), written as each cell ends.")
    add_matrix(p)
    add_selection(p)
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="where run directories go (default: results)")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="finish an interrupted run: only cells it lacks")
    p.add_argument("--dry-run", action="store_true",
                   help="print what each cell would run, touch nothing (with --resume: only the cells it would boot)")
    add_timeout(p.add_argument)
    p.add_argument("--keep-work", action="store_true", help="keep each cell's TMPDIR and caches under the run dir")
    add_shard(p)
    add_parallel(p)

    p = add_command(sub, "repro", "print (or, with --exec, run attached) exactly what the harness runs for one cell",
                    ["boot-harness repro --matrix matrix.yaml mml131072-mtp4-floor_env-image_patched",
                     "boot-harness repro --matrix examples/cpu-tiny.yaml mml2048-spec_draft-kv_tight --exec"],
                    {0: "printed, or (--exec) the cell met its expectation", 1: "--exec: it did not, or errored",
                     **USAGE_EXIT, 130: "interrupted"},
                    "Printing touches nothing (no engine, no pull, no file). A patched cell's command comes after the\n"
                    "steps that make its file under RESULTS_DIR/repro/patches/CELL/ (pull if absent, copy it out of\n"
                    "the image, sha256sum -c, GNU patch as the harness runs it, sha256sum -c), joined by && to paste\n"
                    "in order.")
    add_matrix(p)
    p.add_argument("cell_id", help="a cell id (see `boot-harness cells`)")
    p.add_argument("--exec", action="store_true",
                   help="run the cell attached, streaming its log, and record it (pulls and patches first)")
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="where --exec records the run, and where the printed steps keep patched files")
    add_timeout(p.add_argument)
    p.add_argument("--port", type=values.port, default=8000,
                   help="host port the printed command serves on (default 8000)")
    return {"run": cmd_run, "repro": cmd_repro}


def cmd_run(args: argparse.Namespace, out: Console) -> int:
    from harness.boot.session import RunOptions, RunSession, planned_commands
    from harness.matrix.selection import selected
    from harness.matrix.shard import resolve_shard
    from harness.report.progress import LiveProgress
    from harness.runtime.pull import PullDisplay
    from harness.shell import format_shell

    shard, scheduler = resolve_shard(args.shard)
    sel = selected(args.matrix, args.select, shard)
    options = RunOptions(results_dir=args.results_dir, resume=args.resume, selection=args.select, shard=sel.shard,
                         scheduler=scheduler, timeout_s=args.timeout_s, keep_work=args.keep_work,
                         parallel=args.parallel, gpu_idle_timeout_s=args.gpu_idle_timeout_s)
    err = stderr()
    say = say_to(err)
    if scheduler is not None:
        say(f"--shard auto: {scheduler.said()}")
    if not sel.cells:
        say(f"shard {sel.shard}: none of the {sel.total} selected cells hashes into this shard — nothing to boot; "
            "writing an empty complete run")
    if args.dry_run:
        planned = planned_commands(sel.loaded, sel.cells, options, args.runtimes(sel.loaded))
        if args.resume:
            echo(f"# resume of {args.resume}: {len(sel.cells) - len(planned)} of {len(sel.cells)} cells already "
                 f"recorded, {len(planned)} to boot", line=True)
        for cell, tokens, steps in planned:  # a comment is one line whatever it quotes: a newline would run the rest
            for comment in [f"# {cell.id}", *(f"#   {step.said}" for step in steps)]:
                echo(comment, line=True)
            echo(format_shell(tokens))
        return ExitCode.OK
    session = RunSession.open(sel.loaded, sel.cells, options, runtime=args.runtimes(sel.loaded), say=say,
                              pull_observer=PullDisplay(err))
    _report_sweep(session, say)
    if session.plan is not None:
        say(f"run directory: {session.run_dir}  ({len(session.todo)} of {len(session.cells)} cells to boot"
            f"{f', shard {sel.shard}' if sel.shard else ''})")
        say(session.plan.describe())
    try:
        with LiveProgress(session.todo, err) as progress:
            session.run(progress)
    except (RunStopped, KeyboardInterrupt) as exc:
        session.close()
        if str(exc) and not isinstance(exc, KeyboardInterrupt) and str(exc) not in ("SIGINT", "SIGTERM", "SIGHUP"):
            say(str(exc))  # why the run stopped, when it was not a signal (the engine went away)
        say(f"interrupted: finished cells are kept in {session.run_dir} (continue with --resume {session.run_dir})")
        return ExitCode.INTERRUPTED
    return _finish(session, out)


def cmd_repro(args: argparse.Namespace, out: Console) -> int:
    from harness.boot.session import RunOptions, RunSession, repro_command
    from harness.logfacts.text import strip_ansi
    from harness.matrix.selection import selected
    from harness.runtime.pull import PullDisplay
    from harness.shell import format_script

    sel = selected(args.matrix, None)
    cells = {c.id: c for c in sel.cells}
    if args.cell_id not in cells:
        from harness.matrix.cells import explain_missing_id

        why = explain_missing_id(sel.loaded.matrix, args.cell_id, sel.cells)
        raise UsageError(f"{args.matrix}: {why} (see `boot-harness cells --matrix {args.matrix}`)")
    cell = cells[args.cell_id]
    err = stderr()
    # made (and so checked) before either branch: a bad --timeout-s is exit 2 with or without --exec
    options = RunOptions(results_dir=args.results_dir, selection=[cell.id], timeout_s=args.timeout_s,
                         echo=lambda line: echo(strip_ansi(line), flush=True))
    if not args.exec:
        echo(format_script(repro_command(sel.loaded, cell, args.results_dir, args.port,
                                         runtime=args.runtimes(sel.loaded))))
        return ExitCode.OK
    session = RunSession.open(sel.loaded, [cell], options, runtime=args.runtimes(sel.loaded), say=say_to(err),
                              pull_observer=PullDisplay(err))
    _report_sweep(session, say_to(err))
    try:
        session.run()
    except (RunStopped, KeyboardInterrupt):
        return ExitCode.INTERRUPTED
    return _finish(session, out)


def _report_sweep(session: RunSession, say) -> None:
    s = session.swept
    if s.containers or s.process_groups or s.processes or s.work_dirs:
        say(f"gc: removed {len(s.containers)} leftover container(s), {len(s.process_groups)} leftover process "
            f"group(s), {len(s.processes)} other leftover process(es) and {len(s.work_dirs)} work dir(s) of killed "
            f"runs")
    for note in s.notes:  # active/ records that named no process group of ours: nothing was killed
        say(f"gc: {note}")


def _finish(session: RunSession, out: Console) -> int:
    from harness.report.progress import print_summary
    from harness.results.model import RunStatus

    run = session.finish(RunStatus.complete)
    if session.cells:
        print_summary(run, out)
    say_to(out)(f"results: {session.run_dir / 'results.json'}")
    return session.exit_code()
