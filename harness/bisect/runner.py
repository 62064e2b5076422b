"""`boot-harness bisect`, the booting half: each candidate booted as `run` boots a cell — one RunSession (the executor's
GPU hygiene, the sweep, the interrupt handling), one ordinary run directory named `<matrix>-bisect`, every boot a normal
cell record — with the pure search of harness.bisect.search deciding which candidate to boot next.

A candidate is the cell with its image replaced (a container cell) or its command (a process cell), under its own id
`<cell>-b<NN>_<token>` (`_r<k>` for the k-th boot of `--repeat`), its axes the cell's plus `candidate`. Before a
candidate boots, the runtime checks it as a run's preflight does: an image that cannot be had is skipped and named;
a patched cell's patch is applied to the candidate's image as `run` applies it, and one whose pristine file has
another hash, or that no longer applies, is a finding (`--on-patch-fail skip|bad|stop`). `bisect.json` beside the
records holds the plan (the candidates, the question) and the steps so far, rewritten after each; `--resume` replays
the search on the records the run already has, booting only what it lacks, so a killed bisect reaches the same answer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from harness.bisect.answer import BisectJson
from harness.bisect.candidates import BuildKind, Candidate
from harness.bisect.known import FromRuns, Recorded, Wanted
from harness.bisect.oracle import Mark, On, Oracle, Said, verdict_key
from harness.bisect.search import Found, Step, bisect
from harness.boot.session import RunOptions, RunSession
from harness.errors import (
    EndsDisagree,
    HarnessError,
    Interrupted,
    PatchMismatch,
    PatchStopped,
    RunStopped,
    RuntimeUnavailable,
    UsageError,
)
from harness.escape import terminal_line
from harness.files import parse_json, read_bytes
from harness.matrix.cells import MAX_ID_CHARS, Cell
from harness.results.model import CellResult, RunStatus
from harness.results.store import atomic_write_text, dump_json, new_run_id
from harness.verdict import Outcome

PLAN_FILE = "bisect.json"
#: The axis a candidate's records carry beside the cell's own (another name when the matrix has that axis).
AXIS = "candidate"


class OnPatchFail(StrEnum):
    skip = "skip"
    bad = "bad"
    stop = "stop"


@dataclass(frozen=True)
class Plan:
    """What a bisect asks; kept in bisect.json, and a `--resume` must ask the same."""

    matrix: str
    cell: str
    candidates: list[Candidate]
    on: On = On.verdict
    phase: str = "boot"
    time_tolerance: str | None = None
    memory_tolerance: str | None = None
    repeat: int = 1
    on_patch_fail: OnPatchFail = OnPatchFail.skip
    #: `--from`: runs whose records of the cell may stand for an end's boot (harness.bisect.known).
    from_runs: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"matrix": self.matrix, "cell": self.cell, "on": self.on.value, "phase": self.phase,
                "time_tolerance": self.time_tolerance, "memory_tolerance": self.memory_tolerance,
                "repeat": self.repeat, "on_patch_fail": self.on_patch_fail.value, "from": list(self.from_runs),
                "candidates": [c.to_dict() for c in self.candidates]}

    @classmethod
    def from_dict(cls, d: dict, where: str) -> Plan:
        try:
            cands = [Candidate(int(c["index"]), str(c["ref"]), BuildKind(c["kind"]), c.get("image"),
                               tuple(c.get("command") or ()), c.get("created")) for c in d["candidates"]]
            return cls(str(d["matrix"]), str(d["cell"]), cands, On(d["on"]), str(d.get("phase") or "boot"),
                       d.get("time_tolerance"), d.get("memory_tolerance"), int(d["repeat"]),
                       OnPatchFail(d["on_patch_fail"]), tuple(str(p) for p in d.get("from") or ()))
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"{where}: not a bisect plan ({type(exc).__name__}: {exc})") from None


def read_plan(run_dir: Path) -> tuple[Plan, dict]:
    """The plan of a bisect run and its whole bisect.json; one line when it is no bisect's run."""
    path = Path(run_dir) / PLAN_FILE
    if not path.exists():
        raise UsageError(f"{run_dir}: not a bisect run (no {PLAN_FILE})")
    doc = parse_json(read_bytes(path, follow=False), str(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("plan"), dict):
        raise UsageError(f"{path}: not a bisect record (no plan)")
    return Plan.from_dict(doc["plan"], str(path)), doc


def axis_name(template: Cell) -> str:
    name = AXIS
    while name in template.axes:
        name = "bisect_" + name
    return name


def candidate_cell(template: Cell, cand: Candidate, n: int, k: int = 1) -> Cell:
    """The cell booted for `cand` (its k-th boot): the template with the candidate's image or command, its own id."""
    width = max(2, len(str(n - 1)))
    label = f"{cand.index:0{width}d}_{cand.token}"
    suffix = f"-b{label}" + (f"_r{k}" if k > 1 else "")
    cid = template.id[:MAX_ID_CHARS - len(suffix)] + suffix
    return dataclasses.replace(template, id=cid, axes={**template.axes, axis_name(template): label},
                               image=cand.image or template.image, command=cand.command, expected=None)


@dataclass
class Probed:
    """What the runner knows of one candidate: its records (one per boot), or the finding that stood for a boot."""

    cand: Candidate
    records: list[CellResult] = field(default_factory=list)
    #: Why it was not booted (an image that cannot be had, a patch that no longer fits).
    finding: str | None = None
    #: Whether `finding` is a patch's (named apart in the answer).
    patch: bool = False
    booted_now: int = 0
    #: By record: the `--from` run it was read from, None for a boot of this bisect run.
    read_from: list[str | None] = field(default_factory=list)


class BisectRunner:
    """Runs one bisect: `run()` returns the search's end and what was probed, by candidate index."""

    def __init__(self, loaded, template: Cell, plan: Plan, oracle: Oracle, *, results_dir: Path,
                 resume: Path | None = None, timeout_s: float | None = None, runtime=None,
                 say: Callable[[str], None] = print, pull_observer=None, clock=None,
                 from_runs: FromRuns | None = None):
        """`from_runs`: the plan's `--from` runs, read (the caller reads them before a run directory is made)."""
        self.loaded, self.template, self.plan, self.oracle, self.say = loaded, template, plan, oracle, say
        self.cands = plan.candidates
        self.n = len(self.cands)
        good = candidate_cell(template, self.cands[0], self.n)
        options = RunOptions(results_dir=results_dir, resume=resume, selection=[template.id], timeout_s=timeout_s,
                             run_id=None if resume else new_run_id(f"{loaded.matrix.name}-bisect"),
                             **({"clock": clock} if clock is not None else {}))
        try:
            self.session = RunSession.open(loaded, [good], options, runtime=runtime, say=say,
                                           pull_observer=pull_observer)
        except PatchMismatch as exc:
            raise UsageError(f"the good end {self.cands[0].ref}: {exc}") from None
        except RuntimeUnavailable as exc:
            raise RuntimeUnavailable(f"{exc} (checking the good end {self.cands[0].ref})") from None
        self.recorded = {c.cell_id: c for c in self.session.store.run.cells}
        if from_runs is None and plan.from_runs:
            from_runs = FromRuns([Path(p) for p in plan.from_runs], template.id)
        self.from_runs = from_runs
        self.probed: dict[int, Probed] = {}
        self.steps: list[Step] = []
        self.status = "running"
        self.answer: BisectJson | None = None

    @property
    def run_dir(self) -> Path:
        return self.session.run_dir

    @property
    def boots(self) -> int:
        """Servers booted by this invocation (a resume's records read are not)."""
        return sum(p.booted_now for p in self.probed.values())

    # ---- one probe
    def _checked(self, cand: Candidate, cell: Cell) -> Probed:
        """The candidate checked once before its first boot, as a run's preflight checks a cell."""
        p = self.probed.get(cand.index)
        if p is not None:
            return p
        p = self.probed[cand.index] = Probed(cand)
        if cell.id in self.recorded:  # a resumed run booted it: its image was there and its patch fitted
            return p
        runtime = self.session.runtime
        assert runtime is not None
        try:
            runtime.preflight([cell], gpu_checks=False)
        except PatchMismatch as exc:
            p.finding, p.patch = f"the cell's patch does not fit it: {exc}", True
        except RuntimeUnavailable as exc:
            p.finding = f"cannot be had: {exc}"
        return p

    def _record(self, cell: Cell, p: Probed, k: int) -> CellResult:
        got = self.recorded.get(cell.id)
        origin = None
        if got is None and p.cand.index in (0, self.n - 1) and self.from_runs is not None:
            read = self._from_runs(p.cand, k)
            if read is not None:
                got, origin = read.cell, str(read.run_dir)
        if got is None:
            got = self.session.boot(cell)
            if got is None:
                raise Interrupted("the bisect was stopped")
            p.booted_now += 1
            self.recorded[cell.id] = got
        p.records.append(got)
        p.read_from.append(origin)
        return got

    def _from_runs(self, cand: Candidate, k: int) -> Recorded | None:
        """The end's k-th boot as a `--from` run recorded it (harness.bisect.known), or None (said why, once)."""
        assert self.from_runs is not None and self.session.runtime is not None and cand.image is not None
        run = self.session.store.run
        want = Wanted(self.template.id, run.matrix.sha256, run.harness_version,
                      self.session.runtime.image_digest(cand.image))
        fit, why = self.from_runs.find(want, k)
        if len(fit) >= k:
            return fit[k - 1]
        if k == 1:
            self.say(terminal_line(f"--from: {cand.ref}: {why}; booting it"))
        return None

    def probe(self, index: int, k: int) -> Said:
        cand = self.cands[index]
        cell = candidate_cell(self.template, cand, self.n, k)
        p = self._checked(cand, cell)
        if p.finding is not None:
            if p.patch and self.plan.on_patch_fail == OnPatchFail.stop and 0 < index < self.n - 1:
                self.status = "patch_stopped"
                self._write()
                raise PatchStopped(f"candidate {cand.ref}: {p.finding} (--on-patch-fail stop)")
            mark = Mark.bad if p.patch and self.plan.on_patch_fail == OnPatchFail.bad and 0 < index < self.n - 1 \
                else Mark.skip
            return Said(mark, p.finding)
        r = self._record(cell, p, k)
        said = self._judge(index, r)
        origin = p.read_from[-1]
        return said if origin is None else Said(said.mark, f"{said.said}, recorded in {origin}")

    def _first(self, index: int) -> CellResult | None:
        p = self.probed.get(index)
        return p.records[0] if p and p.records else None

    def _judge(self, index: int, r: CellResult) -> Said:
        """The oracle's rule, with the ends' own: the good end's first boot is the reference (in verdict mode, held
        to the cell's expectation when it has one); the bad end is bad when it differs from the good end as the
        question asks; a repetition of an end is held to that end's first boot."""
        good, bad = self._first(0), self._first(self.n - 1)
        assert good is not None
        verdict = self.oracle.on == On.verdict
        if r.outcome == Outcome.error or index not in (0, self.n - 1):
            return self.oracle.judge(r, good, bad)
        expected = self.template.expected if verdict else None
        first = r is (good if index == 0 else bad)
        if first and expected is not None:
            meets = expected.matches(r.outcome, r.reason, r.timings.verdict_s)
            words = f"{r.verdict()} ({'meets' if meets else 'misses'} the cell's expectation)"
            if index == self.n - 1 and not meets and verdict_key(r) == verdict_key(good):
                return Said(Mark.good, words + ", the good end's verdict")
            return Said(Mark.good if meets else Mark.bad, words)
        if index == 0 and first:
            value = self.oracle.measure(r)
            shown = "" if verdict else f", {self.oracle.what} {self.oracle.shown(value)}"
            return Said(Mark.good, r.verdict() + shown)
        if index == 0:
            return self.oracle.judge(r, good, None)
        if verdict and not first and bad is not None:  # the bad end again: bad when it is its first verdict
            return Said(Mark.bad if verdict_key(r) == verdict_key(bad) else Mark.good, r.verdict())
        return self.oracle.judge(r, good, None)

    # ---- the search
    def run(self) -> Found:
        self._write()
        try:
            found = bisect(self.n, self.probe, self.plan.repeat, self._step, lambda i: self.cands[i].ref)
        except (RunStopped, KeyboardInterrupt):
            self.status = "interrupted"
            self._write()
            self.session.close()
            raise
        except HarnessError as exc:
            if self.status == "running":
                self.status = "ends_disagree" if isinstance(exc, EndsDisagree) else "stopped"
            self._write()
            self.session.finish(RunStatus.complete)
            raise
        self.status = "found" if found.exact else "range"
        self.found = found
        self.session.finish(RunStatus.complete)
        return found

    def _step(self, step: Step) -> None:
        self.steps.append(step)
        self._write()
        self.say(self.step_line(step))

    def step_line(self, step: Step) -> str:
        cand = self.cands[step.index]
        role = " (good end)" if step.index == 0 else " (bad end)" if step.index == self.n - 1 else ""
        said = "; ".join(s.said for s in step.said)
        mark = "FLIPPED" if step.flipped else step.mark.value
        open_ = step.hi - step.lo - 1
        rng = f"first bad in {self.cands[step.lo + 1].ref if open_ else self.cands[step.hi].ref}" + (
            f"..{self.cands[step.hi].ref} ({open_ + 1} candidates)" if open_ else "")
        return terminal_line(f"[{step.index + 1}/{self.n}] {cand.ref}{role}: {said} → {mark}; {rng}; "
                             f"≤{step.left} boot(s) left")

    # ---- bisect.json
    def _write(self) -> None:
        doc = {"plan": self.plan.to_dict(), "run_id": self.session.store.run.run_id, "status": self.status,
               "steps": [{"index": s.index, "ref": self.cands[s.index].ref, "mark": s.mark.value,
                          "flipped": s.flipped, "said": [x.said for x in s.said],
                          "marks": [x.mark.value for x in s.said],
                          "lo": s.lo, "hi": s.hi,
                          "cells": [r.cell_id for r in (self.probed[s.index].records if s.index in self.probed
                                                         else [])],
                          "read_from": self.probed[s.index].read_from if s.index in self.probed else []}
                         for s in self.steps]}
        if self.answer is not None:
            doc["answer"] = self.answer.model_dump(mode="json")
        atomic_write_text(self.run_dir / PLAN_FILE, dump_json(doc))

    def keep_answer(self, answer: BisectJson) -> None:
        self.answer = answer
        self._write()


def plan_matches(recorded: Plan, asked: Plan) -> str | None:
    """Why a resume's arguments are not the recorded bisect's (the first difference), None when they are."""
    a, b = recorded.to_dict(), asked.to_dict()
    for key in a:
        if a[key] != b[key]:
            if key == "candidates":
                return "another candidate list"
            return f"{key} {json.dumps(a[key])} then, {json.dumps(b[key])} now"
    return None
