"""The parser and the guard every command runs under: a UsageError is its one line and exit 2, Ctrl-C 130, a closed
pipe (`| head`) a quiet exit; one table of exit codes (harness.exitcodes)."""

from __future__ import annotations

import argparse
import faulthandler
import signal
import sys
from collections.abc import Callable

from rich.console import Console

from harness import __version__
from harness.errors import UsageError
from harness.exitcodes import ExitCode

Handler = Callable[[argparse.Namespace, Console], int]


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    from harness.cli import analysis_cmds, maintenance, matrix_cmds, run_cmds

    parser = argparse.ArgumentParser(
        prog="boot-harness",
        description="Boot every cell of a vLLM configuration matrix for real and record why it booted or refused.")
    parser.add_argument("--version", action="version", version=f"boot-harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    handlers: dict[str, Handler] = {}
    for module in (matrix_cmds, run_cmds, maintenance, analysis_cmds):
        handlers.update(module.register(sub))
    return parser, handlers


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
    parser, handlers = _build()
    args = parser.parse_args(argv)
    out = Console()
    try:
        return int(handlers[args.command](args, out))
    except UsageError as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=sys.stderr)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # `boot-harness cells ... | head`
        sys.stderr.close()
        return ExitCode.OK
