"""`validate` and `cells`: what a matrix file holds, without booting anything."""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from harness.cli.common import add_matrix, add_selection, add_shard, say_to, stderr
from harness.selection import selected
from harness.exitcodes import ExitCode


def register(sub: argparse._SubParsersAction) -> dict:
    p = sub.add_parser("validate", help="check a matrix file and exit 0, or print what is wrong and exit 2")
    add_matrix(p)
    p = sub.add_parser("cells", help="list cell ids, one a line")
    add_matrix(p)
    add_selection(p)
    add_shard(p)
    p.add_argument("--json", action="store_true", help="one JSON object per cell: id, axes, argv, env, expected")
    return {"validate": cmd_validate, "cells": cmd_cells}


def cmd_validate(args: argparse.Namespace, out: Console) -> int:
    sel = selected(args.matrix, None)
    expected = sum(1 for c in sel.cells if c.expected)
    out.print(f"{args.matrix}: ok — {len(sel.cells)} cells on {len(sel.loaded.matrix.axes)} axes, "
              f"{expected} with an expectation", highlight=False)
    return ExitCode.OK


def cmd_cells(args: argparse.Namespace, out: Console) -> int:
    from harness.masking import Masker, secret_values

    sel = selected(args.matrix, args.select, args.shard)
    if not sel.cells:
        say_to(stderr())(f"shard {sel.shard}: none of the {sel.total} selected cells hashes into this shard")
    for c in sel.cells:
        if args.json:
            masker = Masker(secret_values() | secret_values(c.env, c.server_args))
            print(json.dumps({"id": c.id, "axes": c.axes, "server_args": masker.argv(c.server_args),
                              "env": masker.env(c.env),
                              "image": c.image, "expected": None if not c.expected else
                              {"outcome": c.expected.outcome, "reason": c.expected.reason}}))
        else:
            print(c.id)
    return ExitCode.OK
