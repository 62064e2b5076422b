"""Hostile output: values that would drive a terminal or a rendered page, through every command's output.

A matrix whose flag values, env values and model carry `<script>`, `<img onerror>`, `<details open>`, a
`[l](javascript:…)` link, a backtick, `|`, an OSC 0 title, an OSC 8 hyperlink, SGR blink, BEL, CR and a C1 CSI is
booted once on the FakeRuntime, in this process; forged copies of its run carry the same in their run id, matrix name,
runtime, cell ids, axis keys, argv, env, details and memory phase names. Every command is then run over them (as
`main([...])`, output captured as a pipe gets it), and:

- no control character but \\n (and \\t) reaches stdout or stderr, from the consoles, the plain prints, the printed
  shell commands and the one-line errors alike (they are shown as `\\x1b`, `\\r`, …);
- the markdown `report` and `history` write, rendered as CommonMark with tables (markdown-it, as a job summary is),
  holds no tag, no `javascript:` link and no control character, its code spans whole (a backtick in a run id cannot
  close one early), every table row as many cells as its header;
- the JSON outputs still carry the values exactly (escaping is for display; records stay exact), and a printed shell
  word holding a control character is one the shell reads back exactly (`$'…'`).
"""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from harness.cli import main
from harness.results.store import load_run
from harness.runtime.fake import FakeRuntime, Script
from tests.builders import write_matrix
from tests.synthetic import write_run

#: Every hostile shape at once.
BAD = ("<script>alert(1)</script><img src=x onerror=alert(31)><details open>[l](javascript:alert(1))`|"
       "\x1b]0;TITLE\x07\x1b]8;;https:evil\x1b\\L\x1b]8;;\x1b\\\x1b[5mblink\x07\r\x9b2J")
#: The same without `/`: what names a folder or a file (a run id, a cell id, a path).
NAME = BAD.replace("/", "")
#: A control character a terminal acts on: anything of C0 but \n and \t, DEL, C1.
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
TAGS = re.compile(r"<\s*/?\s*(script|img|details)\b", re.I)
SECRET = "hf_EsCaPe1234567890"


def run_cli(capsys, monkeypatch, *argv, env: dict[str, str] | None = None, runtime=None) -> tuple[int, str, str]:
    """`boot-harness ARGV` in this process as a pipe meets it: (exit code, stdout, stderr)."""
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
        monkeypatch.delenv(name, raising=False)
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = main([str(a) for a in argv], runtimes=lambda loaded: runtime or FakeRuntime())
    out = capsys.readouterr()
    return code, out.out, out.err


def terminal_safe(text: str) -> None:
    found = CONTROL.search(text)
    if found is not None:
        around = text[max(0, found.start() - 200):found.end() + 80]
        pytest.fail(f"{found.group()!r} reached the terminal: …{around!r}")


def rendered(md: str) -> str:
    """The markdown as a job summary shows it (CommonMark and GFM tables), after checking the source is clean."""
    from markdown_it import MarkdownIt

    terminal_safe(md)
    assert not TAGS.search(md), f"a raw tag in the file: {TAGS.search(md)}"
    page = MarkdownIt("commonmark").enable("table").render(md)
    assert not TAGS.search(page), TAGS.search(page)
    assert not re.search(r"""(href|src)\s*=\s*["']?\s*javascript:""", page, re.I), "a javascript: link formed"
    for table in re.findall(r"<table>.*?</table>", page, re.S):  # no value broke a row into more or fewer cells
        rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)
        widths = {len(re.findall(r"<t[hd][ >]", r)) for r in rows}
        assert len(widths) == 1, table[:2000]
    return page


def shown(value: str) -> str:
    """How the page shows a value as text (control characters as their escapes)."""
    from harness.escape import terminal_line

    return html.escape(terminal_line(value), quote=True)


# ---------------------------------------------------------------------------------------------------- the world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The matrix, its run (booted once on the FakeRuntime, in process) with what `run` printed, and forged runs."""
    from harness.results.model import RunStatus

    root = tmp_path_factory.mktemp("hostile-output") / ("d" + NAME)
    model = root / ("model" + NAME)
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}))
    matrix = write_matrix(root / ("m" + NAME + ".yaml"), {
        "name": "esc", "command": ["fake-vllm"], "model": str(model), "timeout_s": 10, "linger_s": 0.1,
        "env": {"NOTE": BAD, "HF_ENDPOINT": f"https://u:{SECRET}@hub{BAD}"},
        "axes": {"max_model_len": {"flag": "--max-model-len", "values": ["2048", "4096"]},
                 "k": {"flag": "--x", "values": [BAD, "b" + BAD]}},
        "expect": [{"outcome": "booted"}]})
    from harness.matrix.load import load_matrix

    cells = list(load_matrix(matrix).cells)
    refuses = next(c.id for c in cells if c.axes == {"max_model_len": "4096", "k": BAD})
    runtime = FakeRuntime({refuses: Script.refused_kv(4096, 0.02, 0.01, 3072)}, default=Script.booted())
    results = root / "results"
    # `run` itself, once: its lines and summary (a pipe: no live table) are checked with the rest
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_TOKEN", SECRET)
        for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR"):
            mp.delenv(name, raising=False)
        mp.setattr(sys, "stdout", out)
        mp.setattr(sys, "stderr", err)
        code = main(["run", "--matrix", str(matrix), "--results-dir", str(results)], runtimes=lambda loaded: runtime)
    assert code == 1, out.getvalue() + err.getvalue()  # the refused cell missed its expectation
    (run_dir,) = [p for p in results.iterdir() if (p / "results.json").exists()]
    run, _ = load_run(run_dir)

    # a second night (a minute later: not in the future of this host's clock): the same cells, a hostile run id, argv
    # and env that changed, a detail that says BAD
    night2 = run.model_copy(update={
        "run_id": "n2`" + NAME, "started_at": run.started_at + timedelta(minutes=1), "status": RunStatus.complete,
        "cells": [c.model_copy(update={"argv": [*c.argv, "--y", BAD], "env": {**c.env, "X" + BAD: BAD},
                                       "detail": BAD, **_flipped(c)}) for c in run.cells]})
    nights = root / "nights"
    second = write_run(night2, nights)
    first = write_run(run, nights)

    # forged ids, axis keys, matrix name, runtime, and memory phase names
    key = "k" + BAD
    odd_cells = []
    for i, c in enumerate(run.cells):
        axes = {("max_model_len" if a == "max_model_len" else key): v for a, v in c.axes.items()}
        odd_cells.append(c.model_copy(update={"cell_id": f"c{i}{NAME}", "axes": axes, "detail": BAD,
                                               "memory": _memory(BAD)}))
    odd = run.model_copy(update={
        "run_id": "odd`" + NAME, "runtime": "rt" + BAD, "status": RunStatus.complete, "cells": odd_cells,
        "matrix": run.matrix.model_copy(update={"name": "name" + BAD})})
    odd_dir = write_run(odd, root / "odd")
    log = root / ("server" + NAME + ".log")
    log.write_text("INFO 12-01 10:00:01 [x.py:1] vLLM server version 0.11.0 \x07\x1b]0;T\x07\r\n"
                   "ERROR 12-01 10:00:02 [x.py:1] ValueError: To serve at least one request with the model's max seq "
                   f"len (4096), (0.02 GiB KV cache is needed, which is larger than the available KV cache memory "
                   f"(0.01 GiB). {BAD}\n")
    return {"root": root, "matrix": matrix, "model": model, "run": run_dir, "night1": first, "night2": second,
            "nights": nights, "odd": odd_dir, "log": log, "refuses": refuses, "cells": [c.id for c in cells],
            "run_output": out.getvalue() + err.getvalue()}


def _flipped(c) -> dict:
    """The refused cell boots on the second night: its history row says what changed (argv, env)."""
    from harness.verdict import Outcome, Reason

    if c.outcome != Outcome.refused:
        return {}
    return {"outcome": Outcome.booted, "reason": Reason.ready, "matched": True, "refusal": None}


def strings(value) -> list[str]:
    """Every str in a parsed JSON value."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*strings(k), *strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def _memory(phase: str):
    """A memory curve whose phase names are `phase` (a forged record: names the harness would never write)."""
    from harness.memory.model import MemoryCurve

    return MemoryCurve(source="process", interval_s=0.2, limit_bytes=8 << 30, peak_bytes=3 << 30, peak_at_s=1.0,
                       peak_phase="p" + phase, by_phase={"p" + phase: 3 << 30}, headroom_bytes=5 << 30, taken=10,
                       samples=[(0.5, 1 << 30), (1.0, 3 << 30)])


# ---------------------------------------------------------------------------------------------------- terminal


def test_run_prints_no_control_character(world):
    assert world["refuses"] in world["run_output"]
    terminal_safe(world["run_output"])


#: id -> the command's arguments, from the world (what each prints goes to a terminal or a pipe)
COMMANDS = {
    "validate": lambda w: ("validate", "--matrix", w["matrix"]),
    "cells": lambda w: ("cells", "--matrix", w["matrix"]),
    "run --dry-run": lambda w: ("run", "--dry-run", "--matrix", w["matrix"], "--results-dir", w["root"] / "dry"),
    "run --dry-run --resume": lambda w: ("run", "--dry-run", "--matrix", w["matrix"], "--resume", w["run"]),
    "repro": lambda w: ("repro", "--matrix", w["matrix"], w["refuses"], "--results-dir", w["root"] / "repro"),
    "report": lambda w: ("report", w["run"]),
    "report (forged ids, keys, name)": lambda w: ("report", w["odd"]),
    "compare A B": lambda w: ("compare", w["night1"], w["night2"]),
    "compare --axis k": lambda w: ("compare", w["run"], "--axis", "k"),
    "compare --axis KEY (forged)": lambda w: ("compare", w["odd"], "--axis", "k" + BAD),
    "history": lambda w: ("history", w["nights"]),
    "check": lambda w: ("check", w["night2"]),
    "check (forged)": lambda w: ("check", w["odd"]),
    "analyze": lambda w: ("analyze", w["odd"]),
    "merge (forged)": lambda w: ("merge", w["odd"], "--out", w["root"] / ("merged" + NAME)),
    "plan": lambda w: ("plan", "--matrix", w["matrix"]),
    "plan --from": lambda w: ("plan", "--matrix", w["matrix"], "--from", w["run"]),
    "kv (hostile model path)": lambda w: ("kv", w["model"], "--", "--max-model-len", "2048"),
    "facts (hostile log name and lines)": lambda w: ("facts", w["log"]),
    "error: a missing run": lambda w: ("report", w["root"] / ("missing" + NAME)),
    "error: a missing matrix": lambda w: ("validate", "--matrix", w["root"] / ("missing" + NAME + ".yaml")),
    "error: no such cell": lambda w: ("repro", "--matrix", w["matrix"], "nope" + BAD),
    "error: --select of no axis": lambda w: ("cells", "--matrix", w["matrix"], "--select", f"{BAD}=1"),
    "error: a bad flag value": lambda w: ("compare", w["run"], "--tolerance", BAD),
}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_control_character_reaches_the_terminal(name, world, capsys, monkeypatch):
    code, out, err = run_cli(capsys, monkeypatch, *COMMANDS[name](world), env={"HF_TOKEN": SECRET})
    assert "Traceback" not in err, err
    assert out + err, "the command printed nothing: nothing was tested"
    if name.startswith("error"):
        assert code == 2 and len(err.splitlines()) == 1, err
    terminal_safe(out)
    terminal_safe(err)
    assert SECRET not in out + err


#: --shard auto's job line, from a scheduler's variables that carry BAD
SCHEDULER = {"BUILDKITE_PARALLEL_JOB": "0", "BUILDKITE_PARALLEL_JOB_COUNT": "1", "BUILDKITE_JOB_ID": "j" + BAD,
             "BUILDKITE_BUILD_ID": "b" + BAD}


@pytest.mark.parametrize("command", ["cells", "run --dry-run"])
def test_the_shard_auto_job_line_shows_the_scheduler_s_values_escaped(command, world, capsys, monkeypatch):
    args = ("run", "--dry-run") if command != "cells" else ("cells",)
    code, out, err = run_cli(capsys, monkeypatch, *args, "--matrix", world["matrix"], "--shard", "auto",
                             env=SCHEDULER)
    assert code == 0, err
    assert "--shard auto: Buildkite job j<script>" in err and "\\x1b]0;TITLE\\x07" in err, err
    terminal_safe(out + err)


def test_a_hostile_scheduler_index_is_one_line_without_control_characters(world, capsys, monkeypatch):
    code, out, err = run_cli(capsys, monkeypatch, "cells", "--matrix", world["matrix"], "--shard", "auto",
                             env={**SCHEDULER, "BUILDKITE_PARALLEL_JOB": "1" + BAD})
    assert code == 2 and len(err.splitlines()) == 1, err
    terminal_safe(err)


def test_values_are_shown_escaped_not_dropped(world, capsys, monkeypatch):
    """Escaped is not removed: the title sequence is printed as the text `\\x1b]0;TITLE\\x07`, where it was."""
    code, out, _ = run_cli(capsys, monkeypatch, "report", world["odd"])
    assert code == 0
    assert "c0<script>alert(1)<script>" in out and "\\x1b]0;TITLE\\x07\\x1b]8;;https:evil\\x1b\\L" in out, out
    assert "\\x1b[5mblink\\x07\\r\\x9b2J" in out


# ---------------------------------------------------------------------------------------------------- markdown


@pytest.mark.parametrize("which", ["report", "report (forged ids, keys, name)", "report to stdout", "history",
                                   "history to stdout"])
def test_markdown_holds_no_tag_link_or_control_and_its_code_spans_hold(which, world, capsys, monkeypatch):
    run = world["odd"] if "forged" in which else world["run"]
    target = "-" if "stdout" in which else world["root"] / f"{which.split()[0]}{NAME}.md"
    args = ("report", run, "--markdown", target) if which.startswith("report") else (
        "history", world["nights"], "--markdown", target)
    code, out, err = run_cli(capsys, monkeypatch, *args)
    assert code in (0, 1), err  # history: 1 where the latest night missed an expectation
    terminal_safe(out + err)
    md = out if target == "-" else Path(target).read_text()
    page = rendered(md)
    if which.startswith("report"):
        loaded, _ = load_run(run)
        assert f"<code>{shown(loaded.run_id)}</code>" in page, "the run id's code span was closed early"
        assert shown(BAD) in page, "the value is shown as written"
        if "forged" in which:
            assert f"<strong>{shown('name' + BAD)}</strong>" in page
            assert f"runtime {shown('rt' + BAD)}" in page and shown("p" + BAD) in page  # a memory phase name
    else:
        assert f"<code>{shown('n2`' + NAME)}</code>" in page
        assert shown(f"X{BAD}") in page, "history's changed column names the env key as written"


def test_a_markdown_code_span_outlasts_any_backtick_run():
    from markdown_it import MarkdownIt

    from harness.escape import md_code

    for value in ("`", "``", "a```b", "`x`", " x ", "x|y", "", BAD):
        page = MarkdownIt("commonmark").render(md_code(value))
        assert page.count("<code>") == 1, (value, page)
        assert re.fullmatch(r"<p><code>(.*)</code></p>\n", page, re.S).group(1) == shown(value if value else " ")


# ---------------------------------------------------------------------------------------------------- records


def test_json_outputs_and_records_keep_the_values_exactly(world, capsys, monkeypatch):
    code, out, _ = run_cli(capsys, monkeypatch, "cells", "--matrix", world["matrix"], "--json")
    assert code == 0
    cells = json.loads(out)["cells"]
    assert {c["axes"]["k"] for c in cells} == {BAD, "b" + BAD} and all(c["env"]["NOTE"] == BAD for c in cells)
    for args in (("history", world["nights"], "--json"), ("analyze", world["odd"], "--json"),
                 ("compare", world["night1"], world["night2"], "--json")):
        code, out, _ = run_cli(capsys, monkeypatch, *args)
        terminal_safe(out)
        want = "c0" + NAME if args[0] == "analyze" else "n2`" + NAME
        assert want in strings(json.loads(out)), args
    run, _ = load_run(world["odd"])
    assert run.matrix.name == "name" + BAD and run.cells[0].cell_id == "c0" + NAME
    record = json.loads((Path(world["run"]) / "results.json").read_text())
    assert {c["axes"]["k"] for c in record["cells"]} == {BAD, "b" + BAD}


# ---------------------------------------------------------------------------------------------------- shell


def test_a_printed_shell_word_is_terminal_safe_and_reads_back_exactly():
    """`$'…'` for a word holding a control character, and a secret's reference spliced into a double-quoted one:
    bash reads both back as the value itself."""
    from harness.shell import SecretRenderer, format_shell

    value = f"https://u:{SECRET}@hub{BAD}\t\n'\"$x\\"
    words = [format_shell([BAD]), format_shell(["a'b\x1bc"]),
             SecretRenderer({"E": value}, [], {"HF_TOKEN": SECRET}).env("E", value).split("=", 1)[1]]
    for w in words:
        terminal_safe(w)
        assert "\n" not in w and SECRET not in w
    script = "; ".join(f"printf '%s\\0' {w}" for w in words)
    got = subprocess.run(["bash", "-c", script], env={"HF_TOKEN": SECRET}, capture_output=True, timeout=30).stdout
    assert got.decode("utf-8").split("\0")[:3] == [BAD, "a'b\x1bc", value]
