"""`boot-harness` as a user runs it: a child process through pipes (no TTY, COLUMNS unset), its output as text. The
one way the tests start the CLI; `harness.cli.main(argv)` in-process (`in_process`) is for the fast unit tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The command line of `boot-harness` from this checkout (what the installed entry point runs).
BOOT_HARNESS = (sys.executable, "-m", "harness.cli")
#: `boot-harness` with the FakeRuntime handed in (every cell boots): the docs check's stand-in.
STANDIN_CLI = (sys.executable, str(ROOT / "tests" / "standins" / "cli" / "boot-harness"))


def cli_env(env: dict[str, str] | None = None, inherit: bool = True) -> dict[str, str]:
    """The child's environment: this one less the terminal's size (or nothing), plain output, and `env` on top."""
    base = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} if inherit else {}
    return {**base, "NO_COLOR": "1", **(env or {})}


def boot_harness(*args: object, env: dict[str, str] | None = None, cwd: Path = ROOT, timeout: float = 300,
                 program: Sequence[str] = BOOT_HARNESS, inherit_env: bool = True,
                 **run) -> subprocess.CompletedProcess:
    """`boot-harness ARGS` run to the end, its output captured as text. `program`: another way in (STANDIN_CLI, the
    console script, a `python -c` wrapper); `inherit_env=False`: `env` alone; `run`: more subprocess.run keywords."""
    return subprocess.run([*program, *map(str, args)], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=cli_env(env, inherit_env), **run)


def start_boot_harness(*args: object, env: dict[str, str] | None = None, cwd: Path = ROOT,
                       program: Sequence[str] = BOOT_HARNESS, **popen) -> subprocess.Popen:
    """`boot-harness ARGS` left running (to signal it, to act while it boots); its output goes where `popen` says."""
    popen.setdefault("text", True)
    return subprocess.Popen([*program, *map(str, args)], cwd=cwd, env=cli_env(env), **popen)


def in_process(*argv: str) -> int:
    """`boot-harness ARGV`, in this process: its exit code; its output goes to the test's captured streams."""
    from harness.cli import main

    return main(list(argv))
