"""A bisect's answer: the last good and the first bad candidate (or the range left-out candidates leave), their
verdicts, and what changed between them — the image's digest, its OCI labels (`org.opencontainers.image.revision`,
`.version`, `.created`, …), the vLLM version the server logged, the KV figures — as one dict (`--json`, bisect.json),
terminal text and markdown. Every value a build or a server wrote is escaped where it is printed
(harness.escape)."""

from __future__ import annotations

from collections.abc import Callable

from harness.bisect.candidates import Candidate
from harness.bisect.oracle import Oracle
from harness.bisect.search import Found
from harness.escape import md_code, md_text, terminal_line
from harness.results.model import CellResult

#: The OCI annotations a build is named by, shown first (the rest of org.opencontainers.* after them).
OCI = "org.opencontainers.image."
OCI_FIRST = ("revision", "version", "created", "source")


def build_facts(cand: Candidate, records: list[CellResult], said: list[str], oracle: Oracle,
                labels: dict[str, str] | None) -> dict:
    """What one candidate was and gave: its first record's facts, and what each boot said."""
    r = records[0] if records else None
    oci = {k: v for k, v in (labels or {}).items() if k.startswith(OCI)}
    ordered = {k: oci[k] for k in (OCI + n for n in OCI_FIRST) if k in oci}
    ordered.update({k: v for k, v in sorted(oci.items()) if k not in ordered})
    return {
        "index": cand.index, "ref": cand.ref, "kind": cand.kind.value, "created": cand.created,
        "said": said,
        "cells": [x.cell_id for x in records],
        "outcome": str(r.outcome) if r else None, "reason": str(r.reason) if r and r.reason else None,
        "verdict": r.verdict() if r else None,
        "image_digest": r.container.image_digest if r and r.container else None,
        "image": r.container.image if r and r.container else cand.image,
        "command": list(cand.command) or None,
        "labels": ordered,
        "vllm_version": r.vllm_version if r else None,
        "kv": r.kv.model_dump(exclude_none=True) if r else {},
        "estimated_max_model_len": r.refusal.estimated_max_model_len if r and r.refusal else None,
        "measure": oracle.measure(r) if r and oracle.on != "verdict" else None,
    }


def changes(good: dict, bad: dict) -> list[dict]:
    """Every fact that differs between the last good and the first bad: (what, good's, bad's)."""
    out = []

    def diff(what: str, a, b) -> None:
        if a != b:
            out.append({"what": what, "good": a, "bad": b})

    diff("verdict", good["verdict"], bad["verdict"])
    diff("image digest", good["image_digest"], bad["image_digest"])
    for key in dict.fromkeys([*good["labels"], *bad["labels"]]):
        diff(key, good["labels"].get(key), bad["labels"].get(key))
    diff("vLLM version", good["vllm_version"], bad["vllm_version"])
    diff("command", good["command"], bad["command"])
    for key in dict.fromkeys([*good["kv"], *bad["kv"]]):
        diff(f"kv.{key}", good["kv"].get(key), bad["kv"].get(key))
    diff("estimated max model len", good["estimated_max_model_len"], bad["estimated_max_model_len"])
    if good["measure"] is not None or bad["measure"] is not None:
        diff("measure", good["measure"], bad["measure"])
    return out


def answer(cell_id: str, cands: list[Candidate], found: Found, facts: Callable[[int], dict], oracle: Oracle,
           run_dir: str, boots: int, boots_recorded: int) -> dict:
    """The answer as one dict; `facts(i)` is build_facts of candidate i."""
    lo, hi = facts(found.lo), facts(found.hi)
    left_out = found.left_out
    return {
        "cell": cell_id, "on": oracle.on.value, "tolerance": oracle.tolerance(),
        "phase": oracle.phase if oracle.on == "time" else None,
        "status": "found" if found.exact else "range",
        "candidates": len(cands), "run_dir": run_dir,
        "boots": boots, "boots_recorded": boots_recorded, "probes": found.probes,
        "last_good": lo, "first_bad": hi,
        "range": [cands[i].ref for i in range(found.lo + 1, found.hi + 1)] if not found.exact else None,
        "skipped": [{"index": i, "ref": cands[i].ref, "flipped": s.flipped, "said": [x.said for x in s.said],
                     "marks": [x.mark.value for x in s.said]} for i, s in sorted(left_out.items())],
        "changed": changes(lo, hi),
    }


def _shown(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return " ".join(map(str, v))
    return str(v)


def text_lines(a: dict) -> list[str]:
    """The answer for a terminal: one line each, every value escaped."""
    lo, hi = a["last_good"], a["first_bad"]
    on = a["on"] + (f" ({a['phase']})" if a.get("phase") else "") + (f", beyond {a['tolerance']}"
                                                                          if a["tolerance"] else "")
    out = [f"bisect of {a['cell']} on {on}: {a['candidates']} candidates, {a['boots']} boot(s) now"
           + (f", {a['boots_recorded']} read from the run" if a["boots_recorded"] else "")]
    if a["status"] == "found":
        out.append(f"first bad: {hi['ref']} — {'; '.join(hi['said'])}")
        out.append(f"last good: {lo['ref']} — {'; '.join(lo['said'])}")
    else:
        out.append(f"first bad: one of {', '.join(a['range'])} (left out between them: "
                   f"{', '.join(s['ref'] for s in a['skipped'] if lo['index'] < s['index'] < hi['index'])})")
        out.append(f"last good: {lo['ref']} — {'; '.join(lo['said'])}; bad: {hi['ref']} — {'; '.join(hi['said'])}")
    for s in a["skipped"]:
        flips = zip(s["marks"], s["said"], strict=False)
        why = "flipped: " + ", then ".join(f"{m} ({w})" for m, w in flips) if s["flipped"] else "; ".join(s["said"])
        out.append(f"left out: {s['ref']} — {why}")
    if a["changed"]:
        out.append("changed between them:")
        out += [f"  {c['what']}: {_shown(c['good'])} → {_shown(c['bad'])}" for c in a["changed"]]
    out.append(f"records: {a['run_dir']}")
    return [terminal_line(line) for line in out]


def markdown(a: dict) -> str:
    """The answer as markdown (a CI job summary): a heading, the two builds, a table of what changed."""
    lo, hi = a["last_good"], a["first_bad"]
    lines = [f"## Bisect of {md_code(a['cell'])} on {md_text(a['on'])}", ""]
    if a["status"] == "found":
        lines.append(f"**First bad:** {md_code(hi['ref'])} — {md_text('; '.join(hi['said']))}  ")
    else:
        lines.append(f"**First bad:** one of {', '.join(md_code(r) for r in a['range'])}  ")
    lines.append(f"**Last good:** {md_code(lo['ref'])} — {md_text('; '.join(lo['said']))}  ")
    lines.append(f"{a['candidates']} candidates, {a['boots']} boot(s) now, {a['boots_recorded']} read from the run.")
    if a["skipped"]:
        lines += ["", "Left out:", ""]
        lines += [f"- {md_code(s['ref'])}: {md_text(('flipped: ' if s['flipped'] else '') + '; '.join(s['said']))}"
                  for s in a["skipped"]]
    if a["changed"]:
        lines += ["", "| what | last good | first bad |", "|---|---|---|"]
        lines += [f"| {md_text(c['what'])} | {md_code(_shown(c['good']), in_table=True)} | "
                  f"{md_code(_shown(c['bad']), in_table=True)} |" for c in a["changed"]]
    return "\n".join(lines) + "\n"
