"""The parser and the guard every command runs under: a UsageError is its one line and exit 2, Ctrl-C 130, a closed
pipe (`| head`) a quiet exit; one table of exit codes (harness.exitcodes)."""

from __future__ import annotations

import argparse
import difflib
import faulthandler
import re
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from rich.console import Console

from harness.errors import HarnessError, InputError, RunStopped, UsageError
from harness.exitcodes import ExitCode
from harness.report.text import plain_console
from harness.version import __version__

if TYPE_CHECKING:
    from harness.runtime import RuntimeFactory

Handler = Callable[[argparse.Namespace, Console], int]


def _matrix_runtime(loaded):
    """The runtime a matrix asks for, imported when a command first needs one (`--help` and `validate` never do)."""
    from harness.runtime import make_runtime

    return make_runtime(loaded)


class Parser(argparse.ArgumentParser):
    """argparse, with what a user gets wrong answered in one line: no prefix matching (`--dry` is not `--dry-run`),
    an error names the command and suggests the nearest flag or command, exit 2."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'?([\w-]+)'?", m.group(2))
            near = difflib.get_close_matches(m.group(1), choices, n=1)
            if near:
                message += f"; did you mean {near[0]!r}?"
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")

    def unknown(self, extras: list[str]) -> None:
        flags = [o for a in self._actions for o in a.option_strings]
        first = extras[0]
        near = difflib.get_close_matches(first.split("=", 1)[0], flags, n=1) if first.startswith("-") else []
        hint = f"; did you mean {near[0]}?" if near else ""
        raise UsageError(f"{self.prog}: unrecognized argument{'s' if len(extras) > 1 else ''} {' '.join(extras)}"
                         f"{hint} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    return _build()[0]


def _build() -> tuple[argparse.ArgumentParser, dict[str, Handler]]:
    from harness.cli import analysis_cmds, bisect_cmds, maintenance, matrix_cmds, predict_cmds, run_cmds

    parser = Parser(
        prog="boot-harness", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Boot every cell of a vLLM configuration matrix for real and record why it booted or refused.",
        epilog="`boot-harness COMMAND --help` shows a command's examples and exit codes.\n\nexit codes: 0 ok, "
               "1 an expectation missed / a regression / a cell errored, 2 bad input or a missing prerequisite "
               "(one line on stderr), 130 interrupted")
    parser.add_argument("--version", action="version", version=f"boot-harness {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    handlers: dict[str, Handler] = {}
    for module in (matrix_cmds, run_cmds, maintenance, analysis_cmds, predict_cmds, bisect_cmds):
        handlers.update(module.register(sub))
    return parser, handlers


def _commands(parser: argparse.ArgumentParser) -> dict[str, Parser]:
    """The commands' parsers, by name, where argparse keeps them: the `choices` of its one subparsers action."""
    group = parser._subparsers
    return cast(dict[str, Parser], group._group_actions[0].choices) if group is not None else {}


def _subparser(parser: argparse.ArgumentParser, name: str) -> Parser:
    return _commands(parser)[name]


def _unknown_flags_first(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """A misspelt flag is named as such (with the nearest real one), not reported as the missing flag it meant."""
    commands = _commands(parser)
    name = next((a for a in argv if not a.startswith("-")), None)
    if name is None or name not in commands:
        return
    sub = commands[name]
    known = {o for a in sub._actions for o in a.option_strings}
    rest = argv[argv.index(name) + 1:]
    rest = rest[:rest.index("--")] if "--" in rest else rest
    odd = [a for a in rest if a.startswith("--") and a.split("=", 1)[0] not in known]
    if odd:
        sub.unknown(odd)


def _stacks_on_sigusr2() -> None:
    """`kill -USR2 PID` prints every thread's Python stack to stderr and the run goes on: what a harness that looks
    stuck is waiting for, without a debugger (the reliability tests ask for it before they give up on a run)."""
    if not hasattr(signal, "SIGUSR2"):
        return
    try:
        faulthandler.register(signal.SIGUSR2, file=sys.stderr.fileno(), all_threads=True)
    except (AttributeError, OSError, ValueError):  # stderr is no file (main() called in-process under capture)
        pass


def _masked(error: str, argv: list[str] | None) -> str:
    """An error quotes the value it refuses: the secrets of the environment, of the command line and those the error
    itself shows (`(got '--api-key sk-…')`) masked in it."""
    from harness.masking import Masker, embedded_secrets, secret_values

    return Masker(secret_values(None, sys.argv[1:] if argv is None else argv) | embedded_secrets(error))(error)


def _first_line(error: str) -> str:
    """An error's one line: up to its first newline (what follows is detail, e.g. an engine's own output)."""
    return error.split("\n", 1)[0]


def _say_error(error: str, argv: list[str] | None) -> None:
    """One line on stderr: masked, then its control characters shown as escapes (a path or a value it quotes may hold
    a CR that would hide the line, an OSC that retitles the terminal)."""
    from harness.escape import terminal_line

    print(terminal_line(_masked(error, argv)), file=sys.stderr)


def main(argv: list[str] | None = None, runtimes: RuntimeFactory | None = None) -> int:
    """`boot-harness ARGV`; `runtimes` builds each matrix's runtime (a test or the docs check passes a fake one)."""
    _stacks_on_sigusr2()
    parser, handlers = _build()
    out = plain_console()  # commands print ids, paths and axis values: text, never rich markup
    given = argv
    try:
        argv = sys.argv[1:] if argv is None else list(argv)
        _unknown_flags_first(parser, argv)
        # Everything after the first `--` is the server's own flags (`kv MODEL -- --max-model-len 4096`), as written
        tail: list[str] | None = None
        if "--" in argv:
            argv, tail = argv[:argv.index("--")], argv[argv.index("--") + 1:]
        args, extras = parser.parse_known_args(argv)
        if tail is not None:
            if not hasattr(args, "serve_flags"):
                extras = ["--", *tail, *extras]
            else:
                args.serve_flags = tail
        if extras:
            _subparser(parser, args.command).unknown(extras)
        args.runtimes = runtimes or _matrix_runtime
        return int(handlers[args.command](args, out))
    except InputError as exc:  # every mistake located in a file or an option, one line each (one alone: its first)
        for line in [str(p) for p in exc.problems] if len(exc.problems) > 1 else [_first_line(str(exc))]:
            _say_error(line, given)
        return exc.exit_code
    except UsageError as exc:
        _say_error(_first_line(str(exc)) if str(exc) else type(exc).__name__, given)
        return exc.exit_code
    except RunStopped as exc:  # a command that boots has recorded what finished; --resume goes on
        return exc.exit_code
    except HarnessError as exc:  # a record that could not be written, ...: one line, never a traceback
        _say_error(_first_line(str(exc)), given)
        return exc.exit_code
    except BrokenPipeError:  # `boot-harness cells ... | head`
        sys.stderr.close()
        return ExitCode.OK
    except OSError as exc:  # a path the user gave that is a directory, a file, missing, not ours to write
        if getattr(exc, "filename", None) is None:
            raise
        _say_error(f"{exc.filename}: {exc.strerror or exc}", given)
        return ExitCode.USAGE
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
