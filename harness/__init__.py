"""Boot-feasibility harness for vLLM servers: will this exact configuration boot, and if not, why and by how much?

The names a script uses (docs/api.md) are written once, in the `if TYPE_CHECKING:` block below: type checkers and IDEs
read it as it stands (`X as X`: a re-export; `predict_kv` is `harness.predict.predictor.predict` renamed, since a
top-level `predict` would be shadowed by the subpackage `harness.predict`), and `__getattr__` reads the same block
(this file's source, parsed when the first public name is asked for) to import each name on first use (PEP 562).
Nothing is imported eagerly: every internal import runs this file first (`import harness.version` included), and
importing the run owner or the runtimes here would make each foundation module pull in the whole harness, and the
CLI start slowly.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.analysis.compare import RunDiff as RunDiff
    from harness.analysis.compare import compare_runs as compare_runs
    from harness.boot.session import RunOptions as RunOptions
    from harness.boot.session import RunSession as RunSession
    from harness.boot.session import repro_command as repro_command
    from harness.errors import CellStartError as CellStartError
    from harness.errors import ConfigError as ConfigError
    from harness.errors import ConfigErrors as ConfigErrors
    from harness.errors import HarnessError as HarnessError
    from harness.errors import InputError as InputError
    from harness.errors import Interrupted as Interrupted
    from harness.errors import RunStopped as RunStopped
    from harness.errors import RuntimeUnavailable as RuntimeUnavailable
    from harness.errors import UsageError as UsageError
    from harness.exitcodes import ExitCode as ExitCode
    from harness.matrix.cells import Cell as Cell
    from harness.matrix.cells import select_cells as select_cells
    from harness.matrix.load import LoadedMatrix as LoadedMatrix
    from harness.matrix.load import load_matrix as load_matrix
    from harness.matrix.selection import Selected as Selected
    from harness.matrix.selection import selected as selected
    from harness.predict.model import read_model as read_model
    from harness.predict.prediction import KvPrediction as KvPrediction
    from harness.predict.predictor import predict as predict_kv  # noqa: F401 - renamed: `predict` is the subpackage
    from harness.predict.serve_flags import parse_serve_flags as parse_serve_flags
    from harness.report.build import build_report as build_report
    from harness.report.build import session_summary as session_summary
    from harness.results.model import CellResult as CellResult
    from harness.results.model import RunResult as RunResult
    from harness.results.model import RunStatus as RunStatus
    from harness.results.store import load_run as load_run
    from harness.runtime.base import CellContext as CellContext
    from harness.runtime.base import Runtime as Runtime
    from harness.runtime.base import Server as Server
    from harness.runtime.fake import FakeRuntime as FakeRuntime
    from harness.runtime.fake import Script as Script
    from harness.shell import format_shell as format_shell
    from harness.verdict.catalogue import Reason as Reason
    from harness.verdict.outcome import Outcome as Outcome
    from harness.version import __version__ as __version__


def _exports() -> dict[str, tuple[str, str]]:
    """Public name -> (module, attribute), in the order written: the `if TYPE_CHECKING:` block above, read from this
    file's source (the one place the names are written), through its loader: no other harness module is imported."""
    import ast
    import pkgutil

    tree = ast.parse(pkgutil.get_data(__name__, "__init__.py") or b"", "harness/__init__.py")
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    return {a.asname or a.name: (str(i.module), a.name) for i in block.body if isinstance(i, ast.ImportFrom)
            for a in i.names}


def __getattr__(name: str) -> Any:
    """A public name, imported on first use and kept (PEP 562); `__all__` and the table on first use too; anything
    else is the usual AttributeError."""
    if name in ("_EXPORTS", "__all__"):
        table = globals().setdefault("_EXPORTS", _exports())
        return table if name == "_EXPORTS" else globals().setdefault("__all__", list(table))
    try:
        module, attribute = __getattr__("_EXPORTS")[name]
    except KeyError:
        raise AttributeError(f"module 'harness' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
