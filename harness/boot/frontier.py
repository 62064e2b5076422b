"""`boot-harness frontier`, the booting half: each group's probes booted for real through a RunSession (an ordinary
run directory named `<matrix>-frontier`, plus frontier.json), with the pure search of harness.analysis.frontier
deciding which length to boot next."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from harness.analysis.frontier import Answer, GroupFrontier, find_frontier, known_from_run
from harness.analysis.kv import block_size
from harness.boot.session import RunOptions, RunSession, frontier_run_id
from harness.errors import Interrupted, UsageError
from harness.matrix.cells import groups_by, vary
from harness.predict.plan import Logged, plan_cells
from harness.predict.predictor import GPU_BLOCK
from harness.predict.serve_flags import flag_dest, flag_value, option_name, spelling_of
from harness.results.model import RunStatus
from harness.results.store import atomic_write_text, dump_json
from harness.units import human_int


def matrix_length_axis(matrix, override: str | None = None) -> tuple[str, str]:
    """(axis name, flag) of a matrix's max_model_len axis: `override`, an axis whose flag vLLM reads as max_model_len
    (`--max-model-len`, `--max_model_len`, `--max-model`: serve_flags.flag_dest), or one named max_model_len (whose
    values then pass --max-model-len)."""
    from harness.matrix.model import FlagAxis

    names = list(matrix.axes)
    length_flag = option_name("max_model_len")
    if override:
        if override not in matrix.axes:
            raise UsageError(f"--axis {override}: the matrix has no such axis (axes are: {', '.join(names)})")
        ax = matrix.axes[override]
        return override, ax.flag if isinstance(ax, FlagAxis) else length_flag
    for n, ax in matrix.axes.items():
        if isinstance(ax, FlagAxis) and flag_dest(ax.flag) == "max_model_len":
            return n, ax.flag
    for n, ax in matrix.axes.items():
        if n.replace("-", "_").lower() == "max_model_len":
            return n, ax.flag if isinstance(ax, FlagAxis) else length_flag
    raise UsageError(f"the matrix has no max_model_len axis (axes are: {', '.join(names)}); name it with --axis")


def _spelling(argv: list[str], flag: str) -> str | None:
    """The argument of argv a probe sets: the last one vLLM reads as `flag`'s dest (the spelling may differ from the
    axis's, `--max_model_len=8k` for `--max-model-len`); a flag no KV dest has is looked for as written."""
    dest = flag_dest(flag)
    if dest is not None:
        return spelling_of(argv, dest)
    return flag if any(token.partition("=")[0] == flag for token in argv) else None


def predicted_frontier(session: RunSession, cell, axis: str, from_run, platform: str | None) -> int | None:
    """The longest length the predictor says boots, for `cell` at the search's upper bound: the bound itself when it
    fits, else vLLM's estimate as predicted; None when the model or the KV pool is unknown before booting."""
    if session.runtime is None:
        return None
    # an earlier run's cell of the same group tells the pool, the device and the version
    before = next((c for c in from_run.cells if all(c.axes.get(k) == v for k, v in cell.axes.items() if k != axis)),
                  None) if from_run is not None else None
    prior = {cell.id: Logged(before.kv, before.refusal, before.vllm_version)} if before else None
    planned = plan_cells([cell], session.runtime.read_server_file, prior, platform)[0]
    p = planned.record.prediction
    if p is None or p.fits is None or p.unmodelled:
        return None
    return p.max_model_len if p.fits else (p.estimated_max_model_len or None)


def run_frontier(loaded, cells: list, *, lo: int | None, hi: int | None, axis: str | None = None,
                 results_dir: Path, block: int | None = None, selection: list[str] | None = None,
                 timeout_s: float | None = None, from_run=None, say: Callable[[str], None] = print,
                 predict: bool = True, platform: str | None = None, runtime=None):
    """Boot probes for each group of `cells` until its frontier is found, starting from the predicted frontier
    (`predict`; harness.predict). Returns (run dir, [GroupFrontier])."""
    matrix = loaded.matrix
    axis, flag = matrix_length_axis(matrix, axis)
    groups = groups_by(cells, axis)
    spellings: dict[str, str] = {}
    for _, members in groups:
        spelt = _spelling(members[0].server_args, flag)
        if spelt is None:
            raise UsageError(f"cell {members[0].id} passes no {flag}: the frontier needs the length on the command "
                             "line")
        spellings[members[0].id] = spelt
    session = RunSession.open(loaded, [m[0] for _, m in groups],
                              RunOptions(results_dir=results_dir, selection=selection, timeout_s=timeout_s,
                                         run_id=frontier_run_id(loaded)), runtime=runtime, say=say)
    say(f"run directory: {session.run_dir}")
    found: list[GroupFrontier] = []
    for key, members in groups:
        template = members[0]
        written = spellings[template.id]
        values = [v for c in members if (v := human_int(c.axes[axis]))]
        g_hi = hi if hi is not None else max(values, default=0)
        given = flag_value(template.server_args, "block_size")
        explicit_block = block or (given if isinstance(given, int) and given > 0 else None)
        state: dict[str, Any] = {"block": explicit_block or GPU_BLOCK, "fixed": explicit_block is not None}
        label = ", ".join(f"{k}={v}" for k, v in key.items())

        def oracle(length: int, why: str, template=template, state=state, label=label, written=written) -> Answer:
            cell = vary(template, matrix, axis, written, str(length))
            say(f"[{label}] probe {length:,} ({why}): booting {cell.id}")
            result = session.boot(cell)
            if result is None:
                raise Interrupted("the probe was stopped")
            if not state["fixed"]:
                state["block"], _ = block_size(result)
                state["fixed"] = True
            obs = Answer.of(result)
            est = f", estimated max {obs.estimate:,}" if obs.estimate else ""
            say(f"[{label}] {length:,}: {result.outcome} ({result.reason}{est}) in "
                f"{result.timings.total_s or 0:.0f}s")
            return obs

        known = known_from_run(from_run, axis, key) if from_run is not None else []
        start = predicted_frontier(session, vary(template, matrix, axis, written, str(g_hi)), axis, from_run,
                                   platform) \
            if predict else None
        if start is not None:
            say(f"[{label}] predicted frontier {start:,} (config.json + flags): probing it first")
        search = find_frontier(oracle, lo, g_hi, partial(state.__getitem__, "block"), known=known,
                               predicted=start)
        found.append(GroupFrontier(key, template.id, search))
        say(f"[{label}] {search.text} — {search.boots} boot(s)")
    atomic_write_text(session.run_dir / "frontier.json", dump_json(
        {"run_id": session.store.run.run_id, "axis": axis, "flag": flag,
         "groups": [g.output().model_dump(mode="json") for g in found]}),
        session.run_dir)
    session.finish(RunStatus.complete)
    return session.run_dir, found
