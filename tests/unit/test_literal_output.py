"""What the user wrote prints as written: ids, axis values, paths, env values, image and model names that look like
rich markup (`[analysis]`, `[bold]`, `[/]`, `[red]x[/red]`) or an emoji code come out verbatim from every command,
through a pipe and at a terminal; and through a pipe (no TTY, COLUMNS unset) no id is cut or wrapped, however long."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from harness.boot.session import RunOptions, RunSession
from harness.cli import main
from harness.matrix.load import load_matrix
from harness.results.store import load_run
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import write_matrix
from tests.cli import boot_harness
from tests.synthetic import write_run

ROOT = Path(__file__).resolve().parents[2]
#: Strings rich would read as markup (and eat) or as an emoji code (and replace) if it were given the chance.
ODD = ("[analysis]", "[bold]", "[/]", "[red]x[/red]", ":thumbs_up:")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: How a console is met: a pipe as rich sizes one (80 columns), or a terminal wide enough that nothing needs folding.
MODES = {"pipe": {"COLUMNS": "80"}, "terminal": {"FORCE_COLOR": "1", "COLUMNS": "400"}}


def long_id(cell_id: str) -> str:
    """A recorded cell id of 150 characters, full of markup (no `/`: ids are file names in cells/)."""
    return f"{cell_id}-[bold]-[analysis]-[red]x[red]-:thumbs_up:-".ljust(150, "z")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    """A matrix whose axis values, env, image, model and folder are markup; its run (all boot) and a second run
    where one cell refuses; copies of both whose cell ids are long_id()s."""
    base = tmp_path_factory.mktemp("lit")
    doc = {"name": "lit", "command": ["fake-vllm"], "model": "m[red]x[/red]", "timeout_s": 10, "linger_s": 0.1,
           "env": {"NOTE": "[bold]note[/]"},
           "axes": {"max_model_len": {"flag": "--max-model-len", "values": ["2048", "4096"]},
                    "v": {"[analysis]": {"env": {"E": "[red]x[/red]"}}, "[/]": {}}},
           "expect": [{"outcome": "booted"}]}
    matrix = write_matrix(base / "m[bold]x[/]" / "m.yaml", doc)
    # The same on containers, for the image names (`cells` reads them; nothing here asks an engine about them)
    doc = {**doc, "runtime": "docker", "image": "img[analysis]:1", "axes": {
        **doc["axes"], "v": {"[analysis]": {"env": {"E": "[red]x[/red]"}}, "[/]": {"image": "other[bold]:2"}}}}
    doc.pop("command")
    write_matrix(base / "m[bold]x[/]" / "docker.yaml", doc)
    loaded = load_matrix(matrix)
    cells = list(loaded.cells)
    refuses = next(c.id for c in cells if c.axes == {"max_model_len": "4096", "v": "[analysis]"})
    results = base / "r[bold]x[/]"
    runs = []
    for scripts in ({}, {refuses: Script.refused_kv(4096, 0.02, 0.01, 3072)}):
        session = RunSession.open(loaded, cells, RunOptions(results_dir=results),
                                  runtime=FakeRuntime(scripts, default=Script.booted()))
        session.run()
        session.finish()
        runs.append(session.run_dir)
    long = []
    for run_dir in runs:
        run, _ = load_run(run_dir)
        renamed = [c.model_copy(update={"cell_id": long_id(c.cell_id)}) for c in run.cells]
        long.append(write_run(run.model_copy(update={"cells": renamed}), base / "ids[/]"))
    return {"base": base, "matrix": matrix, "a": runs[0], "b": runs[1], "long_a": long[0], "long_b": long[1]}


@pytest.fixture(params=list(MODES))
def cli(request, monkeypatch, capsys):
    """`boot-harness ARGV` in this process on the FakeRuntime: (exit code, stdout, stderr), ANSI stripped."""
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in MODES[request.param].items():
        monkeypatch.setenv(name, value)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main([str(a) for a in argv], runtimes=lambda loaded: FakeRuntime())
        out = capsys.readouterr()
        return code, ANSI.sub("", out.out), ANSI.sub("", out.err)

    run.mode = request.param
    return run


def whole(text: str, *needles: str, cut: str = "…") -> None:
    """Every needle appears in `text` as written, each of its words whole on one line (a line may wrap at its spaces
    through a pipe, never inside an id, a path or a value), and nothing was cut with an ellipsis."""
    lines = text.splitlines()
    words = " ".join(text.split())
    for n in needles:
        assert " ".join(n.split()) in words, f"{n!r} is not in:\n{text}"
        for w in n.split():
            assert any(w in line for line in lines), f"{w!r} (of {n!r}) is not whole on one line of:\n{text}"
    assert not cut or cut not in text, text


def test_matrix_commands_print_paths_values_env_and_images_as_written(world, cli):
    m = world["matrix"]
    code, out, _ = cli("validate", "--matrix", m)
    assert code == 0
    whole(out, f"{m}: ok — 4 cells on 2 axes")
    code, out, _ = cli("cells", "--matrix", m.with_name("docker.yaml"), "--json")
    records = json.loads(out)["cells"]
    assert {r["axes"]["v"] for r in records} == {"[analysis]", "[/]"}
    assert {r["image"] for r in records} == {"img[analysis]:1", "other[bold]:2"}
    assert all(r["env"]["NOTE"] == "[bold]note[/]" for r in records)
    assert "[red]x[/red]" in {r["env"].get("E") for r in records}
    code, out, _ = cli("plan", "--matrix", m)
    whole(out, "m[red]x[/red]: no config.json")
    code, _, err = cli("repro", "--matrix", m, "nope[bold]x[/]")
    assert code == 2
    whole(err, f"{m}: no cell 'nope[bold]x[/]'", f"`boot-harness cells --matrix {m}`")
    bad = write_matrix(world["base"] / "[bold]bad[/]" / "m.yaml", {"name": "bad", "model": "m", "[bold]x": 1,
                                                                   "axes": {"a": {"flag": "--x", "values": [1]}}})
    code, _, err = cli("validate", "--matrix", bad)
    assert code == 2
    whole(err, f"{bad}:[bold]x: unknown key")


def test_run_and_frontier_print_their_directories_as_written(world, cli, tmp_path):
    results = tmp_path / f"[red]x[/red]{cli.mode}"
    code, out, err = cli("run", "--matrix", world["matrix"], "--results-dir", results)
    assert code == 0, err
    (run_dir,) = results.iterdir()
    # at 80 columns the label and a path wider than the rest of its line go on two (issue 42): the path whole
    whole(err, "run directory:", str(run_dir), cut="")  # the live table's `12.0 s …` is a clock, not a cut
    whole(out, "results:", str(run_dir / "results.json"))  # a label and its path: one line where both fit
    code, out, err = cli("frontier", "--matrix", world["matrix"], "--select", "v=[analysis]", "--hi", "4096",
                         "--no-prediction", "--results-dir", results)
    assert code == 0, err
    whole(out, "v=[analysis]", "frontier", f"({results}")


def test_reading_commands_print_long_markup_ids_and_values_whole(world, cli, tmp_path, monkeypatch):
    a, b = world["long_a"], world["long_b"]
    ids = [c.cell_id for c in load_run(b)[0].cells]
    refused = next(i for i in ids if i.startswith("mml4096-v_analysis"))
    assert all(len(i) == 150 for i in ids)

    code, out, _ = cli("check", b)
    assert code == 1
    whole(out, refused, f"{b}: FAIL")
    code, out, _ = cli("analyze", b)
    assert code == 0
    whole(out, *ids, "v=[analysis]", "v=[/]", "floor for")
    code, out, _ = cli("compare", b, "--axis", "v")
    whole(out, "v=[analysis]", "refused (kv_cache_too_small)", "v=[/]", f"  {refused}")
    code, out, _ = cli("compare", a, b)
    assert code == 1
    whole(out, refused)
    merged = tmp_path / "out[bold]x[/]"
    code, out, _ = cli("merge", world["a"], "--out", merged)  # a run of the matrix: merge refuses cells it has not
    whole(out, f"{merged}:", str(merged / "results.json"))

    monkeypatch.setattr("harness.report.plot.available", lambda: False)
    code, out, err = cli("report", b, "--html", tmp_path / "r[bold].html")
    assert code == 0, err
    whole(out, "[analysis]", "[/]", "note: matplotlib is not installed:", "'.[analysis]'")
    whole(err, f"html: {tmp_path / 'r[bold].html'}")


def test_facts_and_kv_print_paths_and_log_text_as_written(tmp_path, cli):
    log = tmp_path / "logs[bold]" / "server[/].log"  # a `/` in a path is a folder: the text is still the path's
    log.parent.mkdir(parents=True)
    log.write_text(Script.refused_kv(4096, 0.02, 0.01, 3072).lines[0] + " see [red]x[/red] :thumbs_up:\n")
    code, out, _ = cli("facts", log)
    assert code == 0
    whole(out, f"{log}  vLLM ?", "  refusal: kv_cache_too_small", "see [red]x[/red] :thumbs_up:")
    model = tmp_path / "model[analysis]"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 4096, "torch_dtype": "float16",
        "vocab_size": 100, "intermediate_size": 128}))
    code, out, _ = cli("kv", model, "--available-bytes", "4M", "--", "--max-model-len", "4096")
    assert code == 0
    whole(out, f"{model / 'config.json'}: vLLM ")


def test_gc_names_what_it_removed_as_written_and_its_summary_is_one_line(tmp_path, cli, monkeypatch):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    work = tmp_path / "res[bold]" / "run[analysis]" / "work" / "[red]x[red]"
    work.mkdir(parents=True)
    (work / ".owner.json").write_text(json.dumps({"pid": int(dead.stdout), "host": socket.gethostname()}))
    monkeypatch.setattr("harness.runtime.engine.DEFAULT_HOSTS", {})  # no engine: the machine's containers stay
    code, out, _ = cli("gc", "--results-dir", tmp_path / "res[bold]")
    assert code == 0 and not work.exists()
    summary = ("gc: 0 container(s), 0 process group(s), 0 other process(es), 1 work dir(s) removed (engines swept: "
               "none answered)")
    lines = out.splitlines()
    assert lines[0] == f"removed work dir {work}" or lines[:2] == ["removed work dir", f"  {work}"], lines
    # through a pipe at COLUMNS=80 the summary is wrapped at spaces (issue 42); at a terminal of 400 one line
    assert " ".join(s.strip() for s in lines[1 + (lines[1] == f"  {work}"):]) == summary, lines
    assert all(len(s) <= 80 for s in lines if str(work) not in s) or cli.mode == "terminal"


def test_the_live_table_the_summary_and_the_grid_show_markup_ids_as_written_at_a_terminal(world):
    from harness.report.grid import grid_text
    from harness.report.progress import LiveProgress, print_summary

    run, _ = load_run(world["long_b"])
    template = list(load_matrix(world["matrix"]).cells)[0]
    cells = [dataclasses.replace(template, id=c.cell_id) for c in run.cells]
    buf = io.StringIO()
    console = Console(file=buf, width=400, force_terminal=True, color_system="standard")
    progress = LiveProgress(cells, console)
    for cell, result in zip(cells, run.cells, strict=False):
        progress.cell_started(cell)
        progress.cell_finished(cell, result)
    console.print(progress)
    print_summary(run, console)
    text = ANSI.sub("", buf.getvalue() + grid_text(run, width=400, color=True))
    whole(text, *(c.cell_id for c in run.cells), "[analysis]", "[/]")


def test_through_a_pipe_with_columns_unset_no_150_character_id_is_cut_or_wrapped(world):
    """As a CI log reads it: a child process, stdout and stderr pipes, no TTY on stdin either, COLUMNS unset."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE")}
    ids = [c.cell_id for c in load_run(world["long_b"])[0].cells]

    def cli(*argv) -> str:
        proc = boot_harness(*argv, env=env, inherit_env=False, stdin=subprocess.DEVNULL, timeout=120)
        assert proc.returncode in (0, 1), proc.stderr
        return proc.stdout

    whole(cli("analyze", world["long_b"]), *ids)
    whole(cli("compare", world["long_a"], world["long_b"]), next(i for i in ids if i.startswith("mml4096-v_analysis")))
    whole(cli("check", world["long_b"]), next(i for i in ids if i.startswith("mml4096-v_analysis")))
