"""The runs shipped in examples/runs/ (the CPU example booted for real, night after night, by
scripts/record-example-runs.sh): what a new user reads before setting anything up (README, "Try it in a minute").
They stay readable by the current schema and loader, whole, and tell the example's story: the draft model tips the
tight KV pool into a refusal, the raised pool boots it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.results.store import load_run
from harness.verdict.catalogue import Outcome, Reason

ROOT = Path(__file__).resolve().parents[2]
RUNS = sorted((ROOT / "examples" / "runs").glob("cpu-tiny-night*"))


def test_several_nights_are_shipped_with_their_logs():
    assert len(RUNS) >= 3, RUNS
    for run_dir in RUNS:
        run, _ = load_run(run_dir)
        assert run.status == "complete" and len(run.cells) == 6, run_dir
        for cell in run.cells:
            assert cell.log_path and (run_dir / cell.log_path).is_file(), (run_dir, cell.cell_id)


@pytest.mark.parametrize("run_dir", RUNS, ids=[p.name for p in RUNS])
def test_each_night_is_a_real_boot_of_the_cpu_example_with_its_expectations_met(run_dir):
    run, _ = load_run(run_dir)
    cells = {c.cell_id: c for c in run.cells}
    assert all(c.matched for c in run.cells), [(c.cell_id, c.outcome, c.reason) for c in run.cells if not c.matched]
    tight = cells["mml4096-spec_draft-kv_tight"]
    assert (tight.outcome, tight.reason) == (Outcome.refused, Reason.kv_cache_too_small)
    assert tight.refusal is not None and tight.refusal.estimated_max_model_len, "the refusal's own numbers"
    assert cells["mml4096-spec_draft-kv_raised"].outcome == Outcome.booted
    assert tight.vllm_version, "vLLM's version as the server logged it"
