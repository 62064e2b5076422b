"""`boot-harness frontier`: the largest max_model_len that boots, per group of cells, to one KV block, in few boots.

The search (`find_frontier`) is pure: it asks an oracle "does length L boot?" and gets back the outcome and, for a KV
refusal, vLLM's own "estimated maximum model length". It

1. probes the upper bound `hi` (booting there ends the search: the frontier is at least `hi`);
2. jumps to the refusal's estimate E, which vLLM computed from the very numbers that refused;
3. when E boots, probes E + one block: if that refuses, the frontier is E, to one block (3 boots in all);
4. otherwise bisects the bracket [largest boot, smallest refusal] on block multiples, jumping again whenever a new
   refusal brings a new estimate below it.

A probe that crashes, times out or errors stops the group's search: that is not a KV boundary, and bisecting on it
would give a wrong answer with confidence. Outcomes are assumed monotonic in the length (what boots at L boots below L).

harness.boot.frontier drives it with real boots (analysis never boots); report.frontier renders what it found.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import Field

from harness.analysis.kv import cell_length
from harness.errors import UsageError
from harness.jsonout import JsonOutput
from harness.predict.predictor import GPU_BLOCK
from harness.results.model import CellResult
from harness.verdict import Outcome, Reason

MAX_PROBES = 40


class SearchStatus(StrEnum):
    running = "running"
    #: the frontier lies between a boot and a refusal one block apart
    found = "found"
    #: the upper bound itself boots
    boots_at_hi = "boots_at_hi"
    #: even the lower bound refuses
    none_in_range = "none_in_range"
    #: a probe was no KV verdict (crashed, timeout, error) or the outcome is not monotonic
    stopped = "stopped"
    #: out of probes
    limit = "limit"


@dataclass(frozen=True)
class Answer:
    """What booting one length said (the oracle's answer)."""

    outcome: Outcome
    reason: Reason | None = None
    #: The longest length the server says would fit: a KV refusal's estimate, or the model's own limit.
    estimate: int | None = None
    cell_id: str | None = None

    @classmethod
    def of(cls, r: CellResult) -> Answer:
        est = None
        if r.refusal is not None:
            if r.refusal.kind == Reason.kv_insufficient:
                est = r.refusal.estimated_max_model_len
            elif r.refusal.kind == Reason.max_len_exceeds_model:
                est = r.refusal.derived_max_model_len
        return cls(r.outcome, r.reason, est, r.cell_id)


@dataclass
class Probe:
    length: int
    why: str
    obs: Answer
    booted: bool = True  # False: known from an earlier run, no boot spent

    def output(self) -> ProbeJson:
        return ProbeJson(length=self.length, why=self.why, outcome=self.obs.outcome, reason=self.obs.reason,
                         estimate=self.obs.estimate, cell_id=self.obs.cell_id, boot=self.booted)

    def short(self) -> str:
        mark = {Outcome.booted: "✓", Outcome.refused: "✗"}.get(self.obs.outcome, "!")
        est = f" est {self.obs.estimate:,}" if self.obs.estimate else ""
        return f"{self.length:,} {mark}{est}" + ("" if self.booted else " (known)")


@dataclass
class Search:
    lo: int
    hi: int
    block: int
    probes: list[Probe] = field(default_factory=list)
    status: SearchStatus = SearchStatus.running
    frontier: int | None = None
    refused_at: int | None = None
    text: str = ""

    @property
    def boots(self) -> int:
        return sum(1 for p in self.probes if p.booted)



Oracle = Callable[[int, str], Answer]


def _inside(lower: int, top: int, b: int) -> int:
    """The block multiple strictly between lower and top nearest their middle (top − lower > b, so one exists)."""
    mid = (lower + top) / 2
    cands = [m * b for m in (math.floor(mid / b), math.ceil(mid / b), lower // b + 1, (top - 1) // b)]
    inside = [c for c in cands if lower < c < top]
    return min(inside, key=lambda c: (abs(c - mid), c)) if inside else lower + (top - lower) // 2


def find_frontier(oracle: Oracle, lo: int | None, hi: int, block: int | Callable[[], int] = GPU_BLOCK,
                  known: Iterable[tuple[int, Answer]] = (), use_estimates: bool = True,
                  max_probes: int = MAX_PROBES, predicted: int | None = None) -> Search:
    """The largest length in [lo, hi] that boots, to one block. `oracle(length, why)` boots one length.
    `lo=None` is one block. `use_estimates=False` is plain bisection (for comparison). `known` are outcomes already
    recorded (no boot). `block` may be a callable: the block can be learnt from the first boot's log. `predicted` is
    the predictor's frontier (harness.predict): probed first, then one block above it — 1 boot to confirm a frontier
    at `hi`, 2 elsewhere, when the prediction is right; a wrong one only costs its probe before the usual search."""
    blk = (lambda: block) if isinstance(block, int) else block
    if (lo is not None and lo < 1) or hi < (lo or 1):
        raise UsageError(f"--lo {lo} --hi {hi}: need 1 ≤ lo ≤ hi")
    s = Search(lo or 0, hi, blk() if isinstance(block, int) else 0)
    ok: int | None = None
    bad: int | None = None
    pending: int | None = None
    probed: dict[int, Answer] = {}
    last_jump_ok = False
    climbs = 0
    if predicted is not None:
        predicted = max(lo or 1, min(predicted, hi))

    def record(length: int, obs: Answer, why: str, cost: bool) -> None:
        nonlocal ok, bad, pending
        s.probes.append(Probe(length, why, obs, cost))
        probed[length] = obs
        if obs.outcome == Outcome.booted:
            ok = length if ok is None else max(ok, length)
        elif obs.outcome == Outcome.refused:
            if bad is None or length < bad:
                bad = length
                pending = obs.estimate if use_estimates else None
        else:
            s.status = SearchStatus.stopped
            s.text = (f"the probe at {length:,} {obs.outcome} ({obs.reason}): not a KV boundary, so the search stops "
                      "here; see that cell's log")

    for earlier, obs in sorted(known, key=lambda k: k[0]):
        if s.status == SearchStatus.running:
            record(earlier, obs, "recorded earlier", False)

    while s.status == SearchStatus.running:
        b = blk()
        s.block = b
        if lo is None:
            s.lo = min(b, hi)
        low = s.lo
        if ok is not None and bad is not None and ok >= bad:
            s.status, s.text = SearchStatus.stopped, (f"{ok:,} booted but {bad:,} refused: the outcome is not "
                                                      "monotonic in the length, so there is no single frontier")
            break
        if ok is not None and ok >= hi:
            s.status, s.frontier = SearchStatus.boots_at_hi, ok
            s.text = f"{ok:,} (the upper bound) boots: the frontier is at least that; raise --hi"
            break
        if bad is not None and bad <= low:
            s.status, s.refused_at = SearchStatus.none_in_range, bad
            s.text = f"{bad:,} (the lower bound) does not boot: nothing in [{low:,}, {hi:,}] does"
            break
        if ok is not None and bad is not None and bad - ok <= b:
            s.status, s.frontier, s.refused_at = SearchStatus.found, ok, bad
            s.text = f"{ok:,} boots and {bad:,} does not: the frontier is {ok:,} (to one block of {b} tokens)"
            break
        if len(s.probes) >= max_probes:
            s.status, s.frontier, s.refused_at = SearchStatus.limit, ok, bad
            s.text = f"gave up after {max_probes} probes; bracket [{ok}, {bad}]"
            break
        length, why = None, ""
        if predicted is not None and predicted not in probed and ok is None and bad is None:
            length, why = predicted, "the prediction"
        elif climbs < 2 and last_jump_ok and ok is not None and bad is None and ok < hi:
            # a prediction one block low (an alignment it missed) is found by the next step up; past two, the
            # prediction is off by more than blocks and the usual search from --hi takes over
            length, why = min(ok + b, hi), "one block above the prediction"
            climbs += 1
        elif bad is None and hi not in probed:
            length, why = hi, "upper bound"
        elif pending is not None:
            e, pending = pending, None
            if e < low:
                if low not in probed:
                    length, why = low, f"vLLM's estimate {e:,} is below --lo"
            elif (ok is None or e > ok) and (bad is None or e < bad) and e not in probed:
                length, why = e, "vLLM's estimate"
            elif e == ok and bad is not None and ok + b < bad and ok + b not in probed:
                length, why = ok + b, "one block above the estimate"  # vLLM names a length that already booted
        if length is None and last_jump_ok and ok is not None and bad is not None and ok + b < bad \
                and ok + b not in probed:
            length, why = ok + b, "one block above the estimate"
        if length is None:
            lower = ok if ok is not None else low
            top = bad if bad is not None else hi + b
            if ok is None and top - low <= b:
                length, why = low, "lower bound"
            else:
                length, why = _inside(lower, top, b), "bisect"
            if length in probed:  # cannot happen with a monotonic oracle; never loop on it
                s.status, s.text = SearchStatus.stopped, f"the search revisited {length:,}; bracket [{ok}, {bad}]"
                break
        obs = oracle(length, why)
        record(length, obs, why, True)
        last_jump_ok = why in ("vLLM's estimate", "the prediction", "one block above the prediction") \
            and obs.outcome == Outcome.booted
    if s.status == SearchStatus.stopped:
        s.frontier, s.refused_at = ok, bad
    return s


# ---------------------------------------------------------------- real boots


@dataclass
class GroupFrontier:
    key: dict[str, str]
    template: str
    search: Search

    @property
    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.key.items()) or "all cells"

    def output(self) -> GroupFrontierJson:
        s = self.search
        return GroupFrontierJson(group=self.key, label=self.label, template=self.template, lo=s.lo, hi=s.hi,
                                 block=s.block, status=s.status, frontier=s.frontier, refused_at=s.refused_at,
                                 boots=s.boots, text=s.text, probes=[p.output() for p in s.probes])


class ProbeJson(JsonOutput):
    length: int
    why: str
    outcome: Outcome
    reason: Reason | None
    estimate: int | None = Field(description="the longest length the server said would fit")
    cell_id: str | None
    boot: bool = Field(description="false: known from an earlier run (--from), no boot spent")


class GroupFrontierJson(JsonOutput):
    """One group's search: its bounds, where it ended, and every probe."""

    group: dict[str, str]
    label: str
    template: str
    lo: int
    hi: int
    block: int
    status: SearchStatus
    frontier: int | None
    refused_at: int | None
    boots: int
    text: str
    probes: list[ProbeJson]


class FrontierJson(JsonOutput):
    """`boot-harness frontier --json` (and frontier.json, with the run's id, axis and flag)."""

    run_dir: str
    groups: list[GroupFrontierJson]


def known_from_run(run, axis: str, key: dict[str, str]) -> list[tuple[int, Answer]]:
    out = []
    for c in run.cells:
        if all(c.axes.get(k) == v for k, v in key.items()):
            length = cell_length(c, axis)
            if length is not None:
                out.append((length, Answer.of(c)))
    return out
