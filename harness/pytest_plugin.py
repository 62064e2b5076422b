"""pytest plugin: a matrix as tests, one per cell, recorded exactly as `boot-harness run` records it.

    pytest tests/test_boot_matrix.py --matrix examples/cpu-tiny.yaml [--results-dir D] [--select EXPR] [--shard I/N]

A test that asks for `boot_result` is parametrized over the matrix's cells (ids are the cell ids, so `-k` works);
the fixture boots that cell and hands back its CellResult. `explain(result)` is the mismatch message. Each test
carries the cell's outcome, reason and KV numbers as user properties: JUnit <properties> with
`--junitxml F -o junit_family=xunit1`, `user_properties` with pytest-reportlog's `--report-log F`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cells import Cell, expand_cells, select_cells
from harness.errors import UsageError
from harness.results.model import CellResult

_SESSION_KEY = pytest.StashKey["_BootSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("boot-harness", "boot every cell of a vLLM configuration matrix")
    group.addoption("--matrix", default=None, help="matrix file whose cells become tests")
    group.addoption("--results-dir", default="results", help="where the run directory goes (default: results)")
    group.addoption("--select", action="append", default=None, metavar="EXPR", help="cells to take (as the CLI)")
    group.addoption("--boot-timeout", type=float, default=None, help="override the matrix's per-cell deadline (s)")
    group.addoption("--shard", default=None, metavar="I/N", help="only shard I of N of the cells (as the CLI)")


class _BootSession:
    """Loads the matrix once and opens the run directory lazily, on the first cell that actually runs."""

    def __init__(self, config: pytest.Config):
        from harness.matrix.load import load_matrix

        self.config = config
        path = config.getoption("matrix")
        try:
            self.loaded = load_matrix(path)
            self.cells = select_cells(expand_cells(self.loaded.matrix, path), config.getoption("select"),
                                      self.loaded.matrix)
            self.shard = None
            if config.getoption("shard"):
                from harness.scale.shard import format_shard, parse_shard, shard_cells

                i, n = parse_shard(config.getoption("shard"))
                self.shard = format_shard(i, n)
                self.cells = shard_cells(self.cells, i, n)
        except UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        self._runner = None

    def runner(self):
        if self._runner is None:
            from harness.results.store import RunStore
            from harness.runner import CellRunner, watch_config
            from harness.runtime import make_runtime

            from harness.gc import sweep_before_run

            runtime = make_runtime(self.loaded)
            sweep_before_run(Path(self.config.getoption("results_dir")), runtime.name)
            try:
                runtime.preflight(self.cells)
            except UsageError as exc:
                pytest.fail(str(exc), pytrace=False)
            store = RunStore.create(Path(self.config.getoption("results_dir")), self.loaded, runtime.name,
                                    selection=self.config.getoption("select"), shard=self.shard)
            store.order = [c.id for c in self.cells]
            self._runner = CellRunner(self.loaded, runtime, store,
                                      watch_config(self.loaded, self.config.getoption("boot_timeout")))
        return self._runner

    def run(self, cell: Cell) -> CellResult:
        runner = self.runner()
        result = runner.run(cell)
        runner.store.record(result)
        return result

    def finish(self, status: str) -> Path | None:
        if self._runner is None:
            if self.shard is None or self.cells:
                return None
            # An empty shard is not an error: write an empty complete run, as `boot-harness run --shard` does.
            from harness.results.store import RunStore

            store = RunStore.create(Path(self.config.getoption("results_dir")), self.loaded,
                                    self.loaded.matrix.runtime, selection=self.config.getoption("select"),
                                    shard=self.shard)
            store.finish(status)
            return store.run_dir
        self._runner.store.finish(status)
        return self._runner.store.run_dir


def _session(config: pytest.Config) -> _BootSession:
    if _SESSION_KEY not in config.stash:
        config.stash[_SESSION_KEY] = _BootSession(config)
    return config.stash[_SESSION_KEY]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "matrix_cell" not in metafunc.fixturenames:
        return
    if not metafunc.config.getoption("matrix"):
        raise pytest.UsageError(f"{metafunc.definition.nodeid} needs --matrix FILE")
    cells = _session(metafunc.config).cells
    metafunc.parametrize("matrix_cell", cells, ids=[c.id for c in cells])


@pytest.fixture
def boot_result(request: pytest.FixtureRequest, matrix_cell: Cell) -> CellResult:
    """Boot this test's cell for real and return its record (already written to the run directory)."""
    from harness.scale.junit import cell_properties

    result = _session(request.config).run(matrix_cell)
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
    boot = session.config.stash.get(_SESSION_KEY, None)
    if boot is not None:
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        run_dir = boot.finish("interrupted" if interrupted else "complete")
        if run_dir is not None:
            session.config.stash[_RUN_DIR_KEY] = run_dir


_RUN_DIR_KEY = pytest.StashKey[Path]()


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    run_dir = config.stash.get(_RUN_DIR_KEY, None)
    if run_dir is not None:
        terminalreporter.write_sep("-", "boot-harness")
        from harness.report import session_summary

        terminalreporter.write(session_summary(run_dir, width=config.get_terminal_writer().fullwidth,
                                               color=terminalreporter.hasmarkup))
        terminalreporter.write_line(f"results: {run_dir / 'results.json'}")
