"""`bisect`: which build broke a cell's verdict — the cell booted on candidates (images, or commands/venvs for a
process cell) between a good end and a bad end, through harness.bisect."""

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


def register(sub: argparse._SubParsersAction) -> dict:
    p = add_command(
        sub, "bisect", "boot one cell on the builds between a good and a bad one until the first bad build is known",
        ["boot-harness bisect --matrix matrix.yaml mml131072-mtp4-floor_env-image_patched --good fork:v1.2 "
         "--bad fork:v1.9 --refs builds.txt",
         "boot-harness bisect --matrix examples/cpu-tiny.yaml mml2048-spec_off-kv_tight --good venv:/opt/a "
         "--bad venv:/opt/c --refs venv:/opt/b",
         "boot-harness bisect --matrix matrix.yaml CELL --good v1.2 --bad v1.9 --refs 'registry:ghcr.io/org/fork:v1.*'",
         "boot-harness bisect --resume results/<run-id>"],
        {0: "the first bad candidate is found", 1: "only a range is known (candidates left out between the last "
         "good and the first bad), or --on-patch-fail stop stopped it", **USAGE_EXIT,
         130: "interrupted: booted candidates are kept (--resume goes on)"},
        "Candidates are oldest first: image references or digests for a container cell; for a process cell\n"
        "`venv:DIR` (DIR/bin/vllm serve), `cmd:WORDS` (split as a shell would, no shell run) or a bare folder or\n"
        "command. `--refs` takes them as arguments, a file (one a line, # comments) or `registry:HOST/REPO[:GLOB]`\n"
        "(the registry's tag list, ordered by each tag's creation time). The ends are booted first; every boot is\n"
        "a cell record of one run directory RESULTS_DIR/<matrix>-bisect-…/ (plus bisect.json). See docs/bisect.md.")
    p.add_argument("--matrix", "-m", type=Path, help="the matrix file (YAML); with --resume, the recorded one")
    p.add_argument("cell_id", nargs="?", help="the cell to bisect (see `boot-harness cells`)")
    p.add_argument("--good", metavar="REF", help="a candidate that gives the good verdict (the oldest end)")
    p.add_argument("--bad", metavar="REF", help="a candidate that gives the bad verdict (the newest end)")
    p.add_argument("--refs", nargs="+", metavar="FILE|REF|registry:REPO[:GLOB]",
                   help="the candidates between (and maybe including) the ends, oldest first")
    p.add_argument("--on", choices=["verdict", "time", "memory"], default=None,
                   help="what makes a candidate bad: the bad end's verdict (default), a slower boot (or --phase) "
                        "beyond --time-tolerance, a memory peak grown beyond --memory-tolerance")
    p.add_argument("--phase", metavar="NAME", help="--on time: the phase compared, as `compare` names it "
                                                   "(default: the whole boot, to the verdict)")
    p.add_argument("--time-tolerance", metavar="25%,30s", help="--on time: slower by more than both (as compare)")
    p.add_argument("--memory-tolerance", metavar="10%,256MiB", help="--on memory: grown by more than both")
    p.add_argument("--repeat", type=values.repeat, default=None,
                   metavar="K", help="boot each decisive candidate K times; one whose boots disagree is left out "
                                     "as flipped (default 1)")
    p.add_argument("--on-patch-fail", choices=["skip", "bad", "stop"], default=None,
                   help="a patched cell's patch that does not fit a candidate: leave it out (default), count it "
                        "bad, or stop there")
    p.add_argument("--from", dest="from_runs", nargs="+", type=Path, metavar="RUN",
                   help="runs (or folders of runs, as `history` takes them) whose records of the cell stand for an "
                        "end's boot when they are of this very build: a complete run of the same matrix file and "
                        "boot-harness, on the image digest the end resolves to now (a container cell, --on verdict)")
    p.add_argument("--results-dir", type=Path, default=Path("results"), help="where the run directory goes")
    p.add_argument("--resume", type=Path, metavar="RUN_DIR", help="go on with an interrupted bisect")
    add_timeout(p.add_argument)
    p.add_argument("--json", action="store_true", help="the answer as one JSON object on stdout")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="the answer as markdown ('-': stdout)")
    return {"bisect": cmd_bisect}


def _plan(args: argparse.Namespace, recorded, kind, cell_id: str, matrix: Path):
    from harness.bisect.candidates import BuildKind, ordered, read_refs_file
    from harness.bisect.oracle import On
    from harness.bisect.runner import OnPatchFail, Plan

    asked = any(v is not None for v in (args.good, args.bad, args.refs, args.from_runs))
    if recorded is not None and not asked:
        cands = recorded.candidates
    else:
        if not args.good or not args.bad:
            raise UsageError("bisect: give --good REF and --bad REF (the ends), or --resume RUN_DIR")
        created: dict[str, str] = {}
        refs: list[str] = []
        for item in args.refs or []:
            if item.startswith("registry:"):
                from harness.bisect.registry import tags_by_creation

                listed = tags_by_creation(item[len("registry:"):])
                created.update(listed)
                refs += list(listed)
            elif Path(item).is_file():
                refs += read_refs_file(Path(item))
            else:
                refs.append(item)
        cands = ordered(refs, args.good, args.bad, kind, created)
    base = recorded or Plan(str(matrix), cell_id, cands)
    def pick(given, then):
        return then if given is None else given

    from_runs = tuple(str(p.resolve()) for p in args.from_runs) if args.from_runs else None
    plan = Plan(str(base.matrix) if recorded else str(matrix), cell_id, cands,
                On(pick(args.on, base.on.value)), pick(args.phase, base.phase),
                pick(args.time_tolerance, base.time_tolerance), pick(args.memory_tolerance, base.memory_tolerance),
                pick(args.repeat, base.repeat), OnPatchFail(pick(args.on_patch_fail, base.on_patch_fail.value)),
                pick(from_runs, base.from_runs))
    if plan.from_runs and kind == BuildKind.command:
        raise UsageError("--from: a process build has no image digest to prove a record ran it; --from reads the "
                         "ends of a container cell")
    if plan.from_runs and plan.on != On.verdict:
        raise UsageError(f"--from reads verdicts; --on {plan.on.value} compares the boots of one bisect run (one "
                         "host, one load)")
    return plan


def _oracle(plan):
    from harness.analysis.timing import BOOT
    from harness.analysis.tolerance import DEFAULT_MEMORY_TOLERANCE, DEFAULT_TIME_TOLERANCE
    from harness.bisect.oracle import Oracle
    from harness.cli.tolerances import parse_memory_tolerance, parse_time_tolerance
    from harness.logfacts.timeline import PHASES

    names = [BOOT, *PHASES.values()]
    if plan.phase not in names:
        raise UsageError(f"--phase {plan.phase}: not a phase (phases are: {', '.join(names)})")
    if plan.repeat < 1 or plan.repeat > 100:
        raise UsageError(f"--repeat {plan.repeat}: give 1 to 100 boots")
    return Oracle(plan.on, plan.phase,
                  parse_time_tolerance(plan.time_tolerance) if plan.time_tolerance else DEFAULT_TIME_TOLERANCE,
                  parse_memory_tolerance(plan.memory_tolerance) if plan.memory_tolerance
                  else DEFAULT_MEMORY_TOLERANCE)


def cmd_bisect(args: argparse.Namespace, out: Console) -> int:
    from harness.bisect.answer import CandidateJson, answer, build_facts, markdown, text_lines
    from harness.bisect.candidates import BuildKind
    from harness.bisect.known import FromRuns
    from harness.bisect.runner import BisectRunner, plan_matches, read_plan
    from harness.matrix.selection import selected
    from harness.report.html import write_text
    from harness.runtime.pull import PullDisplay

    if args.markdown is not None and str(args.markdown) != "-" and args.markdown.is_dir():
        raise UsageError(f"--markdown {args.markdown}: is a directory; give the file to write")
    if args.json and str(args.markdown) == "-":
        raise UsageError("--json and --markdown -: both write stdout; give --markdown a file")
    recorded = read_plan(args.resume)[0] if args.resume else None
    matrix = args.matrix or (Path(recorded.matrix) if recorded else None)
    if matrix is None:
        raise UsageError("bisect: give --matrix FILE (or --resume RUN_DIR)")
    cell_id = args.cell_id or (recorded.cell if recorded else None)
    if cell_id is None:
        raise UsageError("bisect: give the cell to bisect (see `boot-harness cells`)")
    sel = selected(matrix, None)
    cells = {c.id: c for c in sel.cells}
    if cell_id not in cells:
        from harness.matrix.cells import explain_missing_id

        why = explain_missing_id(sel.loaded.matrix, cell_id, sel.cells)
        raise UsageError(f"{matrix}: {why} (see `boot-harness cells --matrix {matrix}`)")
    template = cells[cell_id]
    kind = BuildKind.command if sel.loaded.matrix.runtime == "process" else BuildKind.image
    plan = _plan(args, recorded, kind, cell_id, matrix)
    if recorded is not None:
        differs = plan_matches(recorded, plan)
        if differs:
            raise UsageError(f"{args.resume}: this run bisected another question ({differs}); resume it with the "
                             "arguments it was started with, or none")
    oracle = _oracle(plan)
    from_runs = FromRuns([Path(p) for p in plan.from_runs], cell_id) if plan.from_runs else None
    err = stderr()
    say = say_to(err)
    runner = BisectRunner(sel.loaded, template, plan, oracle, results_dir=args.results_dir, resume=args.resume,
                          timeout_s=args.timeout_s, runtime=args.runtimes(sel.loaded), say=say,
                          pull_observer=PullDisplay(err), from_runs=from_runs)
    say(f"run directory: {runner.run_dir}  ({plan.on.value} of {cell_id} over {len(plan.candidates)} candidates: "
        f"the two ends first, then at most {_worst(len(plan.candidates)) * plan.repeat} more boot(s))")
    try:
        found = runner.run()
    except (RunStopped, KeyboardInterrupt):
        say(f"interrupted: booted candidates are kept in {runner.run_dir} (continue with --resume {runner.run_dir})")
        return ExitCode.INTERRUPTED
    assert runner.session.runtime is not None
    labels_of = runner.session.runtime.image_labels

    def facts(i: int) -> CandidateJson:
        cand = plan.candidates[i]
        p = runner.probed.get(i)
        labels = None
        if cand.image:
            try:
                labels = labels_of(cand.image)
            except Exception:  # noqa: BLE001 - labels are a courtesy of the engine; the answer stands without them
                labels = None
        step = next((s for s in runner.steps if s.index == i), None)
        return build_facts(cand, p.records if p else [], [s.said for s in step.said] if step else [], oracle, labels,
                           p.read_from if p else [])

    recorded_boots = sum(len(p.records) for p in runner.probed.values()) - runner.boots
    a = answer(cell_id, plan.candidates, found, facts, oracle, str(runner.run_dir), runner.boots, recorded_boots)
    runner.keep_answer(a)
    if args.markdown is not None and str(args.markdown) != "-":
        write_text(args.markdown, markdown(a), "--markdown")
        say(f"markdown: {args.markdown}")
    if args.json:
        emit(a)
    elif str(args.markdown) == "-":
        sys.stdout.write(markdown(a))
    else:
        show = say_to(out)
        for line in text_lines(a):
            show(line)
    return ExitCode.OK if a.status == "found" else ExitCode.FAILED


def _worst(n: int) -> int:
    from harness.bisect.search import worst_probes

    return worst_probes(0, n - 1)
