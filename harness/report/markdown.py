"""The report as GitHub-flavoured markdown, for a CI job summary (`>> $GITHUB_STEP_SUMMARY`): the grids as tables,
then the KV analysis. Images are not inlined (job summaries do not show data: URLs); pass `--plot FILE` to link one."""

from __future__ import annotations

from harness.analysis.fit import Analysis, Severity, no_cells
from harness.units import fmt_bytes
from harness.report.grid import Grid, expectation_mark, key_numbers, numbers_legend, outcome_counts
from harness.report import memory, timeline
from harness.results.model import RunResult
from harness.verdict import Outcome, Reason

BADGE: dict[Outcome, str] = {Outcome.booted: "🟢", Outcome.refused: "🟡", Outcome.crashed: "🔴",
                             Outcome.timeout: "🟣", Outcome.error: "⛔"}


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cell_md(g: Grid, row: str, col: tuple[str, ...]) -> str:
    k = g.at(row, col)
    if k is None:
        return "—"
    c = k.cell
    head = f"{BADGE.get(c.outcome, '')} **{c.outcome}**"
    if c.reason and c.reason != Reason.ready:
        head += f" ({c.reason})"
    mark = expectation_mark(c)
    if mark:
        head += f" {mark if mark == '✓' else '**' + mark + '**'}"
    return _esc("<br>".join([head, *key_numbers(k)]))


def _grid_md(g: Grid) -> list[str]:
    lines = [f"### {g.title}", ""]
    lines.append("| " + " | ".join([_esc(g.row_axis or ""), *(_esc(g.col_label(c)) for c in g.cols)]) + " |")
    lines.append("|" + "---:|" + ":---|" * len(g.cols))
    for row in g.rows:
        lines.append("| " + " | ".join([f"**{_esc(row)}**", *(_cell_md(g, row, c) for c in g.cols)]) + " |")
    lines.append("")
    return lines


def _analysis_md(a: Analysis) -> list[str]:
    lines = [f"### KV analysis over `{a.length_axis}`", ""]
    for g in a.groups:
        lines.append(f"**{_esc(g.label)}**")
        lines.append("")
        for name, line, why in g.lines():
            if line:
                lines.append(f"- {name}: {line.describe()} — {line.method}, max residual "
                             f"{fmt_bytes(line.max_residual)}")
            else:
                lines.append(f"- {name}: — {why}")
        lines.append(f"- crossover: {g.cross.text}")
        for f in g.floors:
            est = f"vLLM's estimated max length {f.vllm_estimate:,}" if f.vllm_estimate else "no vLLM estimate"
            fit = f", fitted {f.fitted_max_len:,}" if f.fitted_max_len is not None else ""
            if f.floor_bytes is not None:
                paste = " or ".join(f"`{p}`" for p in f.paste())
                lines.append(f"- floor for `{f.cell_id}`: {fmt_bytes(f.floor_bytes)} → {paste} ({f.basis}; {est}{fit})")
            else:
                lines.append(f"- floor for `{f.cell_id}`: unknown — {f.basis}")
        for fd in g.findings:
            icon = "⚠️ " if fd.severity == Severity.inconsistent else ""
            who = f"`{fd.cell_id}`: " if fd.cell_id else ""
            lines.append(f"- {icon}{fd.severity}: {who}{_esc(fd.text)}")
        lines.append("")
    return lines


def render_markdown(run: RunResult, grids: list[Grid], analysis: Analysis | None, plot_link: str | None = None,
                    notes: list[str] | None = None) -> str:
    s = run.summary
    lines = [f"## boot-harness report: `{run.run_id}`", "",
             f"matrix **{_esc(run.matrix.name)}** · runtime {run.runtime} · {run.status} · "
             f"{s.get('cells', len(run.cells))} cells: {outcome_counts(s)} — **{s.get('mismatched', 0)} mismatched**",
             ""]
    if (empty := no_cells(run)) is not None:
        lines += [f"_{_esc(empty)}_", ""]
    for g in grids:
        lines += _grid_md(g)
    if grids:
        lines += [f"<sub>{_esc(numbers_legend(run))}</sub>", ""]
    if plot_link:
        lines += [f"![KV need and cap against max_model_len]({plot_link})", ""]
    lines += timeline.markdown(run)
    lines += memory.markdown(run)
    if analysis is not None:
        lines += _analysis_md(analysis)
    for n in notes or []:
        lines += [f"> {n}", ""]
    return "\n".join(lines).rstrip() + "\n"
