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
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from harness import nofollow
from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, FileRefused, RuntimeUnavailable
from harness.logfacts.timeline import Milestone
from harness.matrix.cells import Cell
from harness.memory.probe import MemoryProbe
from harness.memory.process_tree import ProcessesProbe, descendants
from harness.runtime import carriers
from harness.runtime.active import ActiveRecord, boot_id, live_group_members, new_server_id, write_active_record
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.carriers import proc_start_time
from harness.runtime.ports import HOST, free_port, listener_pids, pid_in_group, port_answers
from harness.runtime.pull import PullObserver
from harness.runtime.reader import pump_lines
from harness.runtime.records import AppliedPatch, ContainerInfo, ServerStop, Stopped
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
        self._stopped: ServerStop | None = None
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

    def stop(self, grace_s: float = 3.0) -> ServerStop:
        with self._lock:
            if self._stopped is None:
                self._stopped = self._terminate(grace_s)
                if self._stopped.how != Stopped.left:  # else gc finds what is left by the record's server id
                    nofollow.unlink(self._anchor, self._pid_file)
            return self._stopped

    def _signal_carriers(self, sig: int) -> list[carriers.Carrier]:
        """The server's processes outside its group (the group is signalled as one)."""
        return [] if self.server_id is None else carriers.signal_all(self.server_id, sig, outside=self.pgid)

    def _terminate(self, grace_s: float) -> ServerStop:
        """End the server; how, from what this did: nothing to signal (exited), the group gone within the grace
        (terminated), the grace run out (killed), or processes found still there after every SIGKILL (left)."""
        t0 = self.clock.now()
        self.proc.poll()  # a leader that exited on its own is reaped first: its group is then gone, not signalled
        # The leader may have exited while engine children still hold the group, and a process may have left the
        # group (a daemon, a new session): signal the group and every process carrying the server's id either way.
        grouped = self._signal_group(signal.SIGTERM)
        termed = self._signal_carriers(signal.SIGTERM)
        how = Stopped.exited
        if grouped or termed:
            how = Stopped.terminated
            deadline = self.clock.now() + grace_s
            while self.clock.now() < deadline:
                self.proc.poll()
                termed = [c for c in termed if carriers.alive(c)]
                if not termed and not self.group_alive():
                    break
                self.clock.sleep(STOP_POLL_S)
            else:
                how = Stopped.killed
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
            ended = carriers.kill_all(self.server_id, self.clock)
            self.left = ended.left
            if ended.killed:  # a process outlived the group's end (or forked meanwhile): SIGKILL ended the server
                how = Stopped.killed
        lingering = self.group_alive()
        if self.left or lingering:  # a group on this host's /proc is counted; one seen only by kill(0) is one
            left = len(set(self.left) | (live_group_members(self.pgid) or set())) or 1
            return ServerStop(how=Stopped.left, grace_s=grace_s, exit_code=self.proc.poll(), left=left)
        gone = 0.0 if how == Stopped.exited else round(self.clock.now() - t0, 3)
        return ServerStop(how=how, grace_s=grace_s, gone_s=gone, exit_code=self.proc.poll())

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
