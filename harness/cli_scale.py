"""The scale-out half of the command line: `--shard I/N` (run, cells), `--parallel auto|N` (run), and `merge`.

harness/cli.py wires these in; everything here raises UsageError (one line, exit 2) for bad input, before any cell
runs and before a run directory is created.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.cells import Cell
from harness.errors import UsageError

EXIT_OK = 0


# ---- options
def add_shard_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", metavar="I/N",
                   help="only shard I of N (1-based): a stable split by cell id, for CI shard matrices")


def add_parallel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallel", default="1", metavar="auto|N",
                   help="cells at once (default 1); with gpus_per_cell each gets its own GPUs, auto = GPUs // "
                        "gpus_per_cell, or the CPU slots (BOOT_HARNESS_CPU_SLOTS, default 1) on a host without")
    p.add_argument("--gpu-idle-timeout-s", type=float, default=None, metavar="S",
                   help="how long a cell waits for its GPUs' memory to return to idle before starting anyway "
                        "(default 180)")


def add_merge_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("merge", help="merge the runs of a matrix's shards into one run directory")
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (one per shard)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="the merged run directory to create (must not exist, or be empty)")
    p.add_argument("--matrix", "-m", type=Path, default=None,
                   help="the matrix file, for the cells' order (default: the path the runs recorded, if unchanged)")
    return p


# ---- --shard
def apply_shard(args: argparse.Namespace, cells: list[Cell]) -> list[Cell]:
    """The cells of `--shard I/N` (all cells without it). Sets `args.shard_text` ("I/N" or None) and
    `args.shard_total` (how many cells there were before the split) for the run record and messages."""
    from harness.scale.shard import format_shard, parse_shard, shard_cells

    args.shard_total = len(cells)
    text = getattr(args, "shard", None)
    if not text:
        args.shard_text = None
        return cells
    i, n = parse_shard(text)
    args.shard_text = format_shard(i, n)
    return shard_cells(cells, i, n)


def empty_shard_run(args: argparse.Namespace, loaded: Any, out: Console) -> int:
    """`run --shard` whose shard holds no cell: not an error. Say so, and write an empty complete run (so that a CI
    shard job uploads a run directory like any other, and `merge` gets one per shard)."""
    from harness.results.store import RunStore

    err = Console(stderr=True)
    err.print(f"shard {args.shard_text}: none of the {args.shard_total} selected cells hashes into this shard — "
              "nothing to boot; writing an empty complete run", highlight=False)
    if getattr(args, "dry_run", False):
        return EXIT_OK
    if args.resume:
        store = RunStore.open(args.resume, loaded)
        check_resume_shard(store.run.shard, args.shard_text, args.resume)
    else:
        store = RunStore.create(args.results_dir, loaded, loaded.matrix.runtime, selection=args.select,
                                shard=args.shard_text)
    store.finish("complete")
    out.print(f"results: {store.run_dir / 'results.json'}", highlight=False)
    return EXIT_OK


def check_resume_shard(recorded: str | None, given: str | None, run_dir: Path) -> None:
    if (recorded or None) != (given or None):
        raise UsageError(f"{run_dir}: this run is shard {recorded or 'none (the whole selection)'}; resume it with "
                         f"{'--shard ' + recorded if recorded else 'no --shard'}")


# ---- --parallel
@dataclass
class ParallelPlan:
    parallel: int
    why: str
    inventory: Any
    gpus_per_cell: int
    idle_timeout_s: float | None = None
    #: The GPUs of the matrix's shared `gpus:` request (each cell, one at a time, waits for them to be idle).
    shared_gpus: list[int] | None = None

    def describe(self) -> str:
        shared = f"; every cell waits for GPUs {', '.join(map(str, self.shared_gpus))} to be idle" if self.shared_gpus else ""
        return f"parallel: {self.parallel} ({self.why}; {self.inventory.kind} inventory{shared})"


def plan_parallel(loaded: Any, args: argparse.Namespace) -> ParallelPlan | None:
    """None: the plain sequential loop (`--parallel 1`, no GPUs). Otherwise how the scheduler runs: a matrix that
    asks for GPUs always goes through it, one cell at a time included, so that every cell waits for the GPU memory
    of the last one to be released and a memory-busy refusal is retried."""
    from harness.gpu.inventory import open_inventory, parse_parallel, resolve_parallel, shared_indices

    m = loaded.matrix
    spec = getattr(args, "parallel", "1") or "1"
    wanted = parse_parallel(spec)
    shares = m.gpus is not None and m.gpus_per_cell == 0
    if wanted == 1 and m.gpus_per_cell == 0 and not shares:
        return None
    inventory = open_inventory(m.gpus_per_cell, id_kind="uuid" if m.runtime == "process" else "index",
                               shares_gpus=shares)
    n, why = resolve_parallel(spec, inventory, m.gpus_per_cell, shares_gpus=m.gpus is not None)
    shared = shared_indices(m.gpus, inventory) if shares else None
    if n == 1 and m.gpus_per_cell == 0 and not shared:
        return None
    return ParallelPlan(n, why, inventory, m.gpus_per_cell, getattr(args, "gpu_idle_timeout_s", None), shared)


def run_planned(plan: ParallelPlan | None, todo: list[Cell], runner: Any, observer: Any) -> list:
    """Run the cells the way `plan` says; interrupts propagate (the run is marked interrupted) as with run_cells."""
    from harness.runner import run_cells

    if plan is None:
        return run_cells(todo, runner, observer)
    from harness.gpu.idle import IdleBaseline
    from harness.scale.scheduler import Scheduler

    idle = None
    if plan.gpus_per_cell > 0 or plan.shared_gpus:
        idle = IdleBaseline(plan.inventory, **({"timeout_s": plan.idle_timeout_s} if plan.idle_timeout_s else {}))
    return Scheduler(runner, plan.inventory, plan.parallel, plan.gpus_per_cell, observer=observer, idle=idle,
                     shared_gpus=plan.shared_gpus).run(todo)


# ---- merge
def cmd_merge(args: argparse.Namespace, out: Console) -> int:
    from harness.scale.merge import merge_runs

    result = merge_runs(list(args.run_dirs), args.out, args.matrix)
    err = Console(stderr=True)
    for w in result.warnings:
        err.print(f"merge: {w}", highlight=False)
    run = result.run
    s = run.summary
    out.print(f"merged {len(result.sources)} run(s), {s.get('cells', 0)} cells ({s.get('matched', 0)} matched, "
              f"{s.get('mismatched', 0)} mismatched) into {result.run_dir}: {run.status}", highlight=False)
    out.print(f"results: {result.run_dir / 'results.json'}", highlight=False)
    return EXIT_OK
