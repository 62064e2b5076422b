"""A cell's scratch directory: removed with its TMPDIR when the cell ends, and, when a SIGKILL skipped that, by `gc` or
the next run — but only a dead harness's, never a live run's or one kept on purpose."""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

from harness.runtime import scratch
from harness.runtime.server_env import cell_dirs
from harness.sweep import pid_alive, sweep


def _cell(results: Path, run: str, cell: str) -> tuple[Path, Path]:
    """A claimed work dir as the process runtime leaves it: caches, and a `tmp` link to a short TMPDIR."""
    work = scratch.claim(results / run / "work" / cell)
    env = cell_dirs(work)
    (Path(env["TMPDIR"]) / "zmq-socket").write_text("")
    (Path(env["VLLM_CACHE_ROOT"]) / "cached").write_text("x")
    return work, Path(env["TMPDIR"])


#: Above Linux's largest possible pid (PID_MAX_LIMIT, 2**22): no process has it, so its harness is dead.
DEAD_PID = 2**22 + 1


def _dead_pid() -> int:
    return DEAD_PID


def _live_pid() -> int:
    """Another process of this host that is alive for as long as this test runs: the one that started pytest."""
    return os.getppid()


def _own(work: Path, pid: int, host: str | None = None) -> None:
    (work / scratch.OWNER_FILE).write_text(json.dumps({"pid": pid, "host": host or socket.gethostname()}))


def test_a_cell_ends_with_its_work_dir_and_its_tmpdir_gone(tmp_path):
    work, tmp = _cell(tmp_path, "run", "c")
    assert tmp.name.startswith(scratch.TMP_PREFIX) and tmp.is_dir()
    scratch.remove(work)
    assert not work.exists() and not tmp.exists()


def test_kept_scratch_stays_and_is_no_longer_swept(tmp_path):
    work, tmp = _cell(tmp_path, "run", "c")
    scratch.remove(work, keep=True)
    assert (work / "vllm-cache" / "cached").exists() and tmp.exists()
    assert sweep(tmp_path, []).work_dirs == [], "--keep-work means a person wants it"
    assert work.exists()
    scratch.remove(work)


def test_gc_removes_a_dead_harness_scratch_and_nothing_else(tmp_path):
    dead, dead_tmp = _cell(tmp_path, "killed", "c1")
    _own(dead, _dead_pid())
    live, live_tmp = _cell(tmp_path, "running", "c1")
    _own(live, _live_pid())
    mine, _ = _cell(tmp_path, "mine", "c1")  # claimed by this process
    elsewhere, _ = _cell(tmp_path, "other-host", "c1")
    _own(elsewhere, _dead_pid(), host="another-host")
    unclaimed = tmp_path / "old" / "work" / "c1"
    unclaimed.mkdir(parents=True)
    swept = sweep(tmp_path, [])
    assert swept.work_dirs == [dead]
    assert not dead.exists() and not dead_tmp.exists()
    assert all(p.exists() for p in (live, live_tmp, mine, elsewhere, unclaimed))
    for work in (live, mine, elsewhere):
        scratch.remove(work)


def test_a_tmp_link_that_points_outside_the_harness_tmpdirs_is_not_followed(tmp_path):
    work = scratch.claim(tmp_path / "run" / "work" / "c")
    precious = Path(tempfile.mkdtemp(prefix="not-ours-"))
    (precious / "keep").write_text("")
    (work / "tmp").symlink_to(precious)
    _own(work, _dead_pid())
    assert sweep(tmp_path, []).work_dirs == [work]
    assert not work.exists() and (precious / "keep").exists()
    (precious / "keep").unlink()
    precious.rmdir()


def test_an_unreadable_owner_record_is_left_alone(tmp_path):
    work = scratch.claim(tmp_path / "run" / "work" / "c")
    (work / scratch.OWNER_FILE).write_text("{not json")
    assert not scratch.owner_dead(work, pid_alive) and sweep(tmp_path, []).work_dirs == []
