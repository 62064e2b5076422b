"""Hostile input: what a run writes through, truncates or removes in a run folder it is resuming, and who owns a run.

Each case plants one thing in a run folder before `run --resume` — a link where the harness would write (a cell's log,
`logs/`, `work/`, `active/`, `cells/`, `patches/`, `compile-cache`, `.owner.json`, the run's `.lock`), a hard link or
a FIFO as a cell's log, a real `work/<cell>/` or `compile-cache/` holding someone's files — and asserts that the
resume is refused in one line naming the planted path (exit 2, no traceback), that nothing booted, and that the victim
survives byte for byte with the link still a link. The same plants met mid-run (after that check: another process,
between two cells) are handed to each writer itself — the log sink, a note, the scratch claim and removal, the compile
cache, an active record, a cell record, the retry's kept log — which refuses or leaves them. Then the locks: a run held
by a harness under another TMPDIR is refused naming its pid, and a GPU host lock planted as a link is refused with its
target untouched.

Cheap: one template run folder (no cell booted yet) is made once and copied per case; `run --resume` runs in this
process on the FakeRuntime; the one child process is the other TMPDIR's lock holder.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.errors import FileRefused, UsageError
from harness.gpu.fake import FakeInventory
from harness.gpu.hostlock import PREFIX, ROOTS, HostGpuLocks, check_root, lock_root
from harness.matrix.load import load_matrix
from harness.results.store import RunStore
from harness.runtime import scratch
from harness.runtime.fake import FakeRuntime
from tests.builders import write_matrix
from tests.helpers.env import ROOT

VICTIM_BYTES = b"someone's precious bytes\n"
CELLS = ("c_a", "c_b")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A matrix of two FakeRuntime cells, and a run of it (`results/run1`) with none booted yet: what `--resume`
    finishes. Made once; each case copies it."""
    base = tmp_path_factory.mktemp("links-template")
    m = write_matrix(base / "m.yaml", {"name": "links", "command": ["fake-vllm"], "model": "m", "timeout_s": 10,
                                       "linger_s": 0, "axes": {"c": {"a": {}, "b": {}}},
                                       "expect": [{"outcome": "booted"}]})
    loaded = load_matrix(m)
    RunStore.create(base / "results", loaded, "fake", [c.id for c in loaded.cells], run_id="run1")
    return base


@pytest.fixture
def case(template, tmp_path) -> tuple[Path, Path, Path]:
    """(matrix, run folder, victim folder) of this case: the template copied, and a folder of someone else's."""
    shutil.copytree(template, tmp_path / "t")
    victim = tmp_path / "victim"
    victim.mkdir()
    return tmp_path / "t" / "m.yaml", tmp_path / "t" / "results" / "run1", victim


def resume(capsys, monkeypatch, matrix: Path, run: Path) -> tuple[int, str, FakeRuntime]:
    """`run --resume RUN` in this process on the FakeRuntime: (exit code, stderr, the runtime: what it started)."""
    from harness.cli import main

    runtime = FakeRuntime()
    for name in ("COLUMNS", "LINES", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    code = main(["run", "--matrix", str(matrix), "--resume", str(run)], runtimes=lambda loaded: runtime)
    return code, capsys.readouterr().err, runtime


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Every entry under `root` (never through a link): what it is, its content or link target, its mode."""
    out: dict[str, tuple[str, bytes | str | None, int]] = {".": ("dir", None, stat.S_IMODE(os.lstat(root).st_mode))}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(top, name)
            st = os.lstat(p)
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
            else:
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "other", None, stat.S_IMODE(st.st_mode))
    return out


def _victim_file(victim: Path, name: str = "precious.txt") -> Path:
    f = victim / name
    f.write_bytes(VICTIM_BYTES)
    return f


# Each plants one thing in the run folder `run` (and what it points at in `victim`); returns the planted path, which
# the refusal names.
def log_link(run: Path, victim: Path) -> Path:
    (run / "logs" / "c_a.log").symlink_to(_victim_file(victim))
    return run / "logs" / "c_a.log"


def attempt_log_link(run: Path, victim: Path) -> Path:
    (run / "logs" / "c_a.attempt1.log").symlink_to(_victim_file(victim))
    return run / "logs" / "c_a.attempt1.log"


def log_hard_link(run: Path, victim: Path) -> Path:
    os.link(_victim_file(victim), run / "logs" / "c_a.log")
    return run / "logs" / "c_a.log"


def log_fifo(run: Path, victim: Path) -> Path:
    os.mkfifo(run / "logs" / "c_b.log")
    return run / "logs" / "c_b.log"


def logs_folder_link(run: Path, victim: Path) -> Path:
    _victim_file(victim, "c_a.log")
    shutil.rmtree(run / "logs")
    (run / "logs").symlink_to(victim)
    return run / "logs"


def owner_file_link(run: Path, victim: Path) -> Path:
    (run / "work" / "c_a").mkdir(parents=True)
    (run / "work" / "c_a" / scratch.OWNER_FILE).symlink_to(_victim_file(victim))
    return run / "work" / "c_a"


def work_folder_link(run: Path, victim: Path) -> Path:
    (victim / "c_a").mkdir()
    _victim_file(victim / "c_a")
    (run / "work").symlink_to(victim)
    return run / "work"


def work_cell_link(run: Path, victim: Path) -> Path:
    _victim_file(victim)
    (run / "work").mkdir()
    (run / "work" / "c_b").symlink_to(victim)
    return run / "work" / "c_b"


def someones_work_cell(run: Path, victim: Path) -> Path:
    (run / "work" / "c_a").mkdir(parents=True)
    (run / "work" / "c_a" / "precious.txt").write_bytes(VICTIM_BYTES)
    return run / "work" / "c_a"


def active_folder_link(run: Path, victim: Path) -> Path:
    _victim_file(victim, "c_a.json")
    (run / "active").symlink_to(victim)
    return run / "active"


def active_record_link(run: Path, victim: Path) -> Path:
    (run / "active").mkdir()
    (run / "active" / "c_a.json").symlink_to(_victim_file(victim))
    return run / "active" / "c_a.json"


def cells_folder_link(run: Path, victim: Path) -> Path:
    shutil.rmtree(run / "cells")
    (run / "cells").symlink_to(victim)
    return run / "cells"


def patches_folder_link(run: Path, victim: Path) -> Path:
    _victim_file(victim)
    (run / "patches").symlink_to(victim)
    return run / "patches"


def someones_compile_cache(run: Path, victim: Path) -> Path:
    (run / "compile-cache").mkdir()
    (run / "compile-cache" / "precious.txt").write_bytes(VICTIM_BYTES)
    return run / "compile-cache"


def compile_cache_link(run: Path, victim: Path) -> Path:
    _victim_file(victim)
    victim.chmod(0o700)
    (run / "compile-cache").symlink_to(victim)
    return run / "compile-cache"


def lock_link(run: Path, victim: Path) -> Path:
    (run / ".lock").symlink_to(_victim_file(victim))
    return run / ".lock"


def lock_fifo(run: Path, victim: Path) -> Path:
    os.mkfifo(run / ".lock")
    return run / ".lock"


PLANTED: dict[str, Callable[[Path, Path], Path]] = {
    "log-is-a-link-to-a-victim-file": log_link,
    "attempt1-log-is-a-link": attempt_log_link,
    "log-is-a-hard-link-to-a-victim-file": log_hard_link,
    "log-is-a-fifo": log_fifo,
    "logs-folder-is-a-link-to-a-victim-folder": logs_folder_link,
    "owner-file-of-a-work-dir-is-a-link": owner_file_link,
    "work-folder-is-a-link-to-a-victim-folder": work_folder_link,
    "work-cell-folder-is-a-link": work_cell_link,
    "someones-real-work-cell-folder": someones_work_cell,
    "active-folder-is-a-link-to-a-victim-folder": active_folder_link,
    "active-record-is-a-link": active_record_link,
    "cells-folder-is-a-link": cells_folder_link,
    "patches-folder-is-a-link": patches_folder_link,
    "someones-real-compile-cache-folder": someones_compile_cache,
    "compile-cache-is-a-link-to-a-victim-folder": compile_cache_link,
    "run-lock-is-a-link-to-a-victim-file": lock_link,
    "run-lock-is-a-fifo": lock_fifo,
}


@pytest.mark.parametrize("plant", list(PLANTED.values()), ids=list(PLANTED))
def test_resume_refuses_what_it_did_not_make_and_leaves_it_as_it_was(plant, case, capsys, monkeypatch):
    matrix, run, victim = case
    planted = plant(run, victim)
    victim_before, planted_before = snapshot(victim), snapshot(run)
    code, err, runtime = resume(capsys, monkeypatch, matrix, run)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"{planted}:") or f"{planted}: " in err, err
    assert runtime.started == [], "a cell booted in a run folder that was refused"
    assert snapshot(victim) == victim_before, "the victim changed"
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != "results.json"} == \
        {k: v for k, v in planted_before.items() if k != "results.json"}, "the run folder changed"


def test_a_clean_resume_boots_what_it_lacks_and_leaves_only_its_records(case, capsys, monkeypatch):
    """The control: the same template, nothing planted, and a log of an earlier attempt (a file the harness wrote)."""
    matrix, run, _ = case
    (run / "logs" / "c_a.log").write_text("an earlier attempt's log\n")
    code, err, runtime = resume(capsys, monkeypatch, matrix, run)
    assert code == 0, err
    assert sorted(runtime.started) == list(CELLS)
    assert sorted(p.name for p in run.iterdir()) == ["cells", "logs", "results.json"]
    assert not (run / "work").exists() and not (run / ".lock").exists()  # the empty work/ removed too
    assert "an earlier attempt" not in (run / "logs" / "c_a.log").read_text()


# ---------------------------------------------------------------------------------------------------- one owner

HOLDER = """
import sys
from harness.results.store import RunLock
lock = RunLock(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


def test_a_run_held_under_another_tmpdir_is_refused_naming_the_holder(case, capsys, monkeypatch, tmp_path):
    matrix, run, _ = case
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp_path / "tmp-a"),
                                                        "PYTHONPATH": str(ROOT)})
    (tmp_path / "tmp-a").mkdir()
    (tmp_path / "tmp-b").mkdir()
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp-b"))
        monkeypatch.setattr("tempfile.tempdir", None)
        code, err, runtime = resume(capsys, monkeypatch, matrix, run)
    finally:
        holder.communicate("", timeout=60)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"another boot-harness (pid {holder.pid}) is writing this run now" in err
    assert runtime.started == [] and not list((run / "cells").iterdir())


# ---------------------------------------------------------------------------------------------------- GPU host locks


class _NvmlLike(FakeInventory):
    kind = "nvml"


@pytest.fixture
def lock_dir(tmp_path) -> Path:
    d = tmp_path / "locks"
    d.mkdir()
    d.chmod(0o1777)
    return d


def test_a_gpu_lock_planted_as_a_link_is_refused_and_its_target_untouched(lock_dir, tmp_path):
    target = _victim_file(tmp_path)
    target.chmod(0o600)
    (lock_dir / f"{PREFIX}GPU-fake-0000.lock").symlink_to(target)
    locks = HostGpuLocks(_NvmlLike(2), root=lock_dir)
    with pytest.raises(FileRefused) as refused:
        locks.acquire([1, 0], threading.Event())
    assert str(refused.value).startswith(f"{lock_dir / PREFIX}GPU-fake-0000.lock: is a symbolic link")
    assert target.read_bytes() == VICTIM_BYTES and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert (lock_dir / f"{PREFIX}GPU-fake-0000.lock").is_symlink()


def test_a_gpu_lock_planted_as_a_fifo_never_blocks_and_is_refused(lock_dir):
    os.mkfifo(lock_dir / f"{PREFIX}GPU-fake-0000.lock")
    with pytest.raises(FileRefused, match="is a FIFO"):
        HostGpuLocks(_NvmlLike(1), root=lock_dir).acquire([0], threading.Event())


def test_gpu_locks_are_taken_once_and_conflict_across_processes_never_written(lock_dir):
    locks = HostGpuLocks(_NvmlLike(2), root=lock_dir)
    held = locks.acquire([0, 1], threading.Event())
    assert held is not None and len(held) == 2
    try:
        other = os.open(lock_dir / f"{PREFIX}GPU-fake-0001.lock", os.O_RDONLY)  # its own open file description:
        try:  # it conflicts as another process's would
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    finally:
        locks.release(held)
    assert all(p.stat().st_size == 0 for p in lock_dir.iterdir())


@pytest.mark.parametrize("shape", ["link", "no-sticky", "file"])
def test_a_gpu_lock_folder_others_could_swap_locks_in_is_refused_in_one_line(shape, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    real.chmod(0o1777)
    given = {"link": tmp_path / "link", "no-sticky": real, "file": tmp_path / "file"}[shape]
    if shape == "link":
        given.symlink_to(real)
    elif shape == "no-sticky":
        real.chmod(0o777)
    else:
        given.write_text("")
    with pytest.raises(UsageError) as refused:
        check_root(given)
    said = str(refused.value)
    assert said.startswith(f"{given}: cannot hold the host's GPU locks") and "\n" not in said


def test_the_gpu_lock_folder_is_the_same_whatever_tmpdir(monkeypatch, tmp_path):
    """Two runs under two TMPDIRs must meet on one GPU: the folder is host-wide, root's and sticky, never $TMPDIR."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    found = lock_root()
    assert found in ROOTS and tmp_path not in (found, *found.parents)
    st = os.stat(found)
    assert st.st_uid == 0 and st.st_mode & stat.S_ISVTX
    with pytest.raises(UsageError, match="no folder for the host's GPU locks"):
        lock_root((tmp_path / "missing", tmp_path))


# ---------------------------------------------------------------------------------------------------- planted mid-run
# What the vet above refuses may also appear after it (another process, between two cells): each writer the run has
# is handed the planted path itself and must refuse it, or leave it, without touching the victim.


def _log_sink(run: Path) -> None:
    from harness.masking import Masker
    from harness.watch.logsink import LogSink

    LogSink(run / "logs" / "c_a.log", Masker(), anchor=run)


def _note(run: Path) -> None:
    from harness.boot.notes import note

    note(run / "logs" / "c_a.log", "a harness line")  # a note that cannot be written is lost, never written through


def _claim(run: Path) -> None:
    scratch.claim(run / "work" / "c_a", run)


def _compile_cache(run: Path) -> None:
    from harness.runtime.compile_cache import CompileCache

    CompileCache.for_run("run", run, run, 1)


def _active_record(run: Path) -> None:
    from harness.runtime.active import ActiveRecord, write_active_record

    write_active_record(run / "active" / "c_a.json", ActiveRecord(
        cell_id="c_a", pgid=2, leader_start=None, boot_id=None, owner_pid=1, owner_start=None,
        server_id="1-0-" + "ab" * 8), anchor=run)


def _cell_record(run: Path) -> None:
    from harness.results.store import atomic_write_text

    atomic_write_text(run / "cells" / "c_a.json", "{}", run)


def _retry_keeps_its_log(run: Path) -> None:
    from harness import nofollow

    (run / "logs" / "c_a.log").write_text("attempt 1\n")
    nofollow.rename(run, run / "logs" / "c_a.log", run / "logs" / "c_a.attempt1.log")


def _claimed_then_swapped_for_a_link(run: Path, victim: Path) -> Path:
    work = scratch.claim(run / "work" / "c_a", run)
    _victim_file(victim)
    shutil.rmtree(work)
    work.symlink_to(victim)
    return work


def _remove(run: Path) -> None:
    scratch.remove(run / "work" / "c_a")


def _cells_and_a_record(run: Path, victim: Path) -> Path:
    _victim_file(victim, "c_a.json")
    return cells_folder_link(run, victim)


#: id -> (plant, what the run does next, whether it refuses: else it leaves the path and goes on)
MID_RUN: dict[str, tuple[Callable[[Path, Path], Path], Callable[[Path], None], bool]] = {
    "log-sink-opens-a-linked-log": (log_link, _log_sink, True),
    "log-sink-opens-a-hard-linked-log": (log_hard_link, _log_sink, True),
    "note-into-a-linked-logs-folder": (logs_folder_link, _note, False),
    "claim-of-someones-work-folder": (someones_work_cell, _claim, True),
    "claim-through-a-linked-work-folder": (work_folder_link, _claim, True),
    "remove-of-a-work-dir-swapped-for-a-link": (_claimed_then_swapped_for_a_link, _remove, False),
    "run-compile-cache-made-through-a-link": (compile_cache_link, _compile_cache, True),
    "active-record-written-through-a-link": (active_record_link, _active_record, True),
    "active-record-into-a-linked-active-folder": (active_folder_link, _active_record, True),
    "cell-record-into-a-linked-cells-folder": (_cells_and_a_record, _cell_record, True),
    "retry-keeps-its-log-over-a-link": (attempt_log_link, _retry_keeps_its_log, True),
}


@pytest.mark.parametrize("plant, act, refused", list(MID_RUN.values()), ids=list(MID_RUN))
def test_every_writer_refuses_or_leaves_a_path_planted_mid_run(plant, act, refused, case):
    _, run, victim = case
    planted = plant(run, victim)
    victim_before, kind_before = snapshot(victim), os.lstat(planted).st_mode
    if refused:
        with pytest.raises(FileRefused, match="left alone") as why:
            act(run)
        assert str(why.value).startswith(f"{planted}"), why.value
    else:
        act(run)
    assert snapshot(victim) == victim_before, "the victim changed"
    assert os.lstat(planted).st_mode == kind_before, "what was planted was replaced"
