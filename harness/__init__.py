"""Boot-feasibility harness for vLLM servers: will this exact configuration boot, and if not, why and by how much?

The names a script uses (docs/api.md) are exported here, and only resolved when first used (PEP 562): every internal
import runs this file first (`import harness.names` included), so it must stay a leaf — importing the run owner or
the runtimes eagerly would make each foundation module pull in the whole harness, and the CLI start slowly.
`_EXPORTS` maps each name to its module; `__all__` and the `TYPE_CHECKING` block repeat it for type checkers and
IDEs (tests/unit/test_api.py and test_layers.py hold the three equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> (module, attribute). `predict_kv` is `harness.predict.predictor.predict` renamed: a top-level
#: `predict` would be shadowed by the subpackage `harness.predict` as soon as anything imports it.
_EXPORTS: dict[str, tuple[str, str]] = {
    # the matrix and its cells
    "load_matrix": ("harness.matrix.load", "load_matrix"),
    "LoadedMatrix": ("harness.matrix.load", "LoadedMatrix"),
    "Cell": ("harness.matrix.cells", "Cell"),
    "select_cells": ("harness.matrix.cells", "select_cells"),
    "selected": ("harness.matrix.selection", "selected"),
    "Selected": ("harness.matrix.selection", "Selected"),
    # running them
    "RunSession": ("harness.boot.session", "RunSession"),
    "RunOptions": ("harness.boot.session", "RunOptions"),
    "repro_command": ("harness.boot.session", "repro_command"),
    "format_shell": ("harness.shell", "format_shell"),
    # what a run recorded
    "load_run": ("harness.results.store", "load_run"),
    "RunResult": ("harness.results.model", "RunResult"),
    "CellResult": ("harness.results.model", "CellResult"),
    "RunStatus": ("harness.results.model", "RunStatus"),
    "Outcome": ("harness.verdict.catalogue", "Outcome"),
    "Reason": ("harness.verdict.catalogue", "Reason"),
    # comparing and reporting runs
    "compare_runs": ("harness.analysis.compare", "compare_runs"),
    "RunDiff": ("harness.analysis.compare", "RunDiff"),
    "build_report": ("harness.report.build", "build_report"),
    "session_summary": ("harness.report.build", "session_summary"),
    # predicting the KV cache without booting
    "predict_kv": ("harness.predict.predictor", "predict"),
    "parse_serve_flags": ("harness.predict.serve_flags", "parse_serve_flags"),
    "read_model": ("harness.predict.model", "read_model"),
    "KvPrediction": ("harness.predict.prediction", "KvPrediction"),
    # errors and exit codes
    "HarnessError": ("harness.errors", "HarnessError"),
    "UsageError": ("harness.errors", "UsageError"),
    "ConfigError": ("harness.errors", "ConfigError"),
    "ConfigErrors": ("harness.errors", "ConfigErrors"),
    "RuntimeUnavailable": ("harness.errors", "RuntimeUnavailable"),
    "CellStartError": ("harness.errors", "CellStartError"),
    "Interrupted": ("harness.errors", "Interrupted"),
    "ExitCode": ("harness.exitcodes", "ExitCode"),
    # runtimes: the Protocol, and the scripted fake
    "Runtime": ("harness.runtime.base", "Runtime"),
    "Server": ("harness.runtime.base", "Server"),
    "CellContext": ("harness.runtime.base", "CellContext"),
    "FakeRuntime": ("harness.runtime.fake", "FakeRuntime"),
    "Script": ("harness.runtime.fake", "Script"),
}

#: Written out, not derived from the table, so type checkers read it (tests/unit/test_api.py holds it equal).
__all__ = [
    "__version__", "load_matrix", "LoadedMatrix", "Cell", "select_cells", "selected", "Selected", "RunSession",
    "RunOptions", "repro_command", "format_shell", "load_run", "RunResult", "CellResult", "RunStatus", "Outcome",
    "Reason", "compare_runs", "RunDiff", "build_report", "session_summary", "predict_kv", "parse_serve_flags",
    "read_model", "KvPrediction", "HarnessError", "UsageError", "ConfigError", "ConfigErrors",
    "RuntimeUnavailable", "CellStartError", "Interrupted", "ExitCode", "Runtime", "Server", "CellContext",
    "FakeRuntime", "Script",
]

if TYPE_CHECKING:
    from harness.analysis.compare import RunDiff, compare_runs
    from harness.boot.session import RunOptions, RunSession, repro_command
    from harness.errors import (
        CellStartError,
        ConfigError,
        ConfigErrors,
        HarnessError,
        Interrupted,
        RuntimeUnavailable,
        UsageError,
    )
    from harness.exitcodes import ExitCode
    from harness.matrix.cells import Cell, select_cells
    from harness.matrix.load import LoadedMatrix, load_matrix
    from harness.matrix.selection import Selected, selected
    from harness.predict.model import read_model
    from harness.predict.prediction import KvPrediction
    from harness.predict.predictor import predict as predict_kv
    from harness.predict.serve_flags import parse_serve_flags
    from harness.report.build import build_report, session_summary
    from harness.results.model import CellResult, RunResult, RunStatus
    from harness.results.store import load_run
    from harness.runtime.base import CellContext, Runtime, Server
    from harness.runtime.fake import FakeRuntime, Script
    from harness.shell import format_shell
    from harness.verdict.catalogue import Outcome, Reason


def __getattr__(name: str) -> Any:
    """A public name, imported on first use and kept (PEP 562); anything else is the usual AttributeError."""
    try:
        module, attribute = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'harness' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
