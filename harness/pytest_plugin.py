"""pytest plugin: a matrix as tests, one per cell, recorded exactly as `boot-harness run` records it — a thin layer over
the run owner (`harness.RunSession`), which opens, runs and finishes the run. The library it uses: docs/api.md.

    pytest tests/test_boot_matrix.py --boot-matrix examples/cpu-tiny.yaml [--boot-results-dir D] [--boot-select EXPR]
        [--boot-shard I/N|auto] [--boot-timeout S]

Every option is `--boot-*` and the parametrized argument is `boot_cell`: the entry point loads the plugin into the
pytest session of every project that installs the package, so it claims nothing unprefixed there (no option, no
argument name another project may use). The old spellings `--matrix`, `--results-dir`, `--select` and `--shard` are
read for one more release, never registered: each is rewritten on the command line before pytest parses it, with a
PytestDeprecationWarning (it obeys -W and filterwarnings, and shows in the warnings summary) — unless another plugin or
an initial conftest registers that option itself, which then keeps it.

A test that asks for `boot_result` is parametrized over the matrix's cells (ids are the cell ids, so `-k` works); the
fixture boots that cell and hands back its CellResult; `explain(result)` is the mismatch message. Each test carries
the cell's outcome, reason and KV numbers as user properties (JUnit <properties> with `-o junit_family=xunit1`,
pytest-reportlog's `user_properties`).

Fixtures a conftest can override: `boot_runtime` (None: the matrix's own runtime; return e.g. a
`harness.FakeRuntime`) and `boot_options` (a `harness.RunOptions`). Not under pytest-xdist: one run is one run
directory booting one cell at a time on its GPUs; split a matrix with `--boot-shard I/N` per process (or CI job) and
`boot-harness merge`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.errors import UsageError
from harness.matrix.cells import Cell
from harness.results.model import CellResult, RunStatus

if TYPE_CHECKING:  # imported where a session opens: the plugin loads in every pytest session
    from harness.boot.session import RunSession

_SELECTION = pytest.StashKey["_Selection"]()
_SESSION: pytest.StashKey[RunSession] = pytest.StashKey()
_RUN_DIR = pytest.StashKey[Path]()


def pytest_addoption(parser: pytest.Parser) -> None:
    from harness.cli.common import add_timeout

    group = parser.getgroup("boot-harness", "boot every cell of a vLLM configuration matrix")
    group.addoption("--boot-matrix", dest="boot_matrix", default=None,
                    help="matrix file whose cells become tests")
    group.addoption("--boot-results-dir", dest="boot_results_dir", default="results",
                    help="where the run directory goes (default: results)")
    group.addoption("--boot-select", dest="boot_select", action="append", default=None, metavar="EXPR",
                    help="cells to take (as the CLI's --select)")
    add_timeout(group.addoption, "--boot-timeout", dest="boot_timeout")
    group.addoption("--boot-shard", dest="boot_shard", default=None, metavar="I/N|auto",
                    help="only shard I of N of the cells (as the CLI's --shard; auto: from the scheduler's variables)")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]):
    """The old spellings (harness.pytest_spellings), rewritten in `args` (the list pytest parses next) once the initial
    conftests are loaded, so that one of them can claim an old spelling as its own option; they are found by the paths
    in the rewritten arguments, so that an old option's value is not taken for a test path (as a new one's is not)."""
    from harness.pytest_spellings import claimed, rewrite, used

    before = list(args)
    early = rewrite(before, keep=claimed(parser))
    if early != before:
        try:
            known = parser.parse_known_args(early, namespace=copy.copy(early_config.option))
        except pytest.UsageError:  # an old spelling a conftest will register as a flag: its error, if any, comes later
            pass
        else:
            known.confcutdir = early_config.known_args_namespace.confcutdir
            early_config.known_args_namespace = known
    result = yield
    args[:] = rewrite(before, keep=claimed(parser))
    for old, new in used(before, args):
        early_config.issue_config_time_warning(pytest.PytestDeprecationWarning(
            f"{old} is a deprecated spelling of {new} (boot-harness); the next release reads only {new}"), stacklevel=2)
    return result


def pytest_configure(config: pytest.Config) -> None:
    if not config.getoption("boot_matrix"):
        return
    if hasattr(config, "workerinput") or (config.pluginmanager.hasplugin("xdist")
                                          and config.getoption("numprocesses", None) not in (None, 0, "0")):
        raise pytest.UsageError("--boot-matrix does not run under pytest-xdist (-n): a run is one run directory "
                                "booting one cell at a time on its GPUs; give each process --boot-shard I/N and join "
                                "the runs with `boot-harness merge`")
    _selection(config)  # a bad matrix or --boot-select is pytest's one-line "ERROR: FILE:key: …" (exit 4), here,
    # before collection, where a UsageError is not wrapped in a collection error and its traceback


class _Selection:
    """The matrix and its selected cells, loaded once per session."""

    def __init__(self, config: pytest.Config):
        from harness.matrix.selection import selected
        from harness.matrix.shard import resolve_shard

        try:
            shard, self.scheduler = resolve_shard(config.getoption("boot_shard"))
            sel = selected(Path(config.getoption("boot_matrix")), config.getoption("boot_select"), shard)
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        self.loaded, self.cells, self.shard = sel.loaded, sel.cells, sel.shard


def _selection(config: pytest.Config) -> _Selection:
    if _SELECTION not in config.stash:
        config.stash[_SELECTION] = _Selection(config)
    return config.stash[_SELECTION]


def _options(config: pytest.Config):
    from harness.boot.session import RunOptions

    sel = _selection(config)
    return RunOptions(results_dir=Path(config.getoption("boot_results_dir")), selection=config.getoption("boot_select"),
                      shard=sel.shard, scheduler=sel.scheduler, timeout_s=config.getoption("boot_timeout"))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "boot_cell" not in metafunc.fixturenames:
        return
    if not metafunc.config.getoption("boot_matrix"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid} needs --boot-matrix FILE")
    cells = _selection(metafunc.config).cells
    metafunc.parametrize("boot_cell", cells, ids=[c.id for c in cells])


@pytest.fixture(scope="session")
def boot_runtime():
    """The runtime the session's cells boot on; None is the matrix's own. Override it in a conftest."""
    return None


@pytest.fixture(scope="session")
def boot_options(request: pytest.FixtureRequest):
    """The session's RunOptions (results dir, selection, shard, deadline) from the command line."""
    return _options(request.config)


@pytest.fixture(scope="session")
def boot_session(request: pytest.FixtureRequest, boot_runtime, boot_options):
    """The run this pytest session records: opened (swept, preflighted, its run directory made) on first use."""
    from harness.boot.session import RunSession

    config = request.config
    if _SESSION not in config.stash:
        sel = _selection(config)
        try:
            config.stash[_SESSION] = RunSession.open(sel.loaded, sel.cells, boot_options, runtime=boot_runtime)
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
    return config.stash[_SESSION]


@pytest.fixture
def boot_result(request: pytest.FixtureRequest, boot_session, boot_cell: Cell) -> CellResult:
    """Boot this test's cell for real and return its record (already written to the run directory)."""
    from harness.scale.junit import cell_properties

    result = boot_session.boot(boot_cell)
    if result is None:
        pytest.exit("interrupted", returncode=pytest.ExitCode.INTERRUPTED)
    request.node.user_properties.extend(cell_properties(result))  # JUnit <properties> (xunit1), reportlog
    return result


def explain(result: CellResult) -> str:
    exp = result.expected
    lines = [
        f"cell {result.cell_id}: expected {exp.outcome if exp else '—'}"
        f"{f' ({exp.reason})' if exp and exp.reason else ''}, got {result.outcome} ({result.reason})",
        f"detail: {result.detail}",
    ]
    if result.refusal:
        r = result.refusal
        lines.append(f"refusal: {r.kind} max_seq_len={r.max_seq_len} needed={r.needed_gib} GiB "
                     f"available={r.available_gib} GiB estimated_max_model_len={r.estimated_max_model_len}")
    lines.append(f"log: {result.log_path}")
    lines += ["log tail:", *("  " + line for line in result.log_tail[-15:])]
    return "\n".join(lines)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if not config.getoption("boot_matrix", None):
        return
    run = config.stash.get(_SESSION, None)
    if run is None:
        sel = config.stash.get(_SELECTION, None)
        if sel is None or sel.shard is None or sel.cells:
            return
        # An empty shard is not an error: an empty complete run, as `boot-harness run --shard` writes.
        from harness.boot.session import RunSession

        run = RunSession.open(sel.loaded, [], _options(config))
    run.finish(RunStatus.interrupted if exitstatus == pytest.ExitCode.INTERRUPTED else RunStatus.complete)
    config.stash[_RUN_DIR] = run.run_dir


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    run_dir = config.stash.get(_RUN_DIR, None)
    if run_dir is not None:
        terminalreporter.write_sep("-", "boot-harness")
        from harness.report.build import session_summary

        terminalreporter.write(session_summary(run_dir, width=config.get_terminal_writer().fullwidth,
                                               color=terminalreporter.hasmarkup))
        terminalreporter.write_line(f"results: {run_dir / 'results.json'}")
