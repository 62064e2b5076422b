"""The CLI as people and CI logs read it: through a pipe every event is one whole line with the whole cell id and its
verdict, the summary never cuts an id, sizes print in the unit that fits, each cell has one labelled time, every
wrong input is one line and exit 2, `validate` lists every mistake, and the help says what, how and which exit code."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.boot.session import RunOptions, RunSession
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.runtime.fake import FakeRuntime, Script
from harness.units import fmt_bytes
from tests.builders import write_matrix
from tests.cli import STANDIN_CLI, boot_harness

ROOT = Path(__file__).resolve().parents[2]


def long_matrix(tmp_path: Path) -> Path:
    return write_matrix(tmp_path / "long.yaml", {
        "name": "long-names", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
        "axes": {"speculative_decoding_configuration": {"draft_model_with_two_speculative_tokens": {},
                                                        "ngram_prompt_lookup_with_four_tokens": {}},
                 "kv_cache_memory_budget_in_bytes": {"three_mebibytes_tight_budget": {},
                                                     "ten_mebibytes_raised_budget": {}}},
        "expect": [{"outcome": "booted"}]})


def joined(text: str) -> list[str]:
    """Wrapped lines joined again: a line that starts with two spaces goes on the one before."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def test_a_piped_run_log_keeps_every_long_id_whole_with_its_verdict_on_one_line(tmp_path):
    m = long_matrix(tmp_path)
    ids = [c.id for c in list(load_matrix(m).cells)]
    assert all(len(i) > 60 for i in ids), "ids whose event lines are far longer than a pipe's 80 columns"
    proc = boot_harness("run", "--matrix", m, "--results-dir", tmp_path / "r", program=STANDIN_CLI)
    assert proc.returncode == 0, proc.stderr
    # through a pipe stdout is held to 120 columns (COLUMNS unset; issue 42): a summary row goes on, indented, on the
    # lines below its first, which holds the id and its verdict; an event on stderr is one line to grep
    # within the width but for one word wider than it (a path, alone on its line)
    assert all(len(s) <= 120 or len(s.split()) == 1 for s in proc.stdout.splitlines()), proc.stdout
    events, rows = proc.stderr.splitlines(), joined(proc.stdout)
    for cell_id in ids:
        assert f"{cell_id} booting" in events
        (line,) = [e for e in events if e.startswith(f"{cell_id} booted")]
        assert line.startswith(f"{cell_id} booted (ready) — verdict ") and " s after start, teardown " in line
        assert line.endswith(" — matched")
        (row,) = [s for s in rows if s.startswith(cell_id)]
        assert row.startswith(f"{cell_id}: booted (ready) — matched — KV needed")
        assert any(s.startswith(f"{cell_id}: booted (ready)") for s in proc.stdout.splitlines())
    assert any(s.startswith("run directory: ") and s.endswith("(4 of 4 cells to boot)") for s in events)


def test_sizes_print_in_the_unit_that_fits_the_value_never_0_gib(tmp_path):
    assert [fmt_bytes(b) for b in (3145728, 512, 2 * 1024**3, 4456448, 0)] == [
        "3.00 MiB", "512 B", "2.00 GiB", "4.25 MiB", "0 B"]
    m = write_matrix(tmp_path / "m.yaml", {
        "name": "tight", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
        "args": ["--max-model-len", "2048", "--kv-cache-memory-bytes", "3145728"], "axes": {"spec": {"draft": {}}}})
    loaded = load_matrix(m)
    session = RunSession.open(loaded, list(loaded.cells), RunOptions(results_dir=tmp_path / "r"),
                              runtime=FakeRuntime(default=Script.refused_kv(2048, 0.0, 0.0, 1408)))
    session.run()
    from harness.report.progress import summary

    text = summary(session.finish(), Console(file=io.StringIO()))
    assert "KV pool 3.00 MiB" in text and re.search(r"KV needed ≈4\.\d\d MiB", text) and " 0 GiB" not in text


def test_one_time_per_cell_is_labelled_the_teardown_apart(tmp_path):
    from harness.report.progress import event_line
    from harness.results.model import CellResult, Timings

    cell = list(load_matrix(long_matrix(tmp_path)).cells)[0]
    r = CellResult(cell_id=cell.id, axes=cell.axes, runtime="fake", argv=[], env={}, outcome="booted",
                   reason="ready", timings=Timings(verdict_s=38.1, total_s=43.8))
    assert event_line(cell, r) == f"{cell.id} booted (ready) — verdict 38.1 s after start, teardown 5.7 s — " \
                                  "no expectation"


@pytest.fixture(scope="module")
def a_run(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("run")
    m = long_matrix(base)
    loaded = load_matrix(m)
    session = RunSession.open(loaded, list(loaded.cells), RunOptions(results_dir=base / "r"),
                              runtime=FakeRuntime())
    session.run()
    session.finish()
    return session.run_dir


@pytest.mark.parametrize("command", ["report", "analyze", "compare", "check"])
@pytest.mark.parametrize("what", ["cell json", "log file", "missing", "results.json's folder's file"])
def test_a_run_command_given_something_else_is_one_line_exit_2(command, what, a_run, capsys):
    target = {"cell json": next((a_run / "cells").iterdir()), "log file": next((a_run / "logs").iterdir()),
              "missing": a_run / "nope", "results.json's folder's file": a_run / "summary.txt"}[what]
    assert main([command, str(target)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and str(target) in err[0] and "Traceback" not in err[0], err


def test_report_html_onto_a_directory_is_one_line_exit_2(a_run, tmp_path, capsys):
    assert main(["report", str(a_run), "--html", str(tmp_path)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == f"--html {tmp_path}: is a directory; give the file to write"


@pytest.mark.parametrize(("argv", "says"), [
    (["run", "--matrix", "matrix.yaml", "--dry"], "unrecognized argument --dry; did you mean --dry-run?"),
    (["run", "--matrix", "matrix.yaml", "--parallel", "abc", "--dry-run"], "--parallel 'abc': expected auto or"),
    (["run", "--matirx", "matrix.yaml"], "boot-harness run: unrecognized argument --matirx; did you mean --matrix?"),
    (["report"], "boot-harness report: the following arguments are required: RUN"),
    (["cells", "--matrix", "matrix.yaml", "--select", "mtp=mtp5"], "did you mean 'mtp4'?"),
])
def test_every_wrong_input_is_one_line_exit_2(argv, says, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert says in line


def test_validate_lists_every_mistake_of_a_file_one_line_each(tmp_path):
    m = write_matrix(tmp_path / "bad.yaml", {
        "name": "bad", "timeout": 5, "axes": {"a": {"flag": "--x", "value": [1]}, "b": {"v": {"arg": ["--y"]}}}})
    proc = boot_harness("validate", "--matrix", m)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert sorted(lines) == sorted([
        f"{m}:timeout: unknown key (did you mean 'timeout_s'?)",
        f"{m}:axes.a.value: unknown key (did you mean 'values', which is required?)",
        f"{m}:axes.b.v.arg: unknown key (did you mean 'args'?)"]), lines


def test_repro_of_an_excluded_or_misspelt_cell_says_which_and_suggests(capsys, vllm_cpu_or_placeholders):
    example = str(ROOT / "examples" / "cpu-tiny.yaml")
    assert main(["repro", "--matrix", example, "mml2048-spec_off-kv_raised"]) == 2
    assert "is excluded by exclude[0]" in capsys.readouterr().err
    assert main(["repro", "--matrix", example, "mml2048-spec_draft-kv_tigh"]) == 2
    assert "did you mean 'mml2048-spec_draft-kv_tight'" in capsys.readouterr().err


@pytest.fixture
def vllm_cpu_or_placeholders(monkeypatch):
    """The CPU example's variables, set to anything: repro's id checks come before its runtime is needed."""
    monkeypatch.setenv("VLLM_CPU_VENV", os.environ.get("VLLM_CPU_VENV", "/nonexistent"))
    monkeypatch.setenv("TINY_MODELS", os.environ.get("TINY_MODELS", "/nonexistent"))


def test_read_only_commands_work_on_the_cpu_example_without_setup_or_name_the_script(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_CPU_VENV", "TINY_MODELS")}
    listing = boot_harness("cells", "--matrix", "examples/cpu-tiny.yaml", env=env, inherit_env=False)
    assert listing.returncode == 0 and len(listing.stdout.split()) == 6
    assert "scripts/setup-cpu-example.sh" in listing.stderr and "not set, shown as <NAME>" in listing.stderr
    check = boot_harness("validate", "--matrix", "examples/cpu-tiny.yaml", env=env, inherit_env=False)
    assert check.returncode == 0 and check.stdout.startswith("examples/cpu-tiny.yaml: ok — 6 cells")
    assert check.stderr == listing.stderr  # the same note, naming the variables and the script
    run = boot_harness("run", "--matrix", "examples/cpu-tiny.yaml", "--results-dir", tmp_path, env=env,
                       inherit_env=False)
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert "VLLM_CPU_VENV, TINY_MODELS are not set" in run.stderr
    assert run.stderr.rstrip().endswith("set them up with: . \"$(bash scripts/setup-cpu-example.sh | tail -1)\"")
    assert not list(tmp_path.iterdir())


def test_analyze_says_below_as_its_json_does_and_suggests_no_patch_variable_where_there_is_no_patch():
    from harness.analysis.fit import analyze_run
    from tests.synthetic import cpu_example_run

    analysis = analyze_run(cpu_example_run())
    crossings = [g.cross for g in analysis.groups if g.cross.kind == "below"]
    assert crossings and all(not c.text.startswith("never") and "up to" in c.text for c in crossings)
    floors = [f for g in analysis.groups for f in g.floors if f.floor_bytes]
    assert floors and all(p.startswith("--kv-cache-memory-bytes") for f in floors for p in f.paste())


def test_every_command_says_what_it_is_for_how_it_is_used_and_its_exit_codes():
    from harness.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, sub in commands.items():
        text = sub.format_help()
        assert sub.description and "examples:" in text and "exit codes:" in text and "  2 " in text, name
        assert all(a.help for a in sub._actions), (name, [a.dest for a in sub._actions if not a.help])
    assert "exit codes:" in parser.format_help()


@pytest.mark.slow  # ~45 s: every documented command, each a fresh interpreter
def test_the_commands_the_docs_show_run_as_written():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "check-docs.py")], capture_output=True, text=True,
                          timeout=1200,
                          env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert proc.stdout.count("\nok ") + proc.stdout.startswith("ok ") >= 15


WORDS = st.sampled_from(["run", "cells", "validate", "repro", "report", "analyze", "compare", "check", "facts",
                         "merge", "gc", "frontier", "--matrix", "-m", "--select", "--shard", "--parallel",
                         "--results-dir", "--resume", "--dry-run", "--json", "--html", "--out", "--axis",
                         "--timeout-s", "--port", "--hi", "--lo", "1/2", "0/0", "auto", "-1", "nan", "abc", "",
                         "matrix.yaml", "README.md", "results", "/nonexistent", "examples", "mml2048", "--", "-x"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(WORDS, max_size=6))
def test_no_argument_shape_ends_in_a_traceback(capsys, tmp_path_factory, monkeypatch, argv):
    """Whatever is typed: exit 0, 1 or 2 (with one or more lines on stderr), never a traceback. Booting commands
    meet the fake runtime; results land in a temporary directory."""
    monkeypatch.chdir(ROOT)
    if "--results-dir" not in argv and argv[:1] in (["run"], ["frontier"], ["repro"]):
        argv = [*argv, "--results-dir", str(tmp_path_factory.mktemp("fuzz"))]
    argv = [a if a != "results" else str(tmp_path_factory.mktemp("res")) for a in argv]
    try:
        code = main(argv, runtimes=lambda loaded: FakeRuntime())
    except SystemExit as exc:  # --help / --version
        code = exc.code
    out = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code)
    assert "Traceback" not in out.err, (argv, out.err)
    if code == 2:
        assert out.err.strip(), argv


def test_at_a_terminal_the_summary_table_wraps_long_ids_inside_their_column_and_cuts_none(a_run):
    from harness.report.progress import summary
    from harness.results.store import load_run

    run, _ = load_run(a_run)
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=True, color_system=None)
    console.print(summary(run, console))
    text = buf.getvalue()
    assert "…" not in text
    first_column = "".join(line.split("│")[1].strip() for line in text.splitlines() if line.startswith("│"))
    assert all(c.cell_id in first_column for c in run.cells), first_column
