"""Issue 40, item 5: the cause and its hint go everywhere a verdict goes — run's event lines and summary, report's
grid, markdown and HTML, check's lines — from one place (CellResult.cause_hint), escaped for each output. One fake
run (FakeRuntime, scripted real refusal lines, nothing started) serves every case."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from harness.analysis.check import misses
from harness.boot.attempt import CellRunner, watch_config
from harness.boot.executor import Executor
from harness.cli import main
from harness.gpu.inventory import CpuInventory
from harness.report.progress import event_line, summary
from harness.results.model import RunStatus
from harness.results.store import RunStore
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import fake_cells

HEAD = "(EngineCore pid=1) ERROR 12-01 10:00:03 [core.py:1] "
TP = HEAD + "ValueError: Total number of attention heads (14) must be divisible by tensor parallel size (4)."
PORT = HEAD + "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use"
#: a weight name carrying a bidi override and a BEL: the hint quotes it, every output must show them as escapes
HOSTILE = HEAD + "KeyError: 'model.layers.0.mlp.experts.\u202ew2_weight\x07'"
TP_HINT = "tensor_parallel_size 4 does not divide the 14 attention heads: use 1, 2"
PORT_HINT = "port 8000 is taken"


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("everywhere")
    loaded, cells = fake_cells(tmp, values=("tp", "port", "ok", "key"),
                               expect=[{"where": {"c": "tp"}, "outcome": "refused", "reason": "tp_not_divisible"},
                                       {"where": {"c": ["key", "ok"]}, "outcome": "booted"}])
    runtime = FakeRuntime({"c_tp": Script((TP,), then="exit"), "c_port": Script((PORT,), then="exit"),
                           "c_ok": Script.booted(), "c_key": Script((HOSTILE,), then="exit")})
    store = RunStore.create(tmp / "r", loaded, runtime.name, [c.id for c in cells])
    Executor(CellRunner(loaded, runtime, store, watch_config(loaded)), CpuInventory(1), 1).run(cells)
    run = store.finish(RunStatus.complete)
    return run, store.run_dir, {c.id: c for c in cells}


def _by_id(run):
    return {r.cell_id: r for r in run.cells}


def test_the_records_carry_the_cause_and_its_hint(ran):
    cells = _by_id(ran[0])
    assert (cells["c_tp"].outcome, cells["c_tp"].reason) == ("refused", "tp_not_divisible")
    assert cells["c_tp"].cause_hint() == TP_HINT
    assert (cells["c_port"].outcome, cells["c_port"].reason) == ("error", "port_in_use")
    assert PORT_HINT in cells["c_port"].cause_hint()
    assert cells["c_ok"].cause_hint() is None


def test_runs_event_lines_and_summary_say_the_hint(ran):
    run, _, cells = ran
    by = _by_id(run)
    line = event_line(cells["c_tp"], by["c_tp"])
    assert line.endswith(f"— hint: {TP_HINT}") and "\n" not in line
    assert "hint" not in event_line(cells["c_ok"], by["c_ok"])
    hostile = event_line(cells["c_key"], by["c_key"])
    assert "\x07" not in hostile and "\u202e" not in hostile and "\\u202ew2_weight\\x07" in hostile, hostile
    piped = summary(run, Console(file=io.StringIO(), width=400))
    assert isinstance(piped, str) and TP_HINT in piped and PORT_HINT in piped and "\x07" not in piped
    out = io.StringIO()
    Console(file=out, width=400, force_terminal=True, color_system=None).print(
        summary(run, Console(file=io.StringIO(), width=400, force_terminal=True)))
    assert TP_HINT in out.getvalue() and "\x07" not in out.getvalue() and "\u202e" not in out.getvalue()


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_report_shows_each_cells_cause_and_hint(ran, capsys, monkeypatch, tmp_path, fmt):
    _, run_dir, _ = ran
    monkeypatch.setenv("COLUMNS", "400")
    html = tmp_path / "r.html"
    to = {"text": [], "markdown": ["--markdown", "-"], "html": ["--html", str(html)]}[fmt]
    code = main(["report", str(run_dir), *to])
    out = html.read_text() if fmt == "html" else capsys.readouterr().out
    assert code == 0, out
    flat = " ".join(out.split())
    assert "tp_not_divisible" in flat and "port_in_use" in flat and PORT_HINT in flat
    assert (TP_HINT if fmt != "markdown" else TP_HINT.replace("_", "\\_")) in flat or TP_HINT in flat
    assert "\x07" not in out and "\u202e" not in out


def test_check_names_the_cause_and_says_what_would_boot(ran, capsys):
    run, run_dir, _ = ran
    why = {m.cell_id: m.why for m in misses(run)}
    assert set(why) == {"c_port", "c_key"}  # c_tp was expected refused for its cause: it passes
    assert "error (port_in_use): the harness could not boot it — hint: " + "port 8000" in why["c_port"]
    # a weight name no model code has (the bidi control keeps it from the weight_loading_keyerror shape): the crash
    # names the exception that ended the boot
    assert why["c_key"].startswith("crashed (uncaught_exception), expected booted — hint: the boot ended on KeyError")
    code = main(["check", str(run_dir)])
    out = capsys.readouterr().out
    words = " ".join(out.split())  # check's lines wrap at the width, at spaces
    assert code == 1 and "port_in_use" in words and PORT_HINT in words and "\x07" not in out


def _with_cell(run, cell_id, **update):
    cells = [c.model_copy(update=update) if c.cell_id == cell_id else c for c in run.cells]
    return run.model_copy(update={"cells": cells, "run_id": run.run_id + "-b"})


def test_compare_a_change_of_cause_is_a_change_of_verdict(ran):
    from harness.analysis.compare import compare_runs

    run = ran[0]
    key = _by_id(run)["c_key"]
    other = key.cause.model_copy(update={"numbers": {**key.cause.numbers, "exception": "AttributeError"}})
    diff = compare_runs(run, _with_cell(run, "c_key", cause=other))
    assert [(c.cell_id, c.why) for c in diff.changed] == [
        ("c_key", "crashed (uncaught_exception: KeyError) → crashed (uncaught_exception: AttributeError)")]
    tp = _by_id(run)["c_tp"]
    diff = compare_runs(run, _with_cell(run, "c_tp", reason="pp_not_divisible"))
    assert [c.cell_id for c in diff.changed] == ["c_tp"]
    assert compare_runs(run, _with_cell(run, "c_tp", cause=tp.cause)).changed == []


def test_an_old_reason_name_is_the_same_verdict_as_its_cause():
    """A record written before the catalogue says kv_insufficient: it loads as kv_cache_too_small, no change."""
    from harness.results.model import CellResult

    assert CellResult.model_validate({"cell_id": "x", "axes": {}, "runtime": "fake", "argv": [], "env": {},
                                      "outcome": "refused", "reason": "kv_insufficient"}).reason == "kv_cache_too_small"


def test_history_tells_two_crashes_apart_by_their_exception(ran):
    from harness.analysis.history_runs import Entry

    base = dict(outcome="crashed", reason="uncaught_exception", axes={}, matched=None, expected=None, fingerprint={},
                kv={}, times={})
    assert Entry(**base, exception="KeyError").verdict == "crashed (uncaught_exception: KeyError)"
    assert Entry(**base, exception="KeyError").verdict != Entry(**base, exception="OSError").verdict
    assert Entry(**base).verdict == "crashed (uncaught_exception)"
