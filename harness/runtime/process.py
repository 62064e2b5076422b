"""The local-process runtime: `command + server args + --host 127.0.0.1 --port N`, in its own process session.

vLLM ignores SIGTERM (or deadlocks in the zmq handshake) mid-start-up, so teardown is SIGTERM to the whole group, then
SIGKILL to the group after a short grace. The group id is also written under the run directory while the server lives,
so that `gc` can still reap it after the harness itself was SIGKILLed.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from harness.runtime.pull import PullObserver
from harness.cells import Cell
from harness.clock import SYSTEM, Clock
from harness.errors import CellStartError, RuntimeUnavailable
from harness.logfacts.timeline import Milestone
from harness.runtime.records import AppliedPatch, ContainerInfo
from harness.runtime import compile_cache, scratch
from harness.runtime.base import CellContext, LineSink, read_host_file
from harness.runtime.ports import free_port, listener_pids, pid_in_group, port_answers
from harness.runtime.reader import pump_lines
from harness.masking import is_secret_key
from harness.shell import env_token, secret_safe_argv

HOST = "127.0.0.1"
#: What every server gets: plain logs (the parser still strips ANSI) and a per-cell home for caches and sockets.
SERVER_ENV = {"NO_COLOR": "1", "VLLM_DISABLE_LOG_LOGO": "1", "PYTHONUNBUFFERED": "1"}
_PR_SET_PDEATHSIG = 1
#: Marks every process of a server (children inherit it) with the id its active/ record holds: gc kills a recorded
#: process group only while a process in it still carries the id, never a group that merely reuses the number.
SERVER_ID_VAR = "BOOT_HARNESS_SERVER_ID"
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


def cell_dirs(work_dir: Path) -> dict[str, str]:
    """A private TMPDIR and caches per cell. TMPDIR is short and outside the run directory: vLLM puts its zmq IPC
    sockets there, and a unix socket path longer than 107 bytes makes the engine fail to start."""
    work_dir.mkdir(parents=True, exist_ok=True)
    short_tmp = work_dir / "tmp"
    if not short_tmp.exists():
        short_tmp.symlink_to(tempfile.mkdtemp(prefix=scratch.TMP_PREFIX))
    dirs = {
        "TMPDIR": short_tmp.resolve(),
        "VLLM_CACHE_ROOT": work_dir / "vllm-cache",
        "TORCHINDUCTOR_CACHE_DIR": work_dir / "inductor-cache",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in dirs.items()}


def gpu_env(gpu_ids: list[str] | None) -> dict[str, str]:
    """A local server sees only the GPUs the scheduler gave its cell."""
    return {} if gpu_ids is None else {"CUDA_VISIBLE_DEVICES": ",".join(gpu_ids)}


def group_carries(pgid: int, server_id: str) -> bool:
    """Whether a live process of group `pgid` carries SERVER_ID_VAR=server_id in its environment (True where /proc
    cannot tell)."""
    if not os.path.isdir("/proc/self"):
        return True
    needle = f"{SERVER_ID_VAR}={server_id}".encode()
    for pid in live_group_members(pgid) or ():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    return True
        except OSError:
            continue
    return False


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


class ProcessServer:
    def __init__(self, proc: subprocess.Popen[bytes], argv: list[str], port: int, pid_file: Path,
                 clock: Clock = SYSTEM):
        self.proc, self.argv, self.port = proc, argv, port
        self.clock = clock
        self.base_url = f"http://{HOST}:{port}"
        self.pgid = proc.pid  # start_new_session: the leader's pid is the group id
        self._pid_file = pid_file
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
        return any(pid_in_group(p, self.pgid) for p in pids)

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
                self._pid_file.unlink(missing_ok=True)
        return self.proc.poll()

    def _terminate(self, grace_s: float) -> None:
        # The leader may have exited while engine children still hold the group: signal the group either way.
        if self._signal_group(signal.SIGTERM):
            deadline = self.clock.now() + grace_s
            while self.clock.now() < deadline:
                self.proc.poll()
                if not self.group_alive():
                    break
                self.clock.sleep(STOP_POLL_S)
            else:
                self._signal_group(signal.SIGKILL)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        deadline = self.clock.now() + REAP_S
        while self.group_alive() and self.clock.now() < deadline:
            self._signal_group(signal.SIGKILL)
            self.clock.sleep(STOP_POLL_S)

    def container_info(self) -> ContainerInfo | None:
        return None

    def applied_patches(self) -> list[AppliedPatch]:
        return []


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
        exe = self.command[0]
        if os.sep in exe:
            if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
                raise RuntimeUnavailable(f"command: {exe} is not an executable file")
        elif shutil.which(exe, path=self.base_env.get("PATH")) is None:
            raise RuntimeUnavailable(f"command: {exe!r} is not on PATH")

    def argv(self, cell: Cell, port: int) -> list[str]:
        return [*self.command, *cell.server_args, "--host", HOST, "--port", str(port)]

    def start(self, cell: Cell, ctx: CellContext, on_line: LineSink) -> ProcessServer:
        port = self.pick_port()
        if port_answers(HOST, port):
            raise CellStartError(f"port {port} already answers before our server started")
        argv = self.argv(cell, port)
        cache = compile_cache.server_env(str(ctx.compile_cache)) if ctx.compile_cache else {}
        env = {**self.base_env, **SERVER_ENV, **cell_dirs(ctx.work_dir), **cache, **cell.env, **gpu_env(ctx.gpu_ids),
               SERVER_ID_VAR: secrets.token_hex(8)}
        pid_dir = ctx.run_dir / "active"
        pid_dir.mkdir(parents=True, exist_ok=True)
        try:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_child_setup, cwd=ctx.work_dir,
            )
        except OSError as exc:
            raise CellStartError(f"cannot start {argv[0]}: {exc.strerror or exc}") from None
        ctx.mark(Milestone.started)
        pid_file = pid_dir / f"{cell.id}.json"
        pid_file.write_text(json.dumps({"runtime": "process", "pgid": proc.pid, "owner_pid": os.getpid(),
                                        "cell_id": cell.id, "server_id": env[SERVER_ID_VAR]}))
        threading.Thread(target=pump_lines, args=(proc.stdout, on_line), daemon=True, name=f"log-{cell.id}").start()
        return ProcessServer(proc, argv, port, pid_file, self.clock)

    def command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> list[str]:
        cache = compile_cache.server_env(str(ctx.compile_cache)) if ctx.compile_cache else {}
        env = {**SERVER_ENV, **cache, **cell.env, **gpu_env(ctx.gpu_ids)}
        return [*(env_token(k, v, is_secret_key(k)) for k, v in env.items()),
                *secret_safe_argv(self.argv(cell, host_port), {**self.base_env, **cell.env})]

    def read_server_file(self, cell: Cell, path: str) -> bytes | None:
        return read_host_file(Path(path))

    def planned_command_line(self, cell: Cell, ctx: CellContext, host_port: int = 8000) -> tuple[list[str], list[str]]:
        """A local process needs nothing prepared: the plan is the command itself."""
        return self.command_line(cell, ctx, host_port), []
