"""What several commands share: the matrix/selection/shard options and the cells they pick, and the consoles (which
print text as written: harness.report.text)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console

from harness.report.text import literal, plain_console, say_line


def add_matrix(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", "-m", required=True, type=Path, help="the matrix file (YAML)")


def add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--select", "-s", action="append", metavar="EXPR",
                   help="cells to take: `axis=value[|value]` terms and id globs, comma-joined (repeatable)")


def add_shard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", metavar="I/N|auto",
                   help="only shard I of N (1-based): a stable split by cell id, for CI shard matrices; auto: I and N "
                        "from the scheduler that started it (Buildkite parallelism, a Kubernetes Indexed Job, a Slurm "
                        "array; docs/scale.md)")


def add_parallel(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallel", default="1", metavar="auto|N",
                   help="cells at once (default 1); with gpus_per_cell each gets its own GPUs, auto = GPUs // "
                        "gpus_per_cell, or the CPU slots (BOOT_HARNESS_CPU_SLOTS, default 1) on a host without")
    p.add_argument("--gpu-idle-timeout-s", type=float, default=None, metavar="S",
                   help="how long a cell waits for its GPUs' memory to return to idle before starting anyway "
                        "(default 180)")


def add_timeout(add_option: Callable[..., Any], flag: str = "--timeout-s", **kw: Any) -> None:
    """The one declaration of the per-cell deadline override, for `run`, `repro`, `frontier` and the pytest plugin
    (`add_option` is a parser's `add_argument` or a pytest group's `addoption`). It is checked in one place, where
    every entry point hands it over: RunOptions (harness.boot.session)."""
    add_option(flag, type=float, default=None, metavar="S", help="override the matrix's per-cell deadline (seconds)",
               **kw)


def stderr() -> Console:
    return plain_console(stderr=True)


def echo(text: str, *, line: bool = False, file: Any = None, flush: bool = False) -> None:
    """print() for what a command writes as plain text (ids, shell commands, a streamed log): control characters
    shown as escapes, \n and \t too with `line` (one value, a `# comment`), never raw (harness.escape)."""
    from harness.escape import terminal, terminal_line

    print(terminal_line(text) if line else terminal(text), file=file, flush=flush)


def say_to(console: Console, *, whole: bool = False):
    """A line printer for library messages and command output: literal (no markup, no emoji codes: `sha256:…:` is no
    emoji, no highlighting), control characters shown as escapes (harness.escape), wrapped at the output's
    width at spaces only, never inside an id or a path (harness.report.text.say_line), on any console. A line may be
    rich Text, for its style. `whole`: lines that quote a log, never wrapped."""
    if whole:
        return lambda line: console.print(literal(line), highlight=False, markup=False, emoji=False, soft_wrap=True)
    return lambda line: say_line(console, line)


def add_command(sub: argparse._SubParsersAction, name: str, purpose: str, examples: list[str],
                exits: dict[int, str], details: str = "") -> argparse.ArgumentParser:
    """A subcommand whose --help says what it is for, shows how it is used and what its exit codes mean."""
    lines = ["examples:", *(f"  {e}" for e in examples), "", "exit codes:",
             *(f"  {code:<3} {meaning}" for code, meaning in sorted(exits.items()))]
    return sub.add_parser(name, help=purpose, description=purpose + (f"\n\n{details}" if details else ""),
                          epilog="\n".join(lines), formatter_class=argparse.RawDescriptionHelpFormatter)


#: The exit code every command shares for bad input.
USAGE_EXIT = {2: "bad input or a missing prerequisite (one line on stderr)"}
