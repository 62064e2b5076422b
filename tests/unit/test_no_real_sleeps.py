"""Unit tests do not wait on the wall clock, nor start programs: a wait the harness makes goes through its Clock
(harness.clock.FakeClock in a test), and a test that needs a real process (signals, process groups, a CLI run end to
end) belongs in tests/integration. Read from the source with `ast`, so a new offender fails here, by name, before it
slows the fast tier down."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
#: The longest real sleep a unit test may make: a test polling for another thread, 10-50 ms a step.
MAX_SLEEP_S = 0.05
SUBPROCESS_CALLS = {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
#: tests/cli.py's runners, as the subprocess calls they make.
STARTS_THE_CLI = {"boot_harness": "run", "start_boot_harness": "Popen"}
#: Unit test files that still start programs (most run the CLI as a user would, `python -m harness.cli ...`). Debt,
#: not licence: a file leaves this list when it stops, and no file joins it.
STILL_START_PROGRAMS = {
    "test_bad_matrices.py", "test_cli.py", "test_cli_output.py", "test_logfacts_phases.py", "test_patching.py",
    "test_literal_output.py", "test_predict.py", "test_predict_hybrid.py", "test_shard.py", "test_workflow.py",
}


def _constants(node: ast.expr) -> list[float]:
    """The numbers `node` can evaluate to, as far as the source says (a literal, or either branch of `a if c else
    b`)."""
    if isinstance(node, ast.IfExp):
        return _constants(node.body) + _constants(node.orelse)
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return []
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


class _Calls(ast.NodeVisitor):
    """Real sleeps and program starts in one module, with the names its imports bind (`import time as t`, `from
    subprocess import run`)."""

    def __init__(self) -> None:
        self.modules: dict[str, str] = {}  # local name -> module (time, subprocess)
        self.functions: dict[str, tuple[str, str]] = {}  # local name -> (module, function)
        self.sleeps: list[tuple[int, float]] = []
        self.starts: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name in ("time", "subprocess"):
                self.modules[a.asname or a.name] = a.name

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in ("time", "subprocess"):
            for a in node.names:
                self.functions[a.asname or a.name] = (node.module, a.name)
        elif node.module == "tests.cli":  # the shared CLI runner (tests/cli.py) starts the program all the same
            for a in node.names:
                if a.name in STARTS_THE_CLI:
                    self.functions[a.asname or a.name] = ("subprocess", STARTS_THE_CLI[a.name])

    def _target(self, func: ast.expr) -> tuple[str, str] | None:
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in self.modules:
            return self.modules[func.value.id], func.attr
        if isinstance(func, ast.Name):
            if func.id in self.functions:
                return self.functions[func.id]
            if func.id == "sleep":
                return "time", "sleep"
        return None

    def visit_Call(self, node: ast.Call) -> None:
        target = self._target(node.func)
        if target == ("time", "sleep") and node.args:
            too_long = [c for c in _constants(node.args[0]) if c > MAX_SLEEP_S]
            if too_long:
                self.sleeps.append((node.lineno, max(too_long)))
        elif target and target[0] == "subprocess" and target[1] in SUBPROCESS_CALLS:
            self.starts.append((node.lineno, f"subprocess.{target[1]}"))
        self.generic_visit(node)


def _scan() -> dict[str, _Calls]:
    found = {}
    for path in sorted(UNIT.glob("*.py")):
        calls = _Calls()
        calls.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        found[path.name] = calls
    return found


def test_no_unit_test_sleeps_on_the_wall_clock():
    offenders = [f"tests/unit/{name}:{line}: sleeps {s:g} s" for name, calls in _scan().items()
                 for line, s in calls.sleeps]
    assert not offenders, ("a unit test waits for real (use harness.clock.FakeClock for the harness's waits, an Event "
                           "or a short poll for threads):\n" + "\n".join(offenders))


def test_no_new_unit_test_starts_a_program():
    offenders = [f"tests/unit/{name}:{line}: {what}" for name, calls in _scan().items()
                 if name not in STILL_START_PROGRAMS for line, what in calls.starts]
    assert not offenders, "a real process is an integration test (tests/integration):\n" + "\n".join(offenders)


def test_the_list_of_files_that_still_start_programs_only_shrinks():
    scanned = _scan()
    cleared = sorted(name for name in STILL_START_PROGRAMS if name not in scanned or not scanned[name].starts)
    assert not cleared, f"these no longer start programs: take them off STILL_START_PROGRAMS: {cleared}"


def test_the_scan_sees_what_it_looks_for(tmp_path):
    calls = _Calls()
    calls.visit(ast.parse("import time as t\nfrom time import sleep as nap\nimport subprocess\n"
                          "from subprocess import Popen\n"
                          "t.sleep(0.3)\nnap(2)\nt.sleep(0.01)\nt.sleep(1.0 if x else 0.0)\nt.sleep(delay)\n"
                          "clock.sleep(180)\nsubprocess.run(['x'])\nPopen(['y'])\n"
                          "from tests.cli import boot_harness as bh\nbh('run')\n"))
    assert calls.sleeps == [(5, 0.3), (6, 2.0), (8, 1.0)]
    assert calls.starts == [(11, "subprocess.run"), (12, "subprocess.Popen"), (14, "subprocess.run")]
