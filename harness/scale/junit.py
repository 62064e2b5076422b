"""What a cell's JUnit test case carries as <properties> (and pytest-reportlog as `user_properties`): the outcome,
reason, expectation, verdict time and every KV number the server logged, so CI dashboards need not open the run dir.

JUnit's `xunit1` family keeps per-testcase <properties>; run the plugin with `-o junit_family=xunit1`.
"""

from __future__ import annotations

from harness.results.model import CellResult

PREFIX = "boot."


def cell_properties(result: CellResult) -> list[tuple[str, str]]:
    """(name, value) pairs, every value a string; facts that were not logged are left out, never written as 0."""
    exp = result.expected
    props: list[tuple[str, object]] = [
        ("cell_id", result.cell_id),
        ("outcome", result.outcome),
        ("reason", result.reason),
        ("expected", None if exp is None else exp.outcome + (f"/{exp.reason}" if exp.reason else "")),
        ("matched", None if result.matched is None else str(result.matched).lower()),
        ("attempts", result.attempts),
        ("contaminated", str(result.contaminated).lower()),
        ("verdict_s", result.timings.verdict_s),
        ("ready_s", result.timings.ready_s),
        ("vllm_version", result.vllm_version),
        ("log_path", result.log_path),
    ]
    props += [(f"kv.{k}", v) for k, v in result.kv.model_dump().items()]
    if result.refusal is not None:
        props += [(f"refusal.{k}", v) for k, v in result.refusal.model_dump(exclude={"message"}).items()]
    for g in result.gpus:
        props.append((f"gpu.{g.index}", f"{g.name} driver {g.driver}, {g.free_gib}/{g.total_gib} GiB free at start"))
    return [(PREFIX + k, str(v)) for k, v in props if v is not None]
