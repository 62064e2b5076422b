"""`boot-harness plan`: every cell's outcome predicted before anything boots — from its model's config.json and its
flags, with the KV pool its `--kv-cache-memory-bytes` gives, or what the same cell logged in an earlier run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from harness.matrix.cells import Cell
from harness.logfacts import KvFacts, Refusal
from harness.predict.cell import predict_cell
from harness.predict.prediction import PredictionRecord
from harness.verdict.catalogue import Outcome


@dataclass(frozen=True)
class Logged:
    """What an earlier boot of a cell logged, as `plan --from RUN` hands it over (the caller reads the run)."""

    kv: KvFacts
    refusal: Refusal | None = None
    vllm_version: str | None = None


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    record: PredictionRecord
    #: booted or refused; None when the pool is unknown or the model unreadable
    outcome: Outcome | None
    why: str

    @property
    def expected(self) -> Outcome | None:
        return self.cell.expected.outcome if self.cell.expected else None

    @property
    def agrees(self) -> bool | None:
        """The prediction against the matrix's expectation (None when either is unknown)."""
        if self.outcome is None or self.expected is None:
            return None
        return self.outcome == self.expected

    def to_dict(self) -> dict:
        return {"cell_id": self.cell.id, "predicted_outcome": self.outcome, "expected_outcome": self.expected,
                "agrees_with_expectation": self.agrees, "why": self.why,
                "prediction": self.record.prediction.model_dump(mode="json") if self.record.prediction else None,
                "skipped": self.record.skipped}


def plan_cells(cells: list[Cell], read: Callable[[Cell, str], bytes | None], prior: dict[str, Logged] | None = None,
               platform: str | None = None, vllm_version: str | None = None) -> list[PlannedCell]:
    out = []
    for cell in cells:
        before = (prior or {}).get(cell.id)
        kv = before.kv if before else KvFacts()
        version = vllm_version or (before.vllm_version if before else None)
        record = predict_cell(cell.server_args, lambda path, cell=cell: read(cell, path), kv,
                              before.refusal if before else None, None, None, version, platform)
        p = record.prediction
        if p is None:
            out.append(PlannedCell(cell, record, None, record.skipped or "not predicted"))
        elif p.fits is None:
            out.append(PlannedCell(cell, record, None, "no KV size: the cell gives no --kv-cache-memory-bytes "
                                                        "(plan --from RUN takes what an earlier run logged)"))
        else:
            gap = list(p.unmodelled)
            if before is None and any(k.endswith("FLOOR_GIB") for k in cell.env) and cell.patches:
                gap.append("a patched KV floor raises the pool at boot (plan --from RUN reads the raised size)")
            if p.fits:
                why = f"needs {p.need_bytes:,} B of {p.available_bytes:,} ({p.available_source}): {p.kv_tokens:,} " \
                      f"tokens, {p.max_concurrency:.2f}x"
            else:
                why = f"needs {p.need_bytes:,} B, has {p.available_bytes:,} ({p.available_source}); vLLM's " \
                      f"estimated max {p.estimated_max_model_len:,}"
            if gap:
                why += "; not modelled: " + "; ".join(gap)
            out.append(PlannedCell(cell, record, Outcome.booted if p.fits else Outcome.refused, why))
    return out
