"""The exception tree in harness/errors.py is the one drawn in its docstring, every harness error is defined there,
and the branches a caller catches hold what they promise: a located input error is no matrix mistake unless it is one,
a lost GPU is a resumable stop but no interrupt, an internal signal is apart from what a user is shown."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import harness.errors as errors
from harness.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parents[2]


def drawn() -> dict[str, str]:
    """Each class of the docstring's tree -> its parent there: the nearest line above that starts further left."""
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^ {4}[ │├└─]*([A-Z][A-Za-z]+) {2,}", line)
        if not m:
            continue
        column, name = m.start(1), m.group(1)
        while stack and stack[-1][0] >= column:
            stack.pop()
        if stack:
            parents[name] = stack[-1][1]
        stack.append((column, name))
    return parents


def defined() -> dict[str, str]:
    """Each HarnessError subclass errors.py defines -> its nearest public base (a private mixin is looked through)."""
    out = {}
    for name, cls in vars(errors).items():
        if inspect.isclass(cls) and issubclass(cls, errors.HarnessError) and cls is not errors.HarnessError \
                and not name.startswith("_"):
            base = next(b for b in cls.__mro__[1:] if not b.__name__.startswith("_"))
            out[name] = base.__name__
    return out


def test_the_docstring_draws_the_tree_as_it_is():
    assert drawn() == defined()


def test_the_tree_reader_can_fail():
    """A class drawn under the wrong parent is told apart: the reader sees depth, not just names."""
    tree = drawn()
    assert tree["GpusGone"] == "RunStopped" and tree["GpuLost"] == "InternalSignal"
    assert tree["ConfigErrors"] == "ConfigError" and tree["UsageError"] == "HarnessError"


def test_every_harness_error_is_defined_in_errors_py():
    """A class deriving from a harness error anywhere else in harness/ would be a second tree."""
    names = set(defined()) | {"HarnessError", "_Several"}
    outside = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path.name == "errors.py" and path.parent.name == "harness":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and {ast.unparse(b).rpartition(".")[2] for b in node.bases} & names:
                outside.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert not outside, outside


@pytest.mark.parametrize("cls,code", [
    (errors.Interrupted, ExitCode.INTERRUPTED), (errors.EngineGone, ExitCode.INTERRUPTED),
    (errors.GpusGone, ExitCode.INTERRUPTED), (errors.ConfigError, ExitCode.USAGE),
    (errors.FileRefused, ExitCode.USAGE), (errors.RunDamaged, ExitCode.USAGE), (errors.SelectionError, ExitCode.USAGE),
    (errors.RecordWriteError, ExitCode.FAILED), (errors.PatchError, ExitCode.FAILED),
])
def test_each_keeps_its_exit_code(cls, code):
    assert cls.exit_code == code


def test_the_branches_hold_what_they_promise():
    refused = errors.FileRefused("/tmp/fifo", "", "is a FIFO, not a regular file")
    assert isinstance(refused, errors.InputError) and not isinstance(refused, errors.ConfigError)
    damaged = errors.RunDamaged([refused, errors.FileRefused("/r/cells/a.json", "x", "bad")])
    assert isinstance(damaged, errors.InputError) and not isinstance(damaged, errors.ConfigError | errors.ConfigErrors)
    assert damaged.problems[0] is refused and str(damaged).splitlines()[1] == "/r/cells/a.json:x: bad"
    for gone in (errors.EngineGone("engine"), errors.GpusGone("gpu 0")):
        assert isinstance(gone, errors.RunStopped) and not isinstance(gone, errors.Interrupted)
    for signal in (errors.GpuLost(0, "lost"), errors.UnsetVariable("p", "m"), errors.NvmlUnavailable(),
                   errors.ProbeFailed(), errors.BadRecord()):
        assert isinstance(signal, errors.InternalSignal)
        assert not isinstance(signal, errors.UsageError | errors.RunStopped)


def test_one_located_error_is_its_own_problem_and_of_keeps_one_alone():
    one = errors.ConfigError("m.yaml", "axes", "empty")
    assert one.problems == [one] and str(one) == "m.yaml:axes: empty"
    assert errors.ConfigErrors.of([one]) is one
    two = errors.ConfigErrors.of([one, errors.ConfigError("m.yaml", "", "bad")])
    assert isinstance(two, errors.ConfigError) and str(two) == "m.yaml:axes: empty\nm.yaml: bad"
    assert (two.file, two.key, two.message) == ("m.yaml", "axes", "empty")
