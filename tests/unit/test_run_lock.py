"""One writer per run directory (harness.results.store.RunLock): how a second writer is told, and that the lock
leaves nothing behind. Two real runs at once are tests/reliability/test_runner_faults.py; here another process's
lock is an flock on its own open file description, which conflicts exactly as another process's would."""

from __future__ import annotations

import fcntl
import os

import pytest

from harness.errors import UsageError
from harness.results.store import RunLock


@pytest.fixture
def tmp_path(tmp_path):
    """Beside a run folder, `run`, that exists (the lock is in it)."""
    (tmp_path / "run").mkdir()
    return tmp_path


def _lock_path(run_dir):
    """Where the run's lock lives (taken and let go once to learn it)."""
    lock = RunLock(run_dir)
    path = lock._path
    lock.release()
    return path


def test_a_released_lock_leaves_no_file_behind(tmp_path):
    lock = RunLock(tmp_path / "run")
    path = lock._path
    assert path.exists() and path.read_text() == str(os.getpid())
    lock.release()
    assert path == tmp_path / "run" / ".lock"
    assert not path.exists(), "a released run keeps no lock file"


def test_a_run_held_elsewhere_is_refused_in_one_line_naming_the_holder(tmp_path):
    path = _lock_path(tmp_path / "run")
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.pwrite(fd, b"4242", 0)
        with pytest.raises(UsageError) as refused:
            RunLock(tmp_path / "run")
        assert "another boot-harness (pid 4242) is writing this run now" in str(refused.value)
        assert "\n" not in str(refused.value)
    finally:
        os.close(fd)


def test_the_lock_is_taken_again_once_its_holder_let_go(tmp_path):
    first = RunLock(tmp_path / "run")
    first.release()
    second = RunLock(tmp_path / "run")
    assert second._path.exists()
    second.release()


def test_within_one_process_the_lock_is_shared_and_held_until_the_last_release(tmp_path):
    outer, inner = RunLock(tmp_path / "run"), RunLock(tmp_path / "run")
    inner.release()
    assert outer._path.exists(), "the outer holder still holds it"
    path = outer._path
    outer.release()
    assert not path.exists()
