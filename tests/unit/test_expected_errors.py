"""An `error` cell (the harness could not boot it) fails `run` and `check`, unless the matrix said it would error and it
matched: a fault set up on purpose (a missing model, a port taken, a tiny /dev/shm; tests/integration/
test_real_faults.py boots them for real) is a verdict that came out as written."""

from __future__ import annotations

import pytest

from harness.analysis.check import misses
from harness.results.model import CellResult, Expected, RunResult


def cell(outcome: str, reason: str, expected: Expected | None, matched: bool | None) -> CellResult:
    return CellResult(cell_id="c", axes={"fault": "x"}, runtime="process", argv=["vllm"], env={}, outcome=outcome,
                      reason=reason, expected=expected, matched=matched)


@pytest.mark.parametrize(("c", "fails"), [
    (cell("error", "port_in_use", Expected(outcome="error", reason="port_in_use"), True), False),
    (cell("error", "port_in_use", Expected(outcome="error"), True), False),
    (cell("error", "port_in_use", None, None), True),  # nothing said it would: nothing was learnt
    (cell("error", "port_in_use", Expected(outcome="error", reason="shm_too_small"), False), True),
    (cell("error", "port_in_use", Expected(outcome="booted"), False), True),
    (cell("refused", "tp_not_divisible", Expected(outcome="refused"), True), False),
])
def test_an_error_passes_only_where_its_expectation_names_it(c, fails):
    assert c.errored_unexpected() is (fails and c.outcome == "error")
    run = RunResult.model_construct(run_id="r", status="complete", cells=[c])
    assert bool(misses(run)) is fails
