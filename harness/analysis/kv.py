"""The KV numbers of a recorded cell, as bytes with their uncertainty: what every analysis command reads.

A cell record keeps what the server logged, rounded the way vLLM prints it (GiB to two decimals, concurrency to two
decimals). This module turns those into bytes and says how far each number can be off, so the fits and the floors
never pretend to more precision than the log gave:

- the **length** of a cell: its value on the max_model_len axis (`131072`, `128k` = 128000, `128K` = 131072);
- the **cap**: the KV pool the engine may use. The fork's expert-offload cap when it was logged, else the size a KV
  floor raised the pool to (logged in bytes), else the explicit
  `--kv-cache-memory-bytes` of the cell's argv (exact), else "Available KV cache memory", else the explicit size the
  log echoed, else the refusal's "available";
- the **need**: the smallest KV pool that serves one request of the cell's length. From a KV refusal's "X GiB is
  needed" when that number is precise enough; else scaled from vLLM's own estimated maximum length at the known cap;
  from a booted cell, scaled from the logged KV capacity in tokens (cap / tokens per request).

GiB printed to two decimals is ±0.005 GiB: a `0.0` or `0.01` (the CPU example's tiny caches) is "too coarse" and is
left out of fits, said so, instead of being read as zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from harness.errors import UsageError
from harness.predict.predictor import CPU_BLOCK, GPU_BLOCK
from harness.predict.serve_flags import flag_value, option_name
from harness.predict.versions import rules_for, rules_version
from harness.results.model import CellResult, RunResult
from harness.units import GIB, fmt_bytes, human_int
from harness.verdict import Outcome, Reason

MIB = float(1 << 20)
KIB = 1024.0
#: Half the unit vLLM prints GiB in (two decimals).
GIB_ROUNDING = 0.005 * GIB
#: A GiB figure whose rounding is more than this fraction of it is too coarse to fit or to derive from.
COARSE_FRACTION = 0.05
#: the flag as the harness writes it in a suggested command (reading one goes through serve_flags.flag_value)
KV_BYTES_FLAG = option_name("kv_cache_memory_bytes")
FLOOR_ENV = "CLAV_KV_RESERVE_FLOOR_GIB"
#: the most a length or a KV pool can be (cli/values.py bounds the flags alike): a record beyond is no measurement
MAX_TOKENS, MAX_BYTES = 1 << 40, float(1 << 62)


def _read(cell: CellResult, dest: str) -> int | None:
    """A number the cell's server read for `dest`, through serve_flags' one reader (every spelling vLLM takes, as
    the cell's release converts it); None when not given or not a number (`auto` is -1: no length, see below)."""
    value = flag_value(cell.argv, dest, cell.vllm_version)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Source(StrEnum):
    """Where a KV figure came from; what the analysis branches on (the text is what reports print)."""

    offload_cap = "offload cap (log)"
    kv_floor = "KV floor (log)"
    kv_bytes_flag = "--kv-cache-memory-bytes"
    available_log = "available KV (log)"
    explicit_log = "explicit KV (log)"
    available_refusal = "available (refusal)"
    needed_refusal = "needed (refusal)"
    #: derived: the cap scaled by vLLM's estimated maximum length
    estimate_scaled = "scaled from vLLM's estimate"
    #: derived: the cap over the pool's tokens
    cap_per_token = "cap / KV tokens"
    #: derived: the cap over the concurrency times the length
    cap_per_concurrency = "cap / concurrency"
    #: the predictor's figure (harness.predict), beside the measured ones
    predicted = "predicted"

    @property
    def derived(self) -> bool:
        """Worked out from other figures (vLLM printed none precise enough): shown as ≈, with its precision."""
        return self in (Source.estimate_scaled, Source.cap_per_token, Source.cap_per_concurrency)


@dataclass(frozen=True)
class Quantity:
    """Bytes read or derived from a log: the value used in fits, the range the log allows (`lo`..`hi`; a floor is
    built on `hi`), where it came from, and whether it is too coarse to use (a GiB figure like `0.0` or `0.01`)."""

    bytes: float
    source: Source
    lo: float = -1.0
    hi: float = -1.0
    coarse: bool = False
    #: what the source's text leaves out (the estimate a need was scaled from)
    detail: str = ""

    def __post_init__(self) -> None:
        if self.lo < 0:
            object.__setattr__(self, "lo", self.bytes)
        if self.hi < 0:
            object.__setattr__(self, "hi", self.bytes)

    @property
    def gib(self) -> float:
        return self.bytes / GIB

    @property
    def where(self) -> str:
        """The source as reports print it ("scaled from vLLM's estimate 3,072"; a derived figure with its precision)."""
        text = f"{self.source} {self.detail}" if self.detail else str(self.source)
        if self.source.derived and self.bytes:
            text += f", derived ±{max(self.hi - self.bytes, self.bytes - self.lo) / self.bytes:.1%}"
        return text

    def shown(self) -> str:
        """The figure as tables print it: `≈` marks one the harness derived rather than read."""
        return ("≈" if self.source.derived else "") + fmt_bytes(self.bytes)

    @property
    def err(self) -> float:
        return max(self.hi - self.bytes, self.bytes - self.lo)


def _gib(value: float | None, source: Source) -> Quantity | None:
    """A GiB figure of a record as bytes; None for one no log prints (negative, NaN, infinite, beyond any machine):
    a hand-edited or corrupt record must not turn a fit into NaN or a division into an overflow."""
    if value is None or not (value == 0 or _plausible(value * GIB, MAX_BYTES)):
        return None  # 0.0 is a figure (a coarse one, said so below); -3, NaN and 1e300 are not
    b = float(value * GIB)
    return Quantity(b, source, max(0.0, b - GIB_ROUNDING), b + GIB_ROUNDING,
                    coarse=GIB_ROUNDING > COARSE_FRACTION * b)


# ---------------------------------------------------------------- which axis is max_model_len


def length_axis(run: RunResult, override: str | None = None) -> str | None:
    """The run's max_model_len axis: `override`, else an axis named max_model_len, else the axis whose value every
    cell's server read as its max_model_len (any spelling vLLM reads: `--max_model_len`, `--max-model-len=8k`). None
    when there is none (a UsageError when `override` names no axis)."""
    axes = axis_order(run)
    if override:
        if override not in axes:
            raise UsageError(f"--length-axis {override}: the run has no such axis "
                             f"(axes are: {', '.join(axes) or 'none'})")
        return override
    for name in axes:
        if name.replace("-", "_").lower() in ("max_model_len", "max_len", "mml"):
            return name
    for name in axes:
        vals = [(_read(c, "max_model_len"), c.axes.get(name)) for c in run.cells]
        if vals and all(v is not None and a is not None and v == human_int(a) for v, a in vals):
            return name
    return None


def axis_order(run: RunResult) -> list[str]:
    """Axis names in matrix order (as the cells list them)."""
    names: list[str] = []
    for c in run.cells:
        for n in c.axes:
            if n not in names:
                names.append(n)
    return names


def axis_values(run: RunResult, axis: str) -> list[str]:
    """An axis's values in the order the run's cells first show them (lengths numerically)."""
    seen: list[str] = []
    for c in run.cells:
        v = c.axes.get(axis)
        if v is not None and v not in seen:
            seen.append(v)
    if seen and all(human_int(v) is not None for v in seen):
        seen.sort(key=lambda v: human_int(v) or 0)
    return seen


def cell_length(cell: CellResult, axis: str | None) -> int | None:
    """The cell's max_model_len: its axis value, else its --max-model-len, else the refusal's max seq len. Only a
    positive length is one: `-1` / `auto` (vLLM fits the length itself) is unknown until the log says it."""
    raw = cell.axes.get(axis) if axis else None
    for value in ((human_int(raw) if raw is not None else None), _read(cell, "max_model_len")):
        if value is not None and _plausible(value, MAX_TOKENS):
            return value
    seq = cell.refusal.max_seq_len if cell.refusal else None
    return seq if seq is not None and _plausible(seq, MAX_TOKENS) else None


def _plausible(value: float, limit: float) -> bool:
    """A figure the analysis can compute with: finite, above 0, at most `limit` (beyond any machine or model)."""
    return math.isfinite(value) and 0 < value <= limit


# ---------------------------------------------------------------- block size


def block_size(cell: CellResult, override: int | None = None) -> tuple[int, str]:
    """The KV block in tokens and why: `override`, the block the log says vLLM set (a hybrid's raised attention
    block overrides even --block-size), the cell's prediction (it knows the hybrid's and the CPU MLA kernel's), the
    cell's --block-size, 128 when the log is the CPU backend's, else vLLM's GPU default 16."""
    if override:
        return override, "given"
    if cell.kv.block_size and _plausible(cell.kv.block_size, MAX_TOKENS):
        return cell.kv.block_size, "the log's block size"
    predicted = cell.prediction.prediction if cell.prediction else None
    if predicted is not None and predicted.block_size and _plausible(predicted.block_size, MAX_TOKENS):
        return predicted.block_size, "the prediction"
    explicit = _read(cell, "block_size")
    if explicit is not None and _plausible(explicit, MAX_TOKENS):
        return explicit, option_name("block_size")
    if cell.kv.device == "cpu":  # the parser read the whole log (harness.logfacts): the analysis reads records only
        return CPU_BLOCK, "CPU backend"
    return GPU_BLOCK, "vLLM's GPU default"


# ---------------------------------------------------------------- cap and need


def cap_of(cell: CellResult) -> Quantity | None:
    """The KV pool the engine may use for this cell (see the module's docstring for the order)."""
    kv = cell.kv
    if kv.offload_cap_gib is not None:
        return _gib(kv.offload_cap_gib, Source.offload_cap)
    if kv.floor_raised_bytes is not None and _plausible(kv.floor_raised_bytes, MAX_BYTES):
        # the floor overrides the flag: the pool the engine really got
        return Quantity(float(kv.floor_raised_bytes), Source.kv_floor)
    explicit = _read(cell, "kv_cache_memory_bytes")
    if explicit is not None and _plausible(explicit, MAX_BYTES):
        return Quantity(float(explicit), Source.kv_bytes_flag)
    if kv.available_gib is not None:
        return _gib(kv.available_gib, Source.available_log)
    if kv.reserved_gib is not None:
        return _gib(kv.reserved_gib, Source.explicit_log)
    if (cell.refusal is not None and cell.refusal.kind == Reason.kv_insufficient
            and cell.refusal.available_gib is not None):
        return _gib(cell.refusal.available_gib, Source.available_refusal)
    return None


def available_of(cell: CellResult) -> Quantity | None:
    """What vLLM said is available for KV (before the fork's cap): the log's line, else the refusal's figure."""
    if cell.kv.available_gib is not None:
        return _gib(cell.kv.available_gib, Source.available_log)
    if cell.refusal is not None and cell.refusal.available_gib is not None:
        return _gib(cell.refusal.available_gib, Source.available_refusal)
    return None


def held_back(cell: CellResult) -> int:
    """Blocks of the pool vLLM holds back from every request (the BlockPool's null block, from 0.29 on)."""
    return 1 if rules_for(rules_version(cell.vllm_version)).null_block_in_check else 0


def _blocks_for(length: int, block: int) -> int:
    """Blocks one request of `length` tokens needs (vLLM's "KV cache is needed" counts these, not the held-back one)."""
    return -(-length // block)  # integers: exact at any size, no float overflow


def need_of(cell: CellResult, length: int | None, cap: Quantity | None, block: int) -> Quantity | None:
    """What one request of `length` tokens needs, in vLLM's own terms (its "X GiB KV cache is needed": the request's
    blocks, not the block the pool holds back — the predictor's need is the same figure), from this cell's log; None
    if it cannot be derived honestly. `hi` is the top of what the log allows (a floor adds the held-back block)."""
    if length is None:
        return None
    r = cell.refusal
    held = held_back(cell)
    if r is not None and r.needed_gib is not None and r.kind == Reason.kv_insufficient:
        logged = _gib(r.needed_gib, Source.needed_refusal)
        if logged is not None and not logged.coarse:
            return logged
    if cap is None or cap.coarse:
        return None
    rel = cap.err / cap.bytes if cap.bytes else 0.0
    if r is not None and r.kind == Reason.kv_insufficient and _plausible(r.estimated_max_model_len or 0, MAX_TOKENS):
        # vLLM's estimate M is the longest request the cap holds: the cap is M/block whole blocks plus those held back,
        # and less than one more, so a block costs at most cap / (M/block + held): `length` needs that many blocks.
        m = r.estimated_max_model_len or 0  # plausible: above 0
        upper = cap.bytes * _blocks_for(length, block) / (m / block + held)
        lower = cap.bytes * _blocks_for(length, block) / (m / block + held + 1)
        return Quantity(upper, Source.estimate_scaled, lower * (1 - rel), upper * (1 + rel), detail=f"{m:,}")
    if cell.outcome == Outcome.booted:
        tokens: float | None = cell.kv.kv_tokens if _plausible(cell.kv.kv_tokens or 0, MAX_TOKENS) else None
        conc_rel = 0.0
        conc = cell.kv.max_concurrency or 0
        if tokens is None and _plausible(conc, MAX_TOKENS):
            tokens = conc * length
            conc_rel = 0.005 / conc  # printed %.2fx
        if tokens:
            # The pool holds `tokens` (whole blocks, the held-back one included): a token costs at most cap / tokens.
            upper = cap.bytes * _blocks_for(length, block) * block / tokens
            lower = cap.bytes * _blocks_for(length, block) * block / (tokens + block)
            src = Source.cap_per_token if cell.kv.kv_tokens is not None else Source.cap_per_concurrency
            return Quantity(upper, src, lower * (1 - rel - conc_rel), upper * (1 + rel + conc_rel))
    return None


@dataclass(frozen=True)
class CellKv:
    """Everything the analysis needs about one cell, derived once."""

    cell: CellResult
    length: int | None
    block: int
    block_source: str
    cap: Quantity | None
    need: Quantity | None
    available: Quantity | None
    #: Blocks the pool holds back from every request (held_back); a floor or a fit against the cap adds them.
    held: int = 0

    @property
    def page_hi(self) -> float | None:
        """One block's bytes at most: the prediction's when it has one, else the need over its blocks (the need has
        no fewer bytes than its blocks' pages, so this errs on the side of a floor that boots)."""
        p = self.cell.prediction.prediction if self.cell.prediction else None
        if p is not None and p.bytes_per_block and _plausible(p.bytes_per_block, MAX_BYTES):
            return float(p.bytes_per_block)
        if self.need is None or not self.length:
            return None
        return self.need.hi / _blocks_for(self.length, self.block)

    @property
    def held_bytes(self) -> float:
        """What the pool holds back, in bytes (0 when nothing is held back or no block size is known)."""
        return self.held * (self.page_hi or 0.0)

    @property
    def cell_id(self) -> str:
        return self.cell.cell_id

    @property
    def outcome(self) -> Outcome:
        return self.cell.outcome

    @property
    def kv_refused(self) -> bool:
        return self.cell.outcome == Outcome.refused and self.cell.reason == Reason.kv_insufficient


def cell_kv(cell: CellResult, axis: str | None, block: int | None = None) -> CellKv:
    length = cell_length(cell, axis)
    blk, why = block_size(cell, block)
    cap = cap_of(cell)
    return CellKv(cell, length, blk, why, cap, need_of(cell, length, cap, blk), available_of(cell), held_back(cell))
