"""`validate` and `cells`: what a matrix file holds, without booting anything."""

from __future__ import annotations

import argparse

from rich.console import Console

from harness.cli.common import USAGE_EXIT, add_command, add_matrix, add_selection, add_shard, echo, say_to, stderr
from harness.emit import emit
from harness.exitcodes import ExitCode


def register(sub: argparse._SubParsersAction) -> dict:
    p = add_command(sub, "validate", "check a matrix file: every mistake is one line `FILE:key.path: what is wrong`",
                    ["boot-harness validate --matrix matrix.yaml"],
                    {0: "the file is a valid matrix (a variable the environment does not set is a note: `run` "
                        "needs it)",
             2: "it is not (every mistake listed, one line each)"})
    add_matrix(p)
    p = add_command(sub, "cells", "list the matrix's cell ids, one a line (--json: argv, env, expectation too)",
                    ["boot-harness cells --matrix matrix.yaml",
                     "boot-harness cells --matrix matrix.yaml --select mtp=mtp4 --json"],
                    {0: "listed (also for a shard that holds no cell)", **USAGE_EXIT},
                    "Variables the environment does not set are shown as <NAME>, with the matrix's setup command.")
    add_matrix(p)
    add_selection(p)
    add_shard(p)
    p.add_argument("--json", action="store_true",
                   help="one JSON object: the matrix, the selection and `cells`, each with the record's keys (cell_id, "
                        "axes, env, expected) and server_args, the arguments after the server command")
    return {"validate": cmd_validate, "cells": cmd_cells}


def cmd_validate(args: argparse.Namespace, out: Console) -> int:
    from harness.matrix.selection import selected

    # an unset variable is no mistake in the file: it reads as <NAME>, and the note names it (`run` refuses it)
    sel = selected(args.matrix, None, placeholders=True)
    _unset_note(sel)
    expected = sum(1 for c in sel.cells if c.expected)
    say_to(out)(f"{args.matrix}: ok — {len(sel.cells)} cells on {len(sel.loaded.matrix.axes)} axes, "
                f"{expected} with an expectation")
    return ExitCode.OK


def _unset_note(sel) -> None:
    """What a read-only command showed of an environment that is not set up, and how to set it up."""
    if sel.loaded.unset:
        names = ", ".join(sel.loaded.unset)
        setup = sel.loaded.matrix.setup
        say_to(stderr())(f"note: {names} {'is' if len(sel.loaded.unset) == 1 else 'are'} not set, shown as "
                         f"<NAME>; `run` needs {'it' if len(sel.loaded.unset) == 1 else 'them'}"
                         + (f": {setup}" if setup else ""))


def cmd_cells(args: argparse.Namespace, out: Console) -> int:
    from harness.matrix.selection import cells_output, selected
    from harness.matrix.shard import resolve_shard

    shard, scheduler = resolve_shard(args.shard)
    sel = selected(args.matrix, args.select, shard, placeholders=True)
    if scheduler is not None:
        say_to(stderr())(f"--shard auto: {scheduler.said()}")
    _unset_note(sel)
    if not sel.cells:
        say_to(stderr())(f"shard {sel.shard}: none of the {sel.total} selected cells hashes into this shard")
    if not args.json:
        for c in sel.cells:
            echo(c.id, line=True)
        return ExitCode.OK
    emit(cells_output(args.matrix, args.select, sel))
    return ExitCode.OK
