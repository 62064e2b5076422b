"""The analysis commands: compare, analyze, frontier, report, check, history. They read recorded runs (harness.analysis
is pure) and render them (harness.report); `frontier` boots, through harness.boot.frontier."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from harness.cli import values
from harness.cli.common import USAGE_EXIT, add_command, add_timeout, say_to, stderr
from harness.emit import emit
from harness.errors import RunStopped, UsageError
from harness.exitcodes import ExitCode
from harness.predict.platforms import HELP, PLATFORMS
from harness.report.text import show
from harness.verdict import Outcome


def register(sub: argparse._SubParsersAction) -> dict:
    """Add compare/analyze/frontier/report to `sub` (argparse subparsers); return name → handler."""
    p = add_command(sub, "compare", "cells that differ in one axis within a run (patched vs unpatched), or the same "
                    "cells across two runs (last night vs tonight)",
                    ["boot-harness compare results/<run-id> --axis image",
                     "boot-harness compare results/<last-night> results/<tonight>"],
                    {0: "compared; no regression", 1: "two runs: a cell regressed (outcome, boot time or memory peak)",
                     **USAGE_EXIT},
                    "One run: pairs of cells equal on every axis but --axis, flipped outcomes first. Two runs: "
                    "regressions, fixes, cells in one run only, KV numbers that drifted beyond --tolerance, boot times "
                    "and phases slower beyond --time-tolerance, "
                    "memory peaks grown beyond --memory-tolerance.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="one or two run directories (or results.json)")
    p.add_argument("--axis", help="one run: the axis the pairs differ in (default: image)")
    p.add_argument("--tolerance", default="2%", help="two runs: relative KV drift to report (default 2%%; 0.02 or 2)")
    p.add_argument("--time-tolerance", default="25%,30s", metavar="REL,ABS",
                   help="two runs: a boot or phase is a time regression when slower by more than both "
                        "(default 25%%,30s)")
    p.add_argument("--memory-tolerance", default="10%,256MiB", metavar="REL,SIZE",
                   help="two runs: a cell's memory peak is a memory regression when it grew by more than both "
                        "(default 10%%,256MiB)")
    p.add_argument("--length-axis", help="the max_model_len axis, if it cannot be told from the run")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")

    p = add_command(sub, "analyze", "fit the KV need and the cap against max_model_len: their lines, where they "
                    "cross, and the floor that boots each KV refusal", ["boot-harness analyze results/<run-id>"],
                    {0: "analyzed", **USAGE_EXIT}, "Per group of cells sharing every axis but max_model_len. "
                    "See docs/analysis.md.")
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory (or its results.json)")
    p.add_argument("--length-axis", help="the max_model_len axis (default: the one passing --max-model-len)")
    p.add_argument("--block-size", type=values.length, help="KV block in tokens (default: --block-size of the "
                   "cell, 128 on the CPU backend, else 16)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")

    p = add_command(sub, "frontier", "boot until the largest max_model_len that boots is known, per group, to one "
                    "KV block", ["boot-harness frontier --matrix examples/cpu-tiny.yaml --select spec=draft,kv=tight "
                                 "--hi 2048"],
                    {0: "every frontier found", 1: "a group's search stopped (a crash, a timeout)", **USAGE_EXIT,
                     130: "interrupted"},
                    "Probe --hi, jump to vLLM's estimated maximum, then bisect. Every probe is a recorded cell in a "
                    "new run directory (plus frontier.json).")
    p.add_argument("--matrix", "-m", required=True, help="the matrix file (YAML)")
    p.add_argument("--select", "-s", action="append", metavar="EXPR", help="cells to take (as `run`)")
    p.add_argument("--axis", help="the max_model_len axis (default: the axis whose flag is --max-model-len)")
    p.add_argument("--lo", type=values.length, help="smallest length to consider (default: one block)")
    p.add_argument("--hi", type=values.length, help="largest length to consider (default: the axis's largest value)")
    p.add_argument("--block-size", type=values.length, help="resolution in tokens (default: learnt from the first "
                   "boot: 128 on the CPU backend, else 16)")
    p.add_argument("--from", dest="from_run", type=Path, metavar="RUN_DIR",
                   help="reuse the outcomes a run already recorded for these groups (no boot for those lengths)")
    p.add_argument("--platform", choices=PLATFORMS, help="where the server runs, for the KV prediction the search "
                   "starts from: " + HELP + " (default: what --from logged, else gpu)")
    p.add_argument("--no-prediction", action="store_true", help="start from --hi, not from the predicted frontier")
    p.add_argument("--results-dir", type=Path, default=Path("results"), help="where the run directory goes")
    add_timeout(p.add_argument)
    p.add_argument("--json", action="store_true", help="the frontiers as one JSON object on stdout")

    p = add_command(sub, "report", "the outcome grid and KV plot of a run: at the terminal, as one offline HTML "
                    "file, or as markdown for a CI job summary",
                    ["boot-harness report results/<run-id>",
                     "boot-harness report results/<run-id> --html report.html --markdown -"],
                    {0: "written", **USAGE_EXIT})
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory (or its results.json)")
    p.add_argument("--html", type=Path, metavar="FILE", help="write one offline HTML file (plot embedded)")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="'-' writes to stdout")
    p.add_argument("--plot", type=Path, metavar="FILE", help="also write the KV plot as a PNG (linked from markdown)")
    p.add_argument("--axis", help="split into one grid per value of this axis (default: image, if any)")
    p.add_argument("--length-axis", help="the max_model_len axis (the grid's rows)")
    p.add_argument("--json", action="store_true", help="every cell as the grid shows it (outcome, cause and hint, KV "
                   "figures, expectation) and the notes, as one JSON object on stdout")

    p = add_command(sub, "check", "the nightly gate on one run by itself: did every cell meet its expectation?",
                    ["boot-harness check merged/nightly-<run>"],
                    {0: "complete, and every cell met its expectation (or has none)",
                     1: "not complete, or a cell errored (where its expectation did not say so) or missed (one line "
                        "each)", **USAGE_EXIT})
    p.add_argument("run", type=Path, metavar="RUN", help="a run directory (or its results.json)")
    p.add_argument("--json", action="store_true", help="the verdict, the counts and each miss as one JSON object on "
                   "stdout")

    p = add_command(sub, "history", "many nights at once: since when each cell has its verdict, what changed across "
                    "that boundary, and where its boot time stepped",
                    ["boot-harness history nightly-runs/",
                     "boot-harness history nightly-runs/ --select 'mml131072-*' --last 30 --markdown - --html h.html"],
                    {0: "told", 1: "a cell missed its expectation in the latest complete run", **USAGE_EXIT},
                    "Runs (or folders holding them) are ordered by when they started; cells are matched by id. A run "
                    "that cannot be read is skipped with a warning; one still running or interrupted is shown, never "
                    "read as a verdict. See docs/history.md.")
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN_OR_FOLDER",
                   help="run directories, or folders searched for them")
    p.add_argument("--select", "-s", action="append", metavar="EXPR", help="cells to tell (as `run`)")
    p.add_argument("--last", type=int, metavar="N", help="only the N latest runs")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="'-' writes to stdout")
    p.add_argument("--html", type=Path, metavar="FILE", help="write one offline HTML page")
    return {"compare": cmd_compare, "analyze": cmd_analyze, "frontier": cmd_frontier, "report": cmd_report,
            "check": cmd_check, "history": cmd_history}


def cmd_history(args: argparse.Namespace, out: Console) -> int:
    from harness.analysis.history import build_history
    from harness.analysis.history_runs import read_nights
    from harness.report.history import render_html, render_markdown, render_table
    from harness.report.html import write_text

    for flag, path in (("--html", args.html), ("--markdown", args.markdown)):
        if path is not None and str(path) != "-" and path.is_dir():
            raise UsageError(f"{flag} {path}: is a directory; give the file to write")
    if args.last is not None and args.last < 1:
        raise UsageError(f"--last {args.last}: give 1 or more runs")
    if args.json and str(args.markdown) == "-":
        raise UsageError("--json and --markdown -: both write stdout; give --markdown a file")
    warned: list[str] = []
    warn = say_to(stderr())

    def note(line: str) -> None:
        warned.append(line)
        warn(f"warning: {line}")

    h = build_history(read_nights(args.runs, note), args.select, args.last, warned)
    if args.html:
        write_text(args.html, render_html(h), "--html")
        warn(f"html: {args.html}")
    if args.markdown and str(args.markdown) != "-":
        write_text(args.markdown, render_markdown(h), "--markdown")
        warn(f"markdown: {args.markdown}")
    if args.json:
        emit(h.output())
    elif str(args.markdown) == "-":
        sys.stdout.write(render_markdown(h))
    else:
        show(out, render_table(h))
    return ExitCode.FAILED if h.missed() else ExitCode.OK


def cmd_check(args: argparse.Namespace, out: Console) -> int:
    from harness.analysis.check import check_output, misses
    from harness.results.store import load_run

    run, run_dir = load_run(args.run)
    found = misses(run)
    if args.json:
        emit(check_output(run, str(run_dir), found))
        return ExitCode.FAILED if found else ExitCode.OK
    say = say_to(out)
    for m in found:
        say(f"{m.cell_id or run.run_id}: {m.why}")
    s = run.summary
    say(f"{run_dir}: {'FAIL' if found else 'ok'} — {s.get('cells', 0)} cells, {s.get('matched', 0)} matched, "
        f"{s.get('mismatched', 0)} mismatched, {s.get(Outcome.error, 0)} errors ({run.status})")
    return ExitCode.FAILED if found else ExitCode.OK


def cmd_compare(args: argparse.Namespace, out: Console) -> int:
    from harness.analysis.compare import compare_runs
    from harness.analysis.kv import length_axis
    from harness.analysis.pairs import pairs_output, pairs_within
    from harness.cli.tolerances import parse_memory_tolerance, parse_time_tolerance, parse_tolerance
    from harness.report.compare import render_diff, render_pairs
    from harness.results.store import load_run

    if len(args.runs) > 2:
        raise UsageError("compare takes one run (pairs within it) or two runs (A then B)")
    if len(args.runs) == 1:
        run, run_dir = load_run(args.runs[0])
        pairs = pairs_within(run, args.axis, args.length_axis)
        if args.json:
            emit(pairs_output(run, args.axis, pairs))
        else:
            show(out, render_pairs(pairs, run.run_id))
        return ExitCode.OK
    tolerance = parse_tolerance(args.tolerance)
    time_tolerance = parse_time_tolerance(args.time_tolerance)
    memory_tolerance = parse_memory_tolerance(args.memory_tolerance)
    (a, _), (b, _) = load_run(args.runs[0]), load_run(args.runs[1])
    for run in (a, b):
        length_axis(run, args.length_axis)  # a --length-axis no run has is refused, never silently unused
    diff = compare_runs(a, b, tolerance, time_tolerance, memory_tolerance)
    if args.json:
        emit(diff.output())
    else:
        show(out, render_diff(diff))
    return ExitCode.FAILED if diff.has_regression else ExitCode.OK


def cmd_analyze(args: argparse.Namespace, out: Console) -> int:
    from harness.analysis.fit import AnalyzeEmptyJson, analyze_run, no_cells
    from harness.report.analysis import render
    from harness.results.store import load_run

    run, run_dir = load_run(args.run)
    if (empty := no_cells(run)) is not None:  # not bad input: nothing to analyze, said so
        emit(AnalyzeEmptyJson(run=run.run_id, cells=0, note=empty)) if args.json else say_to(out)(empty)
        return ExitCode.OK
    analysis = analyze_run(run, args.length_axis, args.block_size)
    if args.json:
        emit(analysis.output())
    else:
        show(out, render(analysis))
    return ExitCode.OK


def cmd_frontier(args: argparse.Namespace, out: Console) -> int:
    from harness.analysis.frontier import FrontierJson, SearchStatus
    from harness.boot.frontier import run_frontier
    from harness.matrix.selection import selected
    from harness.report.frontier import render_frontiers
    from harness.results.store import load_run

    sel = selected(args.matrix, args.select)
    loaded, cells = sel.loaded, sel.cells
    if args.lo is not None and args.hi is not None and args.lo > args.hi:
        raise UsageError(f"--lo {args.lo} is above --hi {args.hi}")
    from_run = load_run(args.from_run)[0] if args.from_run else None
    try:
        run_dir, found = run_frontier(loaded, cells, lo=args.lo, hi=args.hi, axis=args.axis,
                                      results_dir=args.results_dir, block=args.block_size, selection=args.select,
                                      timeout_s=args.timeout_s, from_run=from_run, say=say_to(stderr()),
                                      predict=not args.no_prediction, platform=args.platform,
                                      runtime=args.runtimes(loaded))
    except (RunStopped, KeyboardInterrupt):
        say_to(stderr())("interrupted: the probes booted so far are kept in the run directory")
        return ExitCode.INTERRUPTED
    if args.json:
        emit(FrontierJson(run_dir=str(run_dir), groups=[g.output() for g in found]))
    else:
        show(out, render_frontiers(found, run_dir))
        say_to(out)(f"boots: {sum(g.search.boots for g in found)}; results: {run_dir / 'results.json'}")
    stopped = any(g.search.status in (SearchStatus.stopped, SearchStatus.limit) for g in found)
    return ExitCode.FAILED if stopped else ExitCode.OK


def cmd_report(args: argparse.Namespace, out: Console) -> int:
    from harness.report.build import build_report
    from harness.report.grid import grid_renderable
    from harness.report.html import write_text
    from harness.results.store import load_run

    for flag, path in (("--html", args.html), ("--markdown", args.markdown), ("--plot", args.plot)):
        if path is not None and str(path) != "-" and path.is_dir():
            raise UsageError(f"{flag} {path}: is a directory; give the file to write")
    if args.json and str(args.markdown) == "-":
        raise UsageError("--json and --markdown -: both write stdout; give --markdown a file")
    run, run_dir = load_run(args.run)
    rep = build_report(run, args.axis, args.length_axis, plot=bool(args.html or args.plot))
    if args.plot:
        if rep.png is None:
            raise UsageError(f"--plot {args.plot}: " + (rep.notes[-1] if rep.notes else "nothing to plot"))
        write_text(args.plot, rep.png, "--plot")
    if args.html:
        write_text(args.html, rep.html(), "--html")
        say_to(stderr())(f"html: {args.html}")
    if args.markdown:
        link = None
        if args.plot:
            base = Path.cwd() if str(args.markdown) == "-" else args.markdown.resolve().parent
            try:
                link = str(args.plot.resolve().relative_to(base))
            except ValueError:
                link = str(args.plot.resolve())
        text = rep.markdown(link)
        if str(args.markdown) == "-":
            sys.stdout.write(text)
        else:
            write_text(args.markdown, text, "--markdown")
            say_to(stderr())(f"markdown: {args.markdown}")
    if args.json:
        from harness.report.json_view import report_output

        emit(report_output(rep, str(run_dir)))
    elif str(args.markdown) != "-":  # markdown on stdout is for a pipe: nothing else goes there
        show(out, grid_renderable(run, args.axis, args.length_axis))
        for n in rep.notes:
            say_to(out)(f"note: {n}")
    return ExitCode.OK
