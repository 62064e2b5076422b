"""Hostile leftovers: files in a results directory or a matrix that name what is not the harness's own — another
user's process group in a forged `active/*.json`, gc's own group (`pgid: 0`), malformed records (a FIFO, a directory,
a symlink, a JSON list, a huge number), a `compile_cache:` path that is `/`, a home or the project itself, a 0700
folder inside a cache, and symlinks in a work dir pointing at a victim folder.

Each case starts a victim — a `sleep 600` in its own session, a 0700 folder, a folder behind a symlink — runs `gc`,
a run's start-up sweep, `validate` or the cache's own code against it, and asserts that the victim survives and the
command said what it left (exit 0 for gc and run, one `FILE:compile_cache: ...` line and exit 2 for a refused path).
A genuine leftover (a process carrying the server id its record names) is still killed: the proof can fail.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.runtime import scratch
from harness.runtime.active import ActiveRecord, boot_id
from harness.runtime.carriers import proc_start_time
from harness.runtime.compile_cache import CompileCache
from harness.runtime.server_env import SERVER_ID_VAR
from tests.helpers.reliability import cli, fake_matrix, only_run, read_json

#: Above any live pid, within PID_MAX_LIMIT: the harness that wrote a forged record is "dead".
DEAD_OWNER = 2**22
#: A command that does not end within this hung: it fails the test, it does not wait for ever.
HUNG_S = 120


@pytest.fixture
def victim() -> Iterator[subprocess.Popen]:
    """Someone else's process: a `sleep 600` in its own session (so its group is its own), killed after the test."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def survives(proc: subprocess.Popen) -> bool:
    """Still running a moment after the command returned (a SIGKILLed process would be reaped within it)."""
    try:
        proc.wait(timeout=0.3)
        return False
    except subprocess.TimeoutExpired:
        return True


def gc(results: Path, **kw) -> subprocess.CompletedProcess:
    """`boot-harness gc` in its own session: a gc that killed its own group (`pgid: 0`) dies alone (rc -9), never
    the test run; --engine podman sweeps process groups and work dirs, not this host's docker containers."""
    return cli("gc", "--results-dir", results, "--engine", "podman", timeout=HUNG_S, start_new_session=True, **kw)


def record_for(pid: int, **over) -> dict:
    """A well-formed record naming `pid`'s group, as the harness writes one, owned by a dead harness."""
    rec = dict(cell_id="case_x", pgid=pid, leader_start=proc_start_time(pid), boot_id=boot_id(),
               owner_pid=DEAD_OWNER, owner_start=1, server_id=f"{DEAD_OWNER}-1-{'ab' * 8}")
    rec.update(over)
    return rec


def put(results: Path, name: str = "case_x.json", run: str = "run1") -> Path:
    active = results / run / "active"
    active.mkdir(parents=True, exist_ok=True)
    return active / name


# ---------------------------------------------------------------------------------------------------- active records

#: Ways to write a record that names a process group gc must not kill: id -> writer(record path, victim pid).
FORGED: dict[str, Callable[[Path, int], None]] = {
    "victim-pgid-no-proof": lambda p, v: p.write_text(json.dumps({"pgid": v, "owner_pid": DEAD_OWNER})),
    "victim-pgid-old-format-server-id": lambda p, v: p.write_text(json.dumps(
        {"runtime": "process", "pgid": v, "owner_pid": DEAD_OWNER, "cell_id": "c", "server_id": "00" * 8})),
    "victim-well-formed-wrong-server-id": lambda p, v: p.write_text(json.dumps(record_for(v))),
    "victim-reused-pid-other-start-time": lambda p, v: p.write_text(json.dumps(
        record_for(v, leader_start=(proc_start_time(v) or 0) + 1))),
    "victim-other-boot": lambda p, v: p.write_text(json.dumps(record_for(v, boot_id="not-this-boot"))),
    "victim-pgid-as-string": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=str(v)))),
    "victim-pgid-true": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=True))),
    "pgid-0-gc-own-group": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=0))),
    "pgid-minus-1-everything": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=-1))),
    "pgid-1-init": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=1))),
    "pgid-x": lambda p, v: p.write_text(json.dumps(record_for(v, pgid="x"))),
    "pgid-huge": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=2**63))),
    "pgid-float": lambda p, v: p.write_text(json.dumps(record_for(v, pgid=float(v)))),
    "missing-keys": lambda p, v: p.write_text(json.dumps({"cell_id": "c"})),
    "json-list": lambda p, v: p.write_text(json.dumps([v, v])),
    "json-null": lambda p, v: p.write_text("null"),
    "not-json": lambda p, v: p.write_text("{pgid: " + str(v)),
    "empty-file": lambda p, v: p.write_text(""),
    "nan": lambda p, v: p.write_text('{"pgid": NaN}'),
    "deep-nesting": lambda p, v: p.write_text("[" * 5_000 + "]" * 5_000),
    "fifo-named-json": lambda p, v: os.mkfifo(p),
    "directory-named-json": lambda p, v: (p.mkdir(), (p / "x.json").write_text(json.dumps(record_for(v)))),
    "symlink-to-victim-record": lambda p, v: (p.parents[3].joinpath("elsewhere.json").write_text(
        json.dumps(record_for(v))), p.symlink_to(p.parents[3] / "elsewhere.json")),
    "symlink-to-dev-zero": lambda p, v: p.symlink_to("/dev/zero"),
    "huge-file": lambda p, v: p.write_bytes(b" " * (1 << 20) + json.dumps(record_for(v)).encode()),
}
#: Those a note calls "left" (kept: not a record the harness wrote); the rest are removed as stale, with a note.
STALE = {"victim-well-formed-wrong-server-id", "victim-reused-pid-other-start-time"}
SILENTLY_STALE = {"victim-other-boot"}


@pytest.fixture(scope="module")
def forged_gc(tmp_path_factory):
    """Every forged record at once, each in a run folder of its own and naming a victim of its own, swept by one `gc`
    (what a results folder collected over months looks like): the cases are read from its one output."""
    base = tmp_path_factory.mktemp("forged")
    victims: dict[str, subprocess.Popen] = {}
    records: dict[str, Path] = {}
    try:
        for i, case in enumerate(FORGED):
            victims[case] = subprocess.Popen(["sleep", "600"], start_new_session=True)
            records[case] = put(base / "r", run=f"run{i}")
            FORGED[case](records[case], victims[case].pid)
        yield gc(base / "r"), victims, records, base
    finally:
        for proc in victims.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("case", list(FORGED), ids=list(FORGED))
def test_gc_never_kills_a_group_a_forged_or_malformed_record_names(forged_gc, case):
    done, victims, records, base = forged_gc
    victim, record = victims[case], records[case]
    assert done.returncode == 0, f"gc died (rc {done.returncode}): {done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    assert survives(victim), "gc killed a process group that was not the harness's"
    assert "killed process group" not in done.stdout, done.stdout
    if case in SILENTLY_STALE:
        assert not os.path.lexists(record), "a record of another boot names nothing alive: it goes"
    elif case in STALE:
        assert f"gc: removed {record}" in done.stdout and "not killed" in done.stdout, done.stdout
        assert not os.path.lexists(record)
    else:
        assert f"gc: left {record}: " in done.stdout, done.stdout
        assert os.path.lexists(record), "a record that is not the harness's is kept for a person to look at"
    if case == "symlink-to-victim-record":
        assert (base / "elsewhere.json").is_file(), "the link's target is not the harness's to remove"


@pytest.mark.parametrize("how", ["results-run-dir-is-a-symlink", "active-dir-is-a-symlink"],
                         ids=["run-dir-symlink", "active-dir-symlink"])
def test_gc_does_not_reach_records_through_a_symlinked_folder(tmp_path, victim, how):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "active").mkdir(parents=True)
    (elsewhere / "active" / "c.json").write_text(json.dumps(record_for(victim.pid)))
    results = tmp_path / "r"
    if how == "results-run-dir-is-a-symlink":
        results.mkdir()
        (results / "run1").symlink_to(elsewhere)
    else:
        (results / "run1").mkdir(parents=True)
        (results / "run1" / "active").symlink_to(elsewhere / "active")
    done = gc(results)
    assert done.returncode == 0 and survives(victim), done.stdout + done.stderr
    assert (elsewhere / "active" / "c.json").is_file(), "a file reached through a link is not removed"
    assert "its folder is a symlink" in " ".join(done.stdout.split()), done.stdout  # wrapped at spaces


def test_a_genuine_leftover_server_is_still_killed(tmp_path):
    """The positive control: a group whose process carries the id its record names, its harness dead, is killed."""
    server_id = f"{DEAD_OWNER}-1-{'cd' * 8}"
    server = subprocess.Popen(["sleep", "600"], start_new_session=True,
                              env={**os.environ, SERVER_ID_VAR: server_id})
    try:
        record = put(tmp_path / "r")
        record.write_text(ActiveRecord(**record_for(server.pid, server_id=server_id)).model_dump_json())
        done = gc(tmp_path / "r")
        assert done.returncode == 0, done.stderr
        assert server.wait(timeout=HUNG_S) == -signal.SIGKILL, "gc left the harness's own leftover server"
        assert f"killed process group {server.pid}" in done.stdout and not record.exists()
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(10)


@pytest.mark.parametrize("case", ["victim-well-formed-wrong-server-id", "pgid-0-gc-own-group", "json-list"],
                         ids=["victim-not-ours", "pgid-0-run-own-group", "json-list"])
def test_a_runs_start_up_sweep_never_kills_what_a_forged_record_names(tmp_path, victim, case):
    results = tmp_path / "r"
    FORGED[case](put(results, "forged.json"), victim.pid)
    m = fake_matrix(tmp_path / "m.yaml", {"ok": {}})
    done = cli("run", "--matrix", m, "--results-dir", results, timeout=HUNG_S, start_new_session=True)
    assert done.returncode == 0, f"rc {done.returncode}: {done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr
    assert survives(victim), "the run's start-up sweep killed a process group that was not the harness's"
    assert f"gc: left {results / 'run1' / 'active' / 'forged.json'}" in done.stderr or \
        f"gc: removed {results / 'run1' / 'active' / 'forged.json'}" in done.stderr, done.stderr
    assert read_json(only_run(results) / "results.json")["cells"][0]["outcome"] == "booted"


# ---------------------------------------------------------------------------------------------------- compile_cache

#: compile_cache values that must not validate: id -> (value, what the line says). {home} {cwd}: set per test.
REFUSED = {
    "root": ("/", "is the filesystem root"),
    "home-tilde": ("~/", "is your home folder"),
    "home-absolute": ("{home}/", "is your home folder"),
    "matrix-folder": ("./", "is the matrix file's folder"),
    "matrix-folder-dotdot": ("sub/..", "is the matrix file's folder"),
    "holds-the-matrix": ("../", "holds the matrix file's folder"),
    "repo-root": ("../../", "is the matrix file's repository"),
    "current-folder": ("{cwd}/", "is the current folder"),
    "symlink-to-home": ("./home-link/", "is your home folder"),
    "symlink-to-root": ("./root-link/", "is the filesystem root"),
    "system-folder": ("/etc/", "is a system folder"),
    "under-proc": ("/proc/self/", "is a system folder"),
    "a-file": ("./m.yaml/", "is not a folder"),
}


@pytest.mark.parametrize("case", list(REFUSED), ids=list(REFUSED))
def test_validate_refuses_a_compile_cache_that_is_a_root_a_home_or_the_project(tmp_path, case):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    repo = tmp_path / "repo"
    mdir = repo / "proj" / "m"
    for d in (home, cwd, repo / ".git", mdir):
        d.mkdir(parents=True)
    (mdir / "home-link").symlink_to(home)
    (mdir / "root-link").symlink_to("/")
    value, words = REFUSED[case]
    value = value.format(home=home, cwd=cwd)
    m = fake_matrix(mdir / "m.yaml", {"ok": {}}, compile_cache=value)
    done = cli("validate", "--matrix", m, cwd=cwd, env={"HOME": str(home)}, timeout=HUNG_S)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stdout + done.stderr
    assert lines[0].startswith(f"{m}:compile_cache: ") and words in lines[0], lines[0]


def test_a_compile_cache_folder_of_its_own_validates(tmp_path):
    m = fake_matrix(tmp_path / "m.yaml", {"ok": {}}, compile_cache="./cache/compile")
    done = cli("validate", "--matrix", m, env={"HOME": str(tmp_path / "home")}, timeout=HUNG_S)
    assert done.returncode == 0, done.stderr


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("parallel", [1, 2], ids=["one-cell-at-a-time", "parallel-private-copies"])
def test_a_caches_existing_folders_keep_their_modes_and_a_symlink_in_it_is_not_followed(tmp_path, parallel):
    cache_dir = tmp_path / "cc"
    private = cache_dir / "vllm" / "private"
    private.mkdir(parents=True)
    private.chmod(0o700)
    cache_dir.chmod(0o755)
    (cache_dir / "vllm").chmod(0o750)
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    victim.chmod(0o700)
    (victim / "keep").write_text("mine")
    (cache_dir / "link-out").symlink_to(victim)
    cache = CompileCache.for_run("./cc", tmp_path, tmp_path / "run", parallel)
    used = cache.checkout(tmp_path / "run" / "work" / "c1")
    (used.path / "vllm" / "new" / "deep").mkdir(parents=True)
    (used.path / "vllm" / "new" / "deep" / "artifact").write_text("x")
    cache.checkin(used, compiled=True, hit=False)
    assert _mode(private) == 0o700 and _mode(victim) == 0o700, "a folder the harness did not create changed mode"
    assert _mode(cache_dir) == 0o755 and _mode(cache_dir / "vllm") == 0o750
    assert (victim / "keep").read_text() == "mine"
    if parallel > 1:
        assert _mode(cache_dir / "vllm" / "new") == 0o777, "a folder the harness created is open to a container's user"
    assert _mode(cache_dir / "inductor") == 0o777


def test_a_run_with_a_compile_cache_path_leaves_its_0700_folder_0700(tmp_path):
    private = tmp_path / "cc" / "vllm" / "private"
    private.mkdir(parents=True)
    private.chmod(0o700)
    m = fake_matrix(tmp_path / "m.yaml", {"ok": {}}, compile_cache="./cc")
    done = cli("run", "--matrix", m, "--results-dir", tmp_path / "r", "--parallel", "2", timeout=HUNG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _mode(private) == 0o700


# ---------------------------------------------------------------------------------------------------- work dirs


def _claim(cell: Path, pid: int = DEAD_OWNER) -> None:
    (cell / scratch.OWNER_FILE).write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))


def _victim_folder(tmp_path: Path) -> Path:
    v = tmp_path / "victim"
    v.mkdir()
    (v / "keep").write_text("mine")
    return v


def _cell_is_symlink(results: Path, victim: Path) -> None:
    (results / "run1" / "work").mkdir(parents=True)
    _claim(victim)
    (results / "run1" / "work" / "c1").symlink_to(victim)


def _work_is_symlink(results: Path, victim: Path) -> None:
    (results / "run1").mkdir(parents=True)
    (victim / "c1").mkdir()
    _claim(victim / "c1")
    (victim / "c1" / "keep").write_text("mine")
    (results / "run1" / "work").symlink_to(victim)


def _link_inside_a_dead_cell(results: Path, victim: Path) -> None:
    cell = results / "run1" / "work" / "c1"
    cell.mkdir(parents=True)
    _claim(cell)
    (cell / "victim-link").symlink_to(victim)
    (cell / "vllm-cache").mkdir()
    (cell / "vllm-cache" / "deep-link").symlink_to(victim / "keep")


def _tmp_link_to_a_foreign_bh_folder(results: Path, victim: Path) -> None:
    cell = results / "run1" / "work" / "c1"
    cell.mkdir(parents=True)
    _claim(cell)
    foreign = victim / f"{scratch.TMP_PREFIX}someone-else"
    foreign.mkdir()
    (foreign / "keep").write_text("mine")
    (foreign / scratch.TMP_MARK).write_text("/some/other/run/work/c1")
    (cell / "tmp").symlink_to(foreign)


def _owner_file_is_a_fifo(results: Path, victim: Path) -> None:
    cell = results / "run1" / "work" / "c1"
    cell.mkdir(parents=True)
    os.mkfifo(cell / scratch.OWNER_FILE)
    (cell / "keep").write_text("mine")


def _owner_file_is_a_symlink(results: Path, victim: Path) -> None:
    cell = results / "run1" / "work" / "c1"
    cell.mkdir(parents=True)
    _claim(victim)
    (cell / scratch.OWNER_FILE).symlink_to(victim / scratch.OWNER_FILE)
    (cell / "keep").write_text("mine")


WORK = {
    "cell-folder-is-a-symlink-to-victim": (_cell_is_symlink, True),
    "work-folder-is-a-symlink-to-victim": (_work_is_symlink, True),
    "symlinks-inside-a-dead-cell": (_link_inside_a_dead_cell, False),
    "tmp-link-to-another-runs-bh-folder": (_tmp_link_to_a_foreign_bh_folder, False),
    "owner-file-is-a-fifo": (_owner_file_is_a_fifo, True),
    "owner-file-is-a-symlink": (_owner_file_is_a_symlink, True),
}


@pytest.mark.parametrize("case", list(WORK), ids=list(WORK))
def test_the_work_dir_sweep_removes_only_proven_work_dirs_and_never_follows_a_symlink(tmp_path, case):
    make, cell_stays = WORK[case]
    results, victim = tmp_path / "r", _victim_folder(tmp_path)
    make(results, victim)
    cell = results / "run1" / "work" / "c1"
    done = gc(results)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert (victim / "keep").read_text() == "mine", "the sweep removed a victim's file through a symlink"
    for kept in victim.rglob("keep"):
        assert kept.read_text() == "mine"
    assert os.path.lexists(cell) == cell_stays, f"{cell} {'removed' if cell_stays else 'left'}: {done.stdout}"
