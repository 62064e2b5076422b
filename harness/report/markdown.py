"""The report as GitHub-flavoured markdown, for a CI job summary (`>> $GITHUB_STEP_SUMMARY`): the grids as tables,
then the KV analysis. Images are not inlined (job summaries do not show data: URLs); pass `--plot FILE` to link one.
Every value (ids, axis keys and values, the matrix name, notes) is text or a code span by harness.escape: no
tag, link or control character of a value reaches the page."""

from __future__ import annotations

from harness.analysis.fit import Analysis, Severity, no_cells
from harness.escape import md_code, md_text
from harness.report import memory, timeline
from harness.report.grid import Grid, expectation_mark, key_numbers, numbers_legend, outcome_counts
from harness.results.model import RunResult
from harness.units import fmt_bytes
from harness.verdict import Outcome, Reason

BADGE: dict[str, str] = {Outcome.booted: "🟢", Outcome.refused: "🟡", Outcome.crashed: "🔴",
                         Outcome.timeout: "🟣", Outcome.error: "⛔"}


_esc = md_text


def _link(target: str) -> str:
    """The plot's path as a link destination: percent-encoded, so no space, parenthesis, `:` (no `javascript:`
    scheme), newline or control character of the path can end it early or make it another link."""
    from urllib.parse import quote

    return quote(target, safe="/._-~")


def _cell_md(g: Grid, row: str, col: tuple[str, ...]) -> str:
    k = g.at(row, col)
    if k is None:
        return "—"
    c = k.cell
    head = f"{BADGE.get(c.outcome, '')} **{_esc(c.outcome)}**"
    if c.reason and c.reason != Reason.ready:
        head += f" ({_esc(c.reason)})"
    mark = expectation_mark(c)
    if mark:
        head += f" {mark if mark == '✓' else '**' + _esc(mark) + '**'}"
    hint = [f"→ {_esc(h)}"] if (h := c.cause_hint()) else []
    return "<br>".join([head, *(_esc(n) for n in key_numbers(k)), *hint])


def _grid_md(g: Grid) -> list[str]:
    lines = [f"### {_esc(g.title)}", ""]
    lines.append("| " + " | ".join([_esc(g.row_axis or ""), *(_esc(g.col_label(c)) for c in g.cols)]) + " |")
    lines.append("|" + "---:|" + ":---|" * len(g.cols))
    for row in g.rows:
        lines.append("| " + " | ".join([f"**{_esc(row)}**", *(_cell_md(g, row, c) for c in g.cols)]) + " |")
    lines.append("")
    return lines


def _analysis_md(a: Analysis) -> list[str]:
    lines = [f"### KV analysis over {md_code(a.length_axis)}", ""]
    for g in a.groups:
        lines.append(f"**{_esc(g.label)}**")
        lines.append("")
        for name, line, why in g.lines():
            if line:
                lines.append(f"- {_esc(name)}: {_esc(line.describe())} — {_esc(line.method)}, max residual "
                             f"{fmt_bytes(line.max_residual)}")
            else:
                lines.append(f"- {_esc(name)}: — {_esc(why)}")
        lines.append(f"- crossover: {_esc(g.cross.text)}")
        for f in g.floors:
            est = f"vLLM's estimated max length {f.vllm_estimate:,}" if f.vllm_estimate else "no vLLM estimate"
            fit = f", fitted {f.fitted_max_len:,}" if f.fitted_max_len is not None else ""
            if f.floor_bytes is not None:
                paste = " or ".join(md_code(p) for p in f.paste())
                lines.append(f"- floor for {md_code(f.cell_id)}: {fmt_bytes(f.floor_bytes)} → {paste} "
                             f"({_esc(f.basis)}; {_esc(est)}{_esc(fit)})")
            else:
                lines.append(f"- floor for {md_code(f.cell_id)}: unknown — {_esc(f.basis)}")
        for fd in g.findings:
            icon = "⚠️ " if fd.severity == Severity.inconsistent else ""
            who = f"{md_code(fd.cell_id)}: " if fd.cell_id else ""
            lines.append(f"- {icon}{fd.severity}: {who}{_esc(fd.text)}")
        lines.append("")
    return lines


def render_markdown(run: RunResult, grids: list[Grid], analysis: Analysis | None, plot_link: str | None = None,
                    notes: list[str] | None = None) -> str:
    s = run.summary
    lines = [f"## boot-harness report: {md_code(run.run_id)}", "",
             f"matrix **{_esc(run.matrix.name)}** · runtime {_esc(run.runtime)} · {_esc(run.status)} · "
             f"{s.get('cells', len(run.cells))} cells: {outcome_counts(s)} — **{s.get('mismatched', 0)} mismatched**",
             ""]
    if (empty := no_cells(run)) is not None:
        lines += [f"_{_esc(empty)}_", ""]
    for g in grids:
        lines += _grid_md(g)
    if grids:
        lines += [f"<sub>{numbers_legend(run)}</sub>", ""]  # the harness's own words: its `analyze` a code span
    if plot_link:
        lines += [f"![KV need and cap against max_model_len]({_link(plot_link)})", ""]
    lines += timeline.markdown(run)
    lines += memory.markdown(run)
    if analysis is not None:
        lines += _analysis_md(analysis)
    for n in notes or []:
        lines += [f"> {_esc(n)}", ""]
    return "\n".join(lines).rstrip() + "\n"
