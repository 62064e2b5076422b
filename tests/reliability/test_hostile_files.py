"""Hostile files: a path the harness is given, or meets inside a run directory, that is not the regular file it
expects — a FIFO (blocks a reader forever), a device (`/dev/zero` never ends; `/dev/full` must never be replaced), a
symbolic link (out of a run, or to a device), a sparse file far past any real size, JSON nested past any parser's
stack or holding NaN/Infinity/overflowing numbers, a record cut short, missing, or holding another cell's id.

The promises: every such file is one line on stderr naming it and what is wrong, exit 2, no traceback, no hang (each
command runs under a subprocess timeout: a hang fails the test as "hung"); no command goes on with part of a run as if
it were all of it; a report is written through a link (the link kept) and never over a device, FIFO or directory;
`merge` never copies what a link points to. After each case, the victim is checked: the device is still a device, the
link still a link, the file outside the run neither copied nor changed.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.matrix.load import load_matrix
from harness.results.model import MatrixRef
from tests.helpers.reliability import cli, fake_matrix
from tests.synthetic import make_cell, make_run, write_run

#: Seconds any one command may take here before the test calls it hung (they take about one).
HUNG_S = 60
#: Past harness.files.JSON_LIMIT (64 MiB); sparse, so it costs no disk.
HUGE = 70 << 20
DEEP = 5000


def run(*args: object) -> subprocess.CompletedProcess:
    try:
        return cli(*args, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: boot-harness {' '.join(map(str, args))} did not end in {HUNG_S} s")


def refused(proc: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2 with exactly one stderr line holding every word, and no traceback."""
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


def deep_json(depth: int = DEEP) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


def sparse(path: Path, size: int = HUGE) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# ---------------------------------------------------------------------------------------------------- what is read


def _model_dir(tmp: Path, make: Callable[[Path], object]) -> Path:
    d = tmp / "model"
    d.mkdir()
    make(d / "config.json")
    return d


READS = [
    # (id, command line given tmp_path, words of the one line)
    ("matrix-is-a-FIFO", lambda t: ["validate", "--matrix", fifo(t / "m.yaml")], ["m.yaml", "FIFO"]),
    ("matrix-is-dev-zero", lambda t: ["validate", "--matrix", "/dev/zero"], ["/dev/zero", "character device"]),
    ("matrix-is-dev-null", lambda t: ["validate", "--matrix", "/dev/null"], ["/dev/null", "character device"]),
    ("matrix-links-to-dev-zero", lambda t: ["cells", "--matrix", _link(t / "m.yaml", "/dev/zero")],
     ["m.yaml", "character device"]),
    ("matrix-is-70-MiB-sparse", lambda t: ["validate", "--matrix", sparse(t / "m.yaml")], ["m.yaml", "bytes"]),
    ("model-config-is-a-FIFO", lambda t: ["kv", _model_dir(t, fifo)], ["config.json", "FIFO"]),
    ("model-config-links-to-dev-zero", lambda t: ["kv", _model_dir(t, lambda p: _link(p, "/dev/zero"))],
     ["config.json", "character device"]),
    ("model-is-dev-zero", lambda t: ["kv", "/dev/zero"], ["/dev/zero", "character device"]),
    ("model-config-is-70-MiB-sparse", lambda t: ["kv", _model_dir(t, sparse)], ["config.json", "bytes"]),
    ("model-config-nested-5000-deep", lambda t: ["kv", _model_dir(t, lambda p: p.write_text(deep_json()))],
     ["config.json", "nested"]),
    ("model-config-nested-150-deep", lambda t: ["kv", _model_dir(t, lambda p: p.write_text(deep_json(150)))],
     ["config.json", "nested more than 100 deep"]),
    ("model-config-5000-digit-int", lambda t: ["kv", _model_dir(t, lambda p: p.write_text(
        '{"num_hidden_layers": ' + "9" * 5000 + "}"))], ["config.json:num_hidden_layers", "5000-digit"]),
    ("facts-log-is-a-FIFO", lambda t: ["facts", fifo(t / "server.log")], ["server.log", "FIFO"]),
    ("facts-log-is-dev-zero", lambda t: ["facts", "/dev/zero"], ["/dev/zero", "character device"]),
    ("kv-log-is-a-FIFO", lambda t: ["kv", _model_dir(t, lambda p: p.write_text("{}")), "--log",
                                    fifo(t / "server.log")], ["server.log", "FIFO"]),
]


def _link(path: Path, to: str | Path) -> Path:
    path.symlink_to(to)
    return path


@pytest.mark.parametrize("argv, words", [r[1:] for r in READS], ids=[r[0] for r in READS])
def test_a_file_that_is_not_a_bounded_regular_file_is_one_line_never_a_hang(tmp_path, argv, words):
    refused(run(*argv(tmp_path)), *words)
    assert stat.S_ISCHR(os.stat("/dev/zero").st_mode)


# ---------------------------------------------------------------------------------------------------- run records


@pytest.fixture
def a_run(tmp_path) -> tuple[Path, Path]:
    """(matrix, run directory): a complete run of two cells, both booted as expected, recorded as `run` records it —
    of a real matrix file, so `run --resume` takes it."""
    m = fake_matrix(tmp_path / "m.yaml", {"a": {}, "b": {}})
    loaded = load_matrix(m)
    cells = [make_cell(c.id, dict(c.axes), "booted", expected=("booted", None)) for c in list(loaded.cells)]
    record = make_run("run1", cells).model_copy(update={"matrix": MatrixRef(
        path=str(m), sha256=loaded.sha256, name=loaded.matrix.name)})
    run_dir = write_run(record, tmp_path / "results")
    assert [p.name for p in sorted((run_dir / "cells").iterdir())] == ["case_a.json", "case_b.json"]
    return m, run_dir


def _edit_cell(run_dir: Path, change: Callable[[dict], object], text: Callable[[str], str] = lambda s: s) -> None:
    f = run_dir / "cells" / "case_a.json"
    data = json.loads(f.read_text())
    change(data)
    f.write_text(text(json.dumps(data, indent=2)))


def _set_ready(token: str):
    return lambda d: _edit_cell(d, lambda c: c["timings"].update(ready_s=-12345.5),
                                lambda s: s.replace("-12345.5", token))


def _replace_with(make: Callable[[Path], object], name: str = "cells/case_a.json"):
    def damage(d: Path) -> None:
        (d / name).unlink()
        make(d / name)
    return damage


DAMAGES = [
    # (id, damage(run_dir), words of the one line)
    ("cells-folder-missing", lambda d: shutil.rmtree(d / "cells"), ["cells", "missing", "2 cell"]),
    ("cell-file-missing", lambda d: (d / "cells" / "case_a.json").unlink(), ["case_a.json", "missing"]),
    ("cell-cut-short", lambda d: (d / "cells" / "case_a.json").write_text(
        (d / "cells" / "case_a.json").read_text()[:200]), ["case_a.json", "not JSON"]),
    ("cell-empty", lambda d: (d / "cells" / "case_a.json").write_text(""), ["case_a.json", "not JSON"]),
    ("cell-holds-NaN", _set_ready("NaN"), ["case_a.json:timings.ready_s", "NaN"]),
    ("cell-holds-Infinity", _set_ready("-Infinity"), ["case_a.json:timings.ready_s", "Infinity"]),
    ("cell-holds-1e999", _set_ready("1e999"), ["case_a.json:timings.ready_s", "overflows"]),
    ("cell-holds-30-digit-int", lambda d: _edit_cell(d, lambda c: c.update(exit_code=10 ** 30)),
     ["case_a.json:exit_code", "31-digit"]),
    ("cell-not-a-cell-record", lambda d: _edit_cell(d, lambda c: c.update(outcome="exploded")),
     ["case_a.json:outcome"]),
    ("cell-nested-5000-deep", lambda d: (d / "cells" / "case_a.json").write_text(deep_json()),
     ["case_a.json", "nested"]),
    ("cell-repeats-an-id", lambda d: shutil.copy(d / "cells" / "case_b.json", d / "cells" / "case_c.json"),
     ["case_c.json:cell_id", "case_b"]),
    ("cell-is-a-FIFO", _replace_with(fifo), ["case_a.json", "FIFO"]),
    ("cell-is-a-directory", _replace_with(lambda p: p.mkdir()), ["case_a.json", "directory"]),
    ("cell-links-out-of-the-run", _replace_with(lambda p: _link(p, p.parents[3] / "victim.json")),
     ["case_a.json", "symbolic link"]),
    ("results-json-is-a-FIFO", _replace_with(fifo, "results.json"), ["results.json", "FIFO"]),
    ("results-json-links-to-dev-zero", _replace_with(lambda p: _link(p, "/dev/zero"), "results.json"),
     ["results.json", "symbolic link"]),
    ("results-json-is-70-MiB-sparse", _replace_with(sparse, "results.json"), ["results.json", "bytes"]),
    ("results-json-nested-5000-deep", _replace_with(lambda p: p.write_text(deep_json()), "results.json"),
     ["results.json", "nested"]),
    ("results-json-summary-NaN", lambda d: (d / "results.json").write_text(
        (d / "results.json").read_text().replace('"cells": 2', '"cells": NaN')), ["results.json:summary.cells", "NaN"]),
]


@pytest.mark.parametrize("damage, words", [r[1:] for r in DAMAGES], ids=[r[0] for r in DAMAGES])
def test_check_names_every_record_it_cannot_read_and_fails(a_run, damage, words):
    _, run_dir = a_run
    victim = run_dir.parent.parent / "victim.json"  # a valid record outside the run, for the link case
    shutil.copy(run_dir / "cells" / "case_a.json", victim)
    assert run(*["check", run_dir]).returncode == 0  # the run as recorded passes
    damage(run_dir)
    err = refused(run("check", run_dir), *words)
    assert "ok" not in err
    assert json.loads(victim.read_text())["cell_id"] == "case_a"


COMMANDS = [
    ("check", lambda m, d, t: ["check", d]),
    ("report", lambda m, d, t: ["report", d, "--markdown", t / "r.md"]),
    ("compare-one-run", lambda m, d, t: ["compare", d]),
    ("compare-two-runs", lambda m, d, t: ["compare", d, d]),
    ("analyze", lambda m, d, t: ["analyze", d]),
    ("merge", lambda m, d, t: ["merge", d, "--out", t / "merged"]),
    ("run-resume", lambda m, d, t: ["run", "--matrix", m, "--resume", d]),
]
TORN = [r for r in DAMAGES if r[0] in ("cells-folder-missing", "cell-cut-short", "cell-holds-NaN",
                                      "cell-repeats-an-id")]


@pytest.mark.parametrize("command", [c[1] for c in COMMANDS], ids=[c[0] for c in COMMANDS])
@pytest.mark.parametrize("damage, words", [r[1:] for r in TORN], ids=[r[0] for r in TORN])
def test_every_command_reads_a_run_through_the_one_loader(a_run, tmp_path, command, damage, words):
    """A torn run is refused alike by every command that reads one: none draws an empty grid, writes a merged run of
    "0 cells … complete", or boots the cells again."""
    m, run_dir = a_run
    damage(run_dir)
    before = sorted(p.name for p in (run_dir / "logs").iterdir())
    refused(run(*command(m, run_dir, tmp_path)), *words)
    assert not (tmp_path / "merged").exists() and not (tmp_path / "r.md").exists()
    assert sorted(p.name for p in (run_dir / "logs").iterdir()) == before  # nothing booted


def test_check_recounts_the_cells_on_disk_not_results_jsons_summary(a_run):
    """results.json's summary is the run's last word before a crash; the cells on disk are the truth."""
    _, run_dir = a_run
    _edit_cell(run_dir, lambda c: c.update(outcome="crashed", reason="exited", matched=False, exit_code=1))
    proc = run("check", run_dir)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    words = " ".join(proc.stdout.split())  # check's lines wrap at the width through a pipe, at spaces
    assert "1 matched, 1 mismatched" in words and "FAIL" in words


def test_a_run_with_no_cell_does_not_pass_check(tmp_path):
    run_dir = write_run(make_run("empty", []), tmp_path / "results")
    proc = run("check", run_dir)
    assert proc.returncode == 1 and "no cell record" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------------------- what is written


def _still_dev_full() -> None:
    st = os.stat("/dev/full")
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 7), "/dev/full was replaced"


WRITES = [
    # (id, flag, target given tmp_path, words, the victim's check)
    ("markdown-to-dev-full", "--markdown", lambda t: Path("/dev/full"), ["--markdown /dev/full", "character device"],
     lambda t: _still_dev_full()),
    ("markdown-to-a-link-to-dev-full", "--markdown", lambda t: _link(t / "r.md", "/dev/full"),
     ["r.md", "character device"], lambda t: (_still_dev_full(), _assert_link(t / "r.md", "/dev/full"))),
    ("html-to-dev-null", "--html", lambda t: Path("/dev/null"), ["--html /dev/null", "character device"],
     lambda t: _assert_char(Path("/dev/null"))),
    ("html-to-a-FIFO", "--html", lambda t: fifo(t / "r.html"), ["r.html", "FIFO"],
     lambda t: _assert(stat.S_ISFIFO(os.lstat(t / "r.html").st_mode), "the FIFO was replaced")),
    ("markdown-to-a-directory", "--markdown", lambda t: _mkdir(t / "out"), ["out", "directory"],
     lambda t: _assert((t / "out").is_dir() and not any((t / "out").iterdir()), "the directory was touched")),
    ("html-under-a-file", "--html", lambda t: _touch(t / "file") / "r.html", ["--html", "Not a directory"],
     lambda t: _assert((t / "file").read_text() == "mine\n", "the file was touched")),
]


def _assert(ok: bool, why: str) -> None:
    assert ok, why


def _assert_char(p: Path) -> None:
    assert stat.S_ISCHR(os.lstat(p).st_mode), f"{p} was replaced"


def _assert_link(p: Path, to: str) -> None:
    assert p.is_symlink() and os.readlink(p) == to, f"{p} is no longer the link to {to}"


def _mkdir(p: Path) -> Path:
    p.mkdir()
    return p


def _touch(p: Path) -> Path:
    p.write_text("mine\n")
    return p


@pytest.mark.parametrize("flag, target, words, victim", [r[1:] for r in WRITES], ids=[r[0] for r in WRITES])
def test_a_report_never_replaces_what_is_not_a_regular_file(a_run, tmp_path, flag, target, words, victim):
    _, run_dir = a_run
    err = refused(run("report", run_dir, flag, target(tmp_path)), *words)
    assert "--resume" not in err  # a report is no run: the path is what is wrong
    victim(tmp_path)


def test_a_report_through_a_link_writes_its_target_and_keeps_the_link(a_run, tmp_path):
    _, run_dir = a_run
    target = tmp_path / "shared" / "report.md"
    target.parent.mkdir()
    target.write_text("OLD-REPORT-7\n")
    target.chmod(0o640)
    link = _link(tmp_path / "r.md", target)
    proc = run("report", run_dir, "--markdown", link)
    assert proc.returncode == 0, proc.stderr
    _assert_link(link, str(target))
    assert "case_a" in target.read_text() and "OLD-REPORT-7" not in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o640, "the target's mode was not kept"
    assert [p.name for p in target.parent.iterdir()] == ["report.md"], "a temporary file was left"


# ---------------------------------------------------------------------------------------------------- merge


def test_merge_never_copies_what_a_link_in_a_run_points_to(a_run, tmp_path):
    """A run's logs/ may hold a link to any file the merging user can read (a secret, a key): the merged run is
    uploaded as an artifact, so the link's target must never be copied into it. Nor may a FIFO block the copy."""
    _, run_dir = a_run
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("VICTIM-SECRET-CONTENT\n")
    logs = run_dir / "logs"
    (logs / "case_a.log").write_text("INFO the cell's own log\n")
    _link(logs / "case_b.log", secret)
    _link(logs / "elsewhere", secret.parent)
    fifo(logs / "case_a.attempt1.log")
    patches = run_dir / "patches"
    patches.mkdir()
    _link(patches / "p.diff", "/etc/passwd")
    out = tmp_path / "merged"
    proc = run("merge", run_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "logs" / "case_a.log").read_text() == "INFO the cell's own log\n"
    copied = [p for p in out.rglob("*") if p.is_file() or p.is_symlink()]
    leaks = [p for p in copied if p.is_symlink() or b"VICTIM-SECRET" in p.read_bytes() or b"root:" in p.read_bytes()]
    assert leaks == [], leaks
    for skipped in ("case_b.log", "elsewhere", "case_a.attempt1.log", "p.diff"):
        assert skipped in proc.stderr, (skipped, proc.stderr)
    assert secret.read_text() == "VICTIM-SECRET-CONTENT\n" and (logs / "case_b.log").is_symlink()
    assert json.loads((out / "results.json").read_text())["summary"]["cells"] == 2
    assert sorted(p.name for p in (out / "cells").iterdir()) == ["case_a.json", "case_b.json"]


def test_merge_never_follows_a_runs_logs_folder_that_is_a_link(a_run, tmp_path):
    _, run_dir = a_run
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("VICTIM-SECRET-CONTENT\n")
    shutil.rmtree(run_dir / "logs")
    _link(run_dir / "logs", outside)
    out = tmp_path / "merged"
    proc = run("merge", run_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert not list((out / "logs").iterdir()) and "logs" in proc.stderr
