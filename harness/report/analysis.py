"""`boot-harness analyze` as a rich renderable: the fitted lines, crossover, floors and findings per group."""

from __future__ import annotations

from harness.analysis.fit import Analysis, Line, Severity
from harness.units import fmt_bytes


def _line_text(line: Line | None, why: str) -> str:
    return line.describe() if line else f"— {why}"


def render(analysis: Analysis):
    """Rich renderables, one block per group."""
    from rich.console import Group
    from rich.text import Text

    from harness.report.text import PlainTable, Prose, literal

    blocks: list = [literal(f"run {analysis.run_id}: {len(analysis.groups)} group(s) over {analysis.length_axis}",
                         style="bold")]
    for g in analysis.groups:
        blocks.append(Text(""))
        blocks.append(literal(f"▸ {g.label}   (block {g.block} tokens: {g.block_source})", style="bold cyan"))
        t = PlainTable(show_header=True, header_style="bold", box=None, pad_edge=False)
        for col in ("line", "fit", "how", "max |residual|"):
            t.add_column(col)
        for name, line, why in g.lines():
            t.add_row(name, _line_text(line, why), line.method if line else "",
                      fmt_bytes(line.max_residual) if line and line.points else "")
        blocks.append(t)
        inputs = PlainTable(show_header=True, header_style="dim", box=None, pad_edge=False, title_justify="left")
        for col in ("cell", "length", "outcome", "cap", "need", "need from", "residual"):
            inputs.add_column(col, justify="right" if col in ("length", "cap", "need", "residual") else "left",
                              id=col == "cell", drop={"residual": 2, "need from": 1}.get(col))
        resid = {}
        for line, tag in ((g.need_line, "need"), (g.cap_line, "cap")):
            for p in (line.points if line else []):
                resid[(p.cell_id, tag)] = p.residual
        for c in g.cells:
            res = [fmt_bytes(resid[(c.cell_id, t)], signed=True) for t in ("need", "cap") if (c.cell_id, t) in resid]
            inputs.add_row(c.cell_id, f"{c.length:,}" if c.length else "?", c.outcome,
                           c.cap.shown() if c.cap else "—", c.need.shown() if c.need else "—",
                           c.need.where if c.need else "", " / ".join(res))
        blocks.append(inputs)
        blocks.append(literal(f"crossover: {g.cross.text}"))
        for f in g.floors:
            est = f"vLLM's estimated max length {f.vllm_estimate:,}" if f.vllm_estimate else "no vLLM estimate"
            fit = f", fitted {f.fitted_max_len:,}" if f.fitted_max_len is not None else ""
            if f.floor_bytes is not None:
                # the flags to paste are never broken across lines
                blocks.append(Prose(f"floor for {f.cell_id}: {fmt_bytes(f.floor_bytes)} → "
                                    f"{'  or  '.join(f.paste())}   ({f.basis}; {est}{fit})", keep=tuple(f.paste())))
            else:
                blocks.append(literal(f"floor for {f.cell_id}: unknown — {f.basis} ({est}{fit})"))
            for n in f.notes:
                blocks.append(literal(f"    note: {n}", style="dim"))
        for fd in g.findings:
            style = {Severity.inconsistent: "bold red", Severity.warning: "yellow"}.get(fd.severity, "dim")
            blocks.append(literal(f"{fd.severity}: {fd.cell_id + ': ' if fd.cell_id else ''}{fd.text}", style=style))
    return Group(*blocks)
