"""`boot-harness`: the command line over the library. argparse and calls: every decision (what a run is, what a verdict
is, what exit code a run earns) is the library's; bad input or a missing runtime is one line on stderr and exit 2."""

from harness.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
