"""GPUs held across processes: two runs on one runner (two CI jobs, a person beside the nightly) must not boot cells
on one GPU at once — the second would see the first's memory and be refused for it (`gpu_memory_busy`), a verdict on
the other run's server, not its own configuration. A cell holds an flock per GPU (by UUID, so two runs that number
GPUs differently agree) while it runs; another run's cell waits for it, then for the memory to return (the idle
wait). The kernel lets go of a lock with its process, so a killed run never blocks a GPU.

The lock files live in one host-wide folder whatever a process's environment (TMPDIR is not one: two runs under two
TMPDIRs must still meet), root's and sticky, so nobody removes or replaces another user's lock there: the first of
`ROOTS` that is. Each is opened read-only, never through a link, and only a regular file is locked; nothing is ever
written into one."""

from __future__ import annotations

import fcntl
import os
import stat
import threading
from pathlib import Path

from harness.clock import SYSTEM, Clock
from harness.errors import FileRefused, UsageError
from harness.files import kind_of
from harness.gpu.inventory import Inventory

#: How often a cell waiting for another run's GPU looks again.
POLL_S = 0.25
#: Host-wide folders for the locks, tried in this order: the first that is root's, sticky and open to all is the
#: same for every user and process on the host.
ROOTS = (Path("/run/lock"), Path("/var/lock"), Path("/dev/shm"), Path("/tmp"))
PREFIX = "boot-harness-gpu-"


def _shared(st: os.stat_result) -> bool:
    """A folder every user may make locks in and none may take away another's: root's, sticky, open to all."""
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and bool(st.st_mode & stat.S_ISVTX) \
        and bool(st.st_mode & stat.S_IWOTH)


def lock_root(candidates: tuple[Path, ...] = ROOTS) -> Path:
    """The first of `candidates` fit to hold the host's GPU locks (root's own links, as /var/lock -> /run/lock, are
    followed); UsageError when none is."""
    for root in candidates:
        try:
            if _shared(os.stat(root)):
                return root
        except OSError:
            continue
    raise UsageError(f"no folder for the host's GPU locks: none of {', '.join(map(str, candidates))} is a folder of "
                     "root's with the sticky bit that every user may write (mode 1777)")


def check_root(root: Path) -> Path:
    """`root` as a folder for GPU locks (one given, not found): a folder, not a link, root's or this user's, and
    sticky if others may write it (else another user could swap a lock for a link or a file of theirs). UsageError
    naming what is wrong."""
    try:
        st = os.lstat(root)
    except OSError as exc:
        raise UsageError(f"{root}: cannot hold the host's GPU locks: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"{root}: cannot hold the host's GPU locks: it is {kind_of(st.st_mode).value}, not a folder")
    if st.st_uid not in (0, os.geteuid()):
        raise UsageError(f"{root}: cannot hold the host's GPU locks: owned by uid {st.st_uid}, not root or this user")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        raise UsageError(f"{root}: cannot hold the host's GPU locks: others may write it and it has no sticky bit "
                         f"(mode {stat.S_IMODE(st.st_mode):o}); chmod 1777 it")
    return root


def open_lock(root: Path, name: str) -> int:
    """`root/<PREFIX><name>.lock`, opened read-only to be flocked (made if missing): never through a link, never a
    FIFO or device, never written. FileRefused for anything but a regular file there, left as it is."""
    path = root / f"{PREFIX}{name}.lock"
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            st: os.stat_result | None = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise FileRefused(str(path), "", f"is {kind_of(st.st_mode).value}, not a GPU lock boot-harness made; "
                                             "left alone")
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644,
                         dir_fd=dfd)
        except OSError as exc:
            raise FileRefused(str(path), "", f"cannot be opened as a GPU lock: {exc.strerror or exc}") from None
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise FileRefused(str(path), "", f"is {kind_of(st.st_mode).value}, not a GPU lock boot-harness made; "
                                         "left alone")
    if st.st_uid == os.geteuid() and st.st_nlink == 1 and st.st_size == 0 and stat.S_IMODE(st.st_mode) != 0o644:
        os.fchmod(fd, 0o644)  # made by us under a strict umask: another user's run must be able to open it too
    return fd


class HostGpuLocks:
    def __init__(self, inventory: Inventory, clock: Clock = SYSTEM, root: Path | None = None):
        self.inventory, self.clock = inventory, clock
        #: Only GPUs other processes see too (NVML's): a fake inventory's GPUs are this process's own.
        self.enabled = inventory.kind == "nvml" or root is not None
        #: Where the lock files are: found (lock_root) when GPUs are locked at all, so a host with no fit folder is
        #: refused before a cell starts; or given (a test), and checked.
        self.root = check_root(root) if root is not None else lock_root() if self.enabled else None
        self._names: dict[int, str] = {}
        #: What a wait for another run's GPU took, per cell (seconds): the executor notes it in the cell's log.
        self.waited: dict[tuple[int, ...], float] = {}
        self._lock = threading.Lock()

    def _name(self, index: int) -> str:
        with self._lock:
            if index not in self._names:
                info = self.inventory.info(index)
                self._names[index] = "".join(c if c.isalnum() or c in "-_" else "_" for c in (info.uuid or str(index)))
            return self._names[index]

    def acquire(self, indices: list[int], stop: threading.Event) -> list[int] | None:
        """File descriptors holding every GPU in `indices`, waiting while another process holds one; None when
        `stop` is set first."""
        if not self.enabled or not indices:
            return []
        # Each lock once: flock is per open file, so a second open of a GPU's lock by this process would wait on the
        # first for ever (`gpus: [0, 1, 0]`, or an index and its UUID).
        names = list(dict.fromkeys(self._name(i) for i in indices))
        t0 = self.clock.now()
        while True:
            held: list[int] = []
            for name in names:
                assert self.root is not None
                try:
                    fd = open_lock(self.root, name)
                except BaseException:
                    self.release(held)
                    raise
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    break
                held.append(fd)
            else:
                self.waited[tuple(indices)] = self.clock.now() - t0
                return held
            self.release(held)
            if self.clock.wait(stop, POLL_S):
                return None

    @staticmethod
    def release(fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)
