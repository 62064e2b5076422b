"""The matrix as pytest: one test per cell, ids are cell ids.

    pytest tests/test_boot_matrix.py --boot-matrix examples/cpu-tiny.yaml [--boot-results-dir D] [--boot-select EXPR]
"""

from harness.pytest_plugin import explain


def test_cell_meets_its_expectation(boot_result):
    assert boot_result.matched is not False, explain(boot_result)
    assert boot_result.outcome != "error", explain(boot_result)
