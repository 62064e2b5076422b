"""Synthetic nights for `history`: a cell record, a night's run written to disk, the history of some nights, and one
cell's row of it."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from harness.analysis.history import build_history
from harness.analysis.history_runs import read_nights
from harness.results.model import CellResult, Timings
from tests.synthetic import _T0, make_cell, make_run, write_run


def cell(cid: str = "c_a", outcome: str = "booted", *, boot_s: float = 40.0, expect: str = "booted",
         vllm: str = "0.33.0", **update) -> CellResult:
    refusal = ({"kind": "kv_cache_too_small", "max_seq_len": 4096, "needed_gib": 0.02, "available_gib": 0.01,
                "estimated_max_model_len": 3072} if outcome == "refused" else None)
    c = make_cell(cid, {"c": cid.removeprefix("c_")}, outcome, argv=["vllm", "serve", "--max-model-len", "4096"],
                  env={"A": "1"}, kv={"available_gib": 0.5, "kv_tokens": 10720}, refusal=refusal,
                  expected=(expect, None))
    return c.model_copy(update={"timings": Timings(verdict_s=boot_s), "vllm_version": vllm, **update})


def night(root: Path, i: int, cells: list[CellResult], *, run_id: str | None = None, matrix_name: str = "synthetic",
          **update) -> Path:
    run = make_run(run_id or f"night{i:02d}", cells, matrix_name)
    return write_run(run.model_copy(update={"started_at": _T0 + timedelta(days=i), **update}), root)


def history(paths: list[Path], select=None, last=None):
    warnings: list[str] = []
    return build_history(read_nights(paths, warnings.append), select, last, warnings)


def by_id(h, cid: str):
    return next(c for c in h.cells if c.cell_id == cid)
