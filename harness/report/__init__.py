"""Reports of a run: the outcome grid (terminal, markdown, single-file HTML) and the KV plot.

    from harness.report.build import build_report; from harness.report.grid import grid_text
    rep = build_report(run)                   # grids + analysis + plot, once
    Path("r.html").write_text(rep.html()); print(rep.markdown()); print(grid_text(run_dir))
"""
