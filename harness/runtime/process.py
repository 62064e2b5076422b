"""The local-process runtime: `command + server args + --host 127.0.0.1 --port N`, in its own process session.

vLLM ignores SIGTERM (or deadlocks in the zmq handshake) mid-start-up, so teardown is SIGTERM to the whole group and to
every process carrying the server's id (harness.runtime.carriers: a daemon, a child in a group of its own, a server
that left for a new session), then SIGKILL to all of them after a short grace, scanning again for what forked
meanwhile. The group and the id are also written under the run directory while the server lives, so that `gc` can
still reap it after the harness itself was SIGKILLed.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness import nofollow
from harness.clock import SYSTEM, Clock
from harness.errors import BadRecord, CellStartError, FileRefused, RuntimeUnavailable
from harness.files import read_json
from harness.logfacts.timeline import Milestone
from harness.matrix.cells import Cell
from harness.memory.probe import MemoryProbe
from harness.memory.process_tree import ProcessesProbe, descendants
from harness.runtime import carriers, scratch
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.carriers import proc_start_time
from harness.runtime.ports import HOST, free_port, listener_pids, pid_in_group, port_answers
from harness.runtime.pull import PullObserver
from harness.runtime.reader import pump_lines
from harness.runtime.records import AppliedPatch, ContainerInfo
from harness.runtime.server_env import SERVER_ID_VAR, build_env
from harness.shell import Step, secret_safe_command

_PR_SET_PDEATHSIG = 1
#: How often a stop looks again whether the group is gone.
STOP_POLL_S = 0.05
#: How long a stop keeps SIGKILLing a group whose members linger after the leader was reaped.
REAP_S = 5.0


#: The server's (and, inherited, its children's) oom_score_adj: when a server eats host memory, the kernel's OOM killer
#: takes it, not the harness that records what happened (a process may always raise its own).
SERVER_OOM_SCORE_ADJ = 1000


def _child_setup() -> None:
    """In the child before exec: undo the signal mask the harness holds while starting a cell (it is inherited), make
    the server the OOM killer's first choice, and if the harness is SIGKILLed, give the server's leader SIGKILL too
    (Linux); gc reaps anything left."""
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(SERVER_OOM_SCORE_ADJ))
    except OSError:
        pass
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


#: Linux's largest pid: a recorded group id above it is no process group.
PID_MAX_LIMIT = scratch.PID_MAX_LIMIT
#: The longest active/ record read: ours are a few hundred bytes.
RECORD_MAX_BYTES = 64 * 1024


def boot_id() -> str | None:
    """This boot's id: start times and pids of another boot prove nothing."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def new_server_id(owner_pid: int, owner_start: int | None) -> str:
    """The id a server carries in SERVER_ID_VAR: its harness (pid and start time), then a random part. The process
    carries it, so the owner it names is the one that started it, whatever a record file claims."""
    return f"{owner_pid}-{owner_start or 0}-{secrets.token_hex(8)}"


class ActiveRecord(BaseModel):
    """`active/<cell>.json` while a local server lives: what `gc` needs to find its process group after the harness
    was SIGKILLed, and to prove the group is still that server before it kills anything."""

    model_config = ConfigDict(extra="forbid", strict=True)

    runtime: Literal["process"] = "process"
    cell_id: str
    pgid: int = Field(gt=1, le=PID_MAX_LIMIT, description="the server's process group (its leader's pid)")
    leader_start: int | None = Field(description="the leader's start time (/proc/PID/stat field 22)")
    boot_id: str | None = Field(description="the boot the start time counts from")
    owner_pid: int = Field(gt=0, le=PID_MAX_LIMIT, description="the harness process that started the server")
    owner_start: int | None = Field(description="the harness process's start time")
    server_id: str = Field(pattern=r"^[0-9]+-[0-9]+-[0-9a-f]{16}$",
                           description="SERVER_ID_VAR, which every process of the server carries")

    @model_validator(mode="after")
    def _owner_is_the_ids(self) -> ActiveRecord:
        if not self.server_id.startswith(f"{self.owner_pid}-{self.owner_start or 0}-"):
            raise ValueError("server_id does not name the record's owner_pid and owner_start")
        return self


def read_active_record(path: Path) -> ActiveRecord:
    """The record at `path` (harness.files: no symlink followed, no FIFO blocked on, a bounded read), or BadRecord
    saying why it is none."""
    try:
        data = read_json(path, RECORD_MAX_BYTES, follow=False)
    except FileRefused as exc:
        raise BadRecord(f"{exc.key}: {exc.message}" if exc.key else exc.message) from None
    if not isinstance(data, dict):
        raise BadRecord(f"is a JSON {type(data).__name__}, not an object")
    try:
        return ActiveRecord.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        got = "" if first["type"] == "missing" else f" (got {first.get('input')!r:.40})"
        raise BadRecord(f"{where + ': ' if where else ''}{first['msg']}{got}") from None


def write_active_record(path: Path, record: ActiveRecord, anchor: Path | None = None) -> None:
    """Whole or not at all: a harness SIGKILLed mid-write leaves no half record. Reached from `anchor` (the run
    folder; default the record's folder) never through a link, replacing only a record boot-harness wrote
    (harness.nofollow)."""
    nofollow.write_atomic(path.parent if anchor is None else anchor, path, record.model_dump_json())


class Proof(StrEnum):
    """What /proc says about a recorded process group."""

    ours = "a live process of the group carries the record's server id"
    gone = "no live process is in the group"
    other_boot = "the record is from another boot"
    reused = "the group's leader is another process now (its start time differs)"
    not_ours = "no live process of the group carries the record's server id"
    unknown = "there is no /proc to ask"


def prove_group(record: ActiveRecord) -> Proof:
    """Whether the group a record names is still that server: the only case in which `gc` may kill it."""
    now = boot_id()
    if record.boot_id is None or record.leader_start is None or now is None:
        return Proof.unknown
    if record.boot_id != now:
        return Proof.other_boot
    leader_start = proc_start_time(record.pgid)
    if leader_start is not None and leader_start != record.leader_start:
        return Proof.reused
    members = live_group_members(record.pgid)
    if not members:
        return Proof.gone
    return Proof.ours if group_carries(record.pgid, record.server_id, members) else Proof.not_ours


def group_carries(pgid: int, server_id: str, members: set[int] | None = None) -> bool:
    """Whether a live process of group `pgid` carries SERVER_ID_VAR=server_id in its environment (False where /proc
    cannot tell, or the processes are another user's: what is not proven ours is not killed)."""
    return any(carriers.carries(pid, server_id)
               for pid in (live_group_members(pgid) if members is None else members) or ())


def live_group_members(pgid: int) -> set[int] | None:
    """The group's processes that are not zombies, or None where /proc cannot tell (not Linux).

    A zombie holds no memory and no GPU, but `kill(-pgid, 0)` counts it: an engine child orphaned by its leader is
    reparented to PID 1 (or a subreaper), and where that does not reap it (a container without an init, a CI job
    under a subreaper) the group would look alive for ever."""
    if not os.path.isdir("/proc/self"):
        return None
    found: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            found.add(int(entry.name))
    return found


def _cache_root(ctx: CellContext) -> str | None:
    """The shared compile cache as a local server sees it: the host's own path."""
    return None if ctx.compile_cache is None else str(ctx.compile_cache)


class ProcessServer:
    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], port: int, pid_file: Path,
                 clock: Clock = SYSTEM, server_id: str | None = None, anchor: Path | None = None):
        self.proc, self.argv, self.port = proc, argv, port
        self.clock = clock
        self.base_url = f"http://{HOST}:{port}"
        self.pgid = proc.pid  # start_new_session: the leader's pid is the group id
        self.server_id = server_id  # SERVER_ID_VAR: what every process of this server carries, whatever its group
        #: Processes still carrying the id when the teardown's rounds ran out: its active/ record stays, for gc.
        self.left: list[int] = []
        self._pid_file = pid_file
        #: The run folder the record is reached from, never through a link below it.
        self._anchor = pid_file.parent if anchor is None else anchor
        self._stopped = False
        self._lock = threading.Lock()

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def owns_listener(self) -> bool:
        pids = listener_pids(self.port)
        if pids is None:
            return True  # no /proc to ask; the port was free when we chose it
        return any(pid_in_group(p, self.pgid) or (self.server_id is not None and carriers.carries(p, self.server_id))
                   for p in pids)

    def _signal_group(self, sig: int) -> bool:
        try:
            os.killpg(self.pgid, sig)
            return True
        except ProcessLookupError:
            return False

    def group_alive(self) -> bool:
        members = live_group_members(self.pgid)
        if members is not None:
            return bool(members)
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

    def stop(self, grace_s: float = 3.0) -> int | None:
        with self._lock:
            if not self._stopped:
                self._stopped = True
                self._terminate(grace_s)
                if not self.left:  # else gc finds what is left by the record's server id
                    nofollow.unlink(self._anchor, self._pid_file)
        return self.proc.poll()

    def _signal_carriers(self, sig: int) -> list[carriers.Carrier]:
        """The server's processes outside its group (the group is signalled as one)."""
        return [] if self.server_id is None else carriers.signal_all(self.server_id, sig, outside=self.pgid)

    def _terminate(self, grace_s: float) -> None:
        # The leader may have exited while engine children still hold the group, and a process may have left the
        # group (a daemon, a new session): signal the group and every process carrying the server's id either way.
        grouped = self._signal_group(signal.SIGTERM)
        termed = self._signal_carriers(signal.SIGTERM)
        if grouped or termed:
            deadline = self.clock.now() + grace_s
            while self.clock.now() < deadline:
                self.proc.poll()
                termed = [c for c in termed if carriers.alive(c)]
                if not termed and not self.group_alive():
                    break
                self.clock.sleep(STOP_POLL_S)
            else:
                self._signal_group(signal.SIGKILL)
                for c in termed:
                    carriers.send(c, self.server_id or "", signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = self.clock.now() + REAP_S
        while self.group_alive() and self.clock.now() < deadline:
            self._signal_group(signal.SIGKILL)
            self.clock.sleep(STOP_POLL_S)
        if self.server_id is not None:  # what forked while it was being ended, or ignored the TERM
            self.left = carriers.kill_all(self.server_id, self.clock).left

    def container_info(self) -> ContainerInfo | None:
        return None

    def applied_patches(self) -> list[AppliedPatch]:
        return []

    def pids(self) -> set[int]:
        """The leader's tree; once the leader is gone, what is left of its group (a slower scan of /proc)."""
        if self.proc.poll() is None:
            return descendants([self.proc.pid])
        return live_group_members(self.pgid) or set()

    def memory_probe(self) -> MemoryProbe:
        return ProcessesProbe(self.pids, f"the server (process group {self.pgid})")


class ProcessRuntime:
    name = "process"

    def __init__(self, command: list[str], base_env: dict[str, str] | None = None,
                 port_picker: Callable[[], int] | None = None, clock: Clock = SYSTEM):
        self.command = list(command)
        self.clock = clock  # its servers' stop grace
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.pick_port = port_picker or (lambda: free_port(HOST))
        self.notes: list[str] = []
        self.pull_observer: PullObserver | None = None  # nothing to pull: a process runs what is installed

    def preflight(self, cells: list[Cell], gpu_checks: bool = True) -> None:
        """Each command the cells run (the matrix's, or a cell's own) names an executable."""
        for exe in dict.fromkeys(self.command_of(c)[0] for c in cells) if cells else [self.command[0]]:
            if os.sep in exe:
                if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                    raise RuntimeUnavailable(f"command: {exe} is not an executable file")
            elif shutil.which(exe, path=self.base_env.get("PATH")) is None:
                raise RuntimeUnavailable(f"command: {exe!r} is not on PATH")

    def command_of(self, cell: Cell) -> list[str]:
        """The cell's own command (a bisect's candidate build) or the matrix's."""
        return list(cell.command or self.command)

    def argv(self, cell: Cell, port: int) -> list[str]:
        return [*self.command_of(cell), *cell.server_args, "--host", HOST, "--port", str(port)]

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> ProcessServer:
        port = self.pick_port()
        if port_answers(HOST, port):
            raise CellStartError(f"port {port} already answers before our server started")
        argv = self.argv(cell, port)
        owner_start = proc_start_time(os.getpid())
        env = build_env(cell.env, cache_root=_cache_root(ctx), work_dir=ctx.work_dir, gpu_ids=ctx.gpu_ids,
                        server_id=new_server_id(os.getpid(), owner_start), base=self.base_env)
        pid_file = ctx.run_dir / "active" / f"{cell.id}.json"
        try:  # in the run folder, never through a link: a record that cannot be written is no server started
            os.close(nofollow.open_dir(ctx.run_dir, pid_file.parent, create=True))
            nofollow.check_file(ctx.run_dir, pid_file)
        except FileRefused as exc:
            raise CellStartError(str(exc)) from None
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup, cwd=ctx.work_dir,
            )
        except OSError as exc:
            raise CellStartError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        ctx.mark(Milestone.started)
        server = ProcessServer(proc, argv, port, pid_file, self.clock, server_id=env[SERVER_ID_VAR],
                               anchor=ctx.run_dir)
        try:
            write_active_record(pid_file, ActiveRecord(
                cell_id=cell.id, pgid=proc.pid, leader_start=proc_start_time(proc.pid), boot_id=boot_id(),
                owner_pid=os.getpid(), owner_start=owner_start, server_id=env[SERVER_ID_VAR]), anchor=ctx.run_dir)
        except FileRefused as exc:  # swapped in since the check: the server is stopped, unrecorded
            server.stop()
            raise CellStartError(str(exc)) from None
        threading.Thread(target=pump_lines, args=(proc.stdout, on_line), daemon=True, name=f"log-{cell.id}").start()
        return server

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        env = build_env(cell.env, cache_root=_cache_root(ctx), gpu_ids=ctx.gpu_ids)
        return secret_safe_command(env, self.argv(cell, host_port), self.base_env)

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        return read_host_file(Path(path))

    def image_labels(self, ref: str) -> dict[str, str]:
        return {}  # a process runs no image

    def image_digest(self, ref: str) -> str | None:
        return None  # a process runs no image: nothing proves a command is the build a record ran

    def planned_command_line(self, cell: Cell, ctx: CellContext,
                             host_port: int = 8000) -> tuple[list[str], list[Step]]:
        """A local process needs nothing prepared: the plan is the command itself."""
        return self.command_line(cell, ctx, host_port), []
