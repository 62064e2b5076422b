"""A bisect's answer: the last good and the first bad candidate (or the range left-out candidates leave), their
verdicts, and what changed between them — the image's digest, its OCI labels (`org.opencontainers.image.revision`,
`.version`, `.created`, …), the vLLM version the server logged, the KV figures — as one model (`--json`, bisect.json),
terminal text and markdown. Every value a build or a server wrote is escaped where it is printed
(harness.escape)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import Field

from harness.bisect.candidates import BuildKind, Candidate
from harness.bisect.oracle import On, Oracle
from harness.bisect.search import Found
from harness.escape import md_code, md_text, terminal_line
from harness.jsonout import JsonOutput
from harness.results.model import CellResult
from harness.verdict import Outcome, Reason

#: The OCI annotations a build is named by, shown first (the rest of org.opencontainers.* after them).
OCI = "org.opencontainers.image."
OCI_FIRST = ("revision", "version", "created", "source")


#: A fact's value as recorded: text, a number, a command's words, or nothing.
Value = bool | int | float | str | list[str] | None


class CandidateJson(JsonOutput):
    """What one candidate was and gave: its first record's facts, and what each boot said."""

    index: int
    ref: str
    kind: BuildKind
    created: str | None
    said: list[str] = Field(description="what each boot of it said")
    cells: list[str] = Field(description="the cell records of its boots")
    read_from: list[str | None] = Field(description="by record: the --from run it was read from (null: booted now)")
    outcome: Outcome | None
    reason: Reason | None
    verdict: str | None
    image_digest: str | None
    image: str | None
    command: list[str] | None
    labels: dict[str, str] = Field(description="the image's org.opencontainers.image.* labels, the naming ones first")
    vllm_version: str | None
    kv: dict[str, bool | int | float | str] = Field(description="the KV figures its server logged")
    estimated_max_model_len: int | None
    measure: float | None = Field(description="what --on time|memory compares; null --on verdict")


class FactChangeJson(JsonOutput):
    what: str
    good: Value
    bad: Value


class SkippedJson(JsonOutput):
    index: int
    ref: str
    flipped: bool = Field(description="its boots disagreed (else: it could not be had or booted)")
    said: list[str]
    marks: list[str]


class BisectJson(JsonOutput):
    """`boot-harness bisect --json` (and bisect.json's `answer`): the last good and the first bad candidate, or the
    range left-out candidates leave (`status` range: exit 1), and what changed between them."""

    cell: str
    on: On
    tolerance: str | None
    phase: str | None
    status: Literal["found", "range"]
    candidates: int
    run_dir: str
    boots: int
    boots_recorded: int
    probes: int
    last_good: CandidateJson
    first_bad: CandidateJson
    range: list[str] | None = Field(description="status range: the candidates the first bad is one of")
    skipped: list[SkippedJson]
    changed: list[FactChangeJson]


def build_facts(cand: Candidate, records: list[CellResult], said: list[str], oracle: Oracle,
                labels: dict[str, str] | None, read_from: list[str | None] | None = None) -> CandidateJson:
    """What one candidate was and gave: its first record's facts, what each boot said, and by record the `--from` run
    it was read from (None: booted by this bisect)."""
    r = records[0] if records else None
    oci = {k: v for k, v in (labels or {}).items() if k.startswith(OCI)}
    ordered = {k: oci[k] for k in (OCI + n for n in OCI_FIRST) if k in oci}
    ordered.update({k: v for k, v in sorted(oci.items()) if k not in ordered})
    return CandidateJson(
        index=cand.index, ref=cand.ref, kind=cand.kind, created=cand.created, said=said,
        cells=[x.cell_id for x in records], read_from=list(read_from or [None] * len(records)),
        outcome=r.outcome if r else None,
        reason=r.reason if r and r.reason else None, verdict=r.verdict() if r else None,
        image_digest=r.container.image_digest if r and r.container else None,
        image=r.container.image if r and r.container else cand.image, command=list(cand.command) or None,
        labels=ordered, vllm_version=r.vllm_version if r else None,
        kv=r.kv.model_dump(exclude_none=True) if r else {},
        estimated_max_model_len=r.refusal.estimated_max_model_len if r and r.refusal else None,
        measure=oracle.measure(r) if r and oracle.on != On.verdict else None)


def changes(good: CandidateJson, bad: CandidateJson) -> list[FactChangeJson]:
    """Every fact that differs between the last good and the first bad: (what, good's, bad's)."""
    out = []

    def diff(what: str, a: Value, b: Value) -> None:
        if a != b:
            out.append(FactChangeJson(what=what, good=a, bad=b))

    diff("verdict", good.verdict, bad.verdict)
    diff("image digest", good.image_digest, bad.image_digest)
    for key in dict.fromkeys([*good.labels, *bad.labels]):
        diff(key, good.labels.get(key), bad.labels.get(key))
    diff("vLLM version", good.vllm_version, bad.vllm_version)
    diff("command", good.command, bad.command)
    for key in dict.fromkeys([*good.kv, *bad.kv]):
        diff(f"kv.{key}", good.kv.get(key), bad.kv.get(key))
    diff("estimated max model len", good.estimated_max_model_len, bad.estimated_max_model_len)
    if good.measure is not None or bad.measure is not None:
        diff("measure", good.measure, bad.measure)
    return out


def answer(cell_id: str, cands: list[Candidate], found: Found, facts: Callable[[int], CandidateJson],
           oracle: Oracle, run_dir: str, boots: int, boots_recorded: int) -> BisectJson:
    """The answer; `facts(i)` is build_facts of candidate i."""
    lo, hi = facts(found.lo), facts(found.hi)
    return BisectJson(
        cell=cell_id, on=oracle.on, tolerance=oracle.tolerance(), phase=oracle.phase if oracle.on == On.time else None,
        status="found" if found.exact else "range", candidates=len(cands), run_dir=run_dir, boots=boots,
        boots_recorded=boots_recorded, probes=found.probes, last_good=lo, first_bad=hi,
        range=[cands[i].ref for i in range(found.lo + 1, found.hi + 1)] if not found.exact else None,
        skipped=[SkippedJson(index=i, ref=cands[i].ref, flipped=s.flipped, said=[x.said for x in s.said],
                             marks=[x.mark.value for x in s.said]) for i, s in sorted(found.left_out.items())],
        changed=changes(lo, hi))


def _shown(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return " ".join(map(str, v))
    return str(v)


def text_lines(a: BisectJson) -> list[str]:
    """The answer for a terminal: one line each, every value escaped."""
    lo, hi = a.last_good, a.first_bad
    on = a.on + (f" ({a.phase})" if a.phase else "") + (f", beyond {a.tolerance}" if a.tolerance else "")
    out = [f"bisect of {a.cell} on {on}: {a.candidates} candidates, {a.boots} boot(s) now"
           + (f", {a.boots_recorded} read from records" if a.boots_recorded else "")]
    if a.status == "found":
        out.append(f"first bad: {hi.ref} — {'; '.join(hi.said)}")
        out.append(f"last good: {lo.ref} — {'; '.join(lo.said)}")
    else:
        out.append(f"first bad: one of {', '.join(a.range or [])} (left out between them: "
                   f"{', '.join(s.ref for s in a.skipped if lo.index < s.index < hi.index)})")
        out.append(f"last good: {lo.ref} — {'; '.join(lo.said)}; bad: {hi.ref} — {'; '.join(hi.said)}")
    for s in a.skipped:
        why = "flipped: " + ", then ".join(f"{m} ({w})" for m, w in zip(s.marks, s.said, strict=True)) \
            if s.flipped else "; ".join(s.said)
        out.append(f"left out: {s.ref} — {why}")
    if a.changed:
        out.append("changed between them:")
        out += [f"  {c.what}: {_shown(c.good)} → {_shown(c.bad)}" for c in a.changed]
    out.append(f"records: {a.run_dir}")
    return [terminal_line(line) for line in out]


def markdown(a: BisectJson) -> str:
    """The answer as markdown (a CI job summary): a heading, the two builds, a table of what changed."""
    lo, hi = a.last_good, a.first_bad
    lines = [f"## Bisect of {md_code(a.cell)} on {md_text(a.on)}", ""]
    if a.status == "found":
        lines.append(f"**First bad:** {md_code(hi.ref)} — {md_text('; '.join(hi.said))}  ")
    else:
        lines.append(f"**First bad:** one of {', '.join(md_code(r) for r in a.range or [])}  ")
    lines.append(f"**Last good:** {md_code(lo.ref)} — {md_text('; '.join(lo.said))}  ")
    lines.append(f"{a.candidates} candidates, {a.boots} boot(s) now, {a.boots_recorded} read from records.")
    if a.skipped:
        lines += ["", "Left out:", ""]
        lines += [f"- {md_code(s.ref)}: {md_text(('flipped: ' if s.flipped else '') + '; '.join(s.said))}"
                  for s in a.skipped]
    if a.changed:
        lines += ["", "| what | last good | first bad |", "|---|---|---|"]
        lines += [f"| {md_text(c.what)} | {md_code(_shown(c.good), in_table=True)} | "
                  f"{md_code(_shown(c.bad), in_table=True)} |" for c in a.changed]
    return "\n".join(lines) + "\n"
