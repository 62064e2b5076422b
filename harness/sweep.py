"""Removing what a killed harness left behind: containers carrying our labels, process groups recorded in run dirs,
and the cells' scratch directories.

Only leftovers whose harness process is gone are touched, so two harness runs on one host never reap each other; and
only what is proven the harness's: a process group whose live member carries the server id its record names (a record
is a file anyone can write), any other process carrying that exact id (a daemon or a child that left the group:
harness.runtime.carriers), a work dir claimed by `.owner.json`, never through a symlink.
"""

from __future__ import annotations

import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from harness.clock import SYSTEM, Clock
from harness.errors import BadRecord, RuntimeUnavailable
from harness.runtime import carriers, scratch
from harness.runtime.active import (
    PID_MAX_LIMIT,
    ActiveRecord,
    Proof,
    prove_group,
    read_active_record,
)
from harness.runtime.carriers import proc_start_time


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (0, negatives and numbers past any pid name no single process: False)."""
    if not 0 < pid <= PID_MAX_LIMIT:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@dataclass
class Swept:
    containers: list[str] = field(default_factory=list)
    process_groups: list[int] = field(default_factory=list)
    #: (pid, cell id) of each process killed outside its server's recorded group, found by the server id it carried
    processes: list[tuple[int, str]] = field(default_factory=list)
    engines_unreachable: list[str] = field(default_factory=list)
    #: `work/<cell>` scratch (and its TMPDIR) of runs whose harness died
    work_dirs: list[Path] = field(default_factory=list)
    #: One line each about a record that named something not killed: why, and whether the record was kept.
    notes: list[str] = field(default_factory=list)


def sweep_containers(engine: str, swept: Swept, everything: bool = False) -> None:
    from harness.runtime import engine as eng

    try:
        client = eng.connect(engine)
    except RuntimeUnavailable:
        swept.engines_unreachable.append(engine)
        return
    host = socket.gethostname()
    try:
        # ignore_removed: docker-py lists, then inspects each; one whose run removed it in between is no leftover
        found = client.containers.list(all=True, filters={"label": eng.OWNER_PID_LABEL},
                                       ignore_removed=True)
    except Exception as exc:  # the engine went away or hung while listing: reported, not raised
        if eng.trouble(engine, "containers list", exc, eng.DEFAULT_CALL_TIMEOUT_S) is None:
            raise
        swept.engines_unreachable.append(engine)
        return
    for c in found:
        labels = c.labels or {}
        if not everything:
            if labels.get(eng.OWNER_HOST_LABEL) != host:
                continue
            try:
                owner = int(labels.get(eng.OWNER_PID_LABEL, "0"))
            except ValueError:
                owner = 0
            if owner == os.getpid() or (owner and pid_alive(owner)):
                continue
        try:
            c.remove(force=True)
            swept.containers.append(str(c.name))  # a listed container has its name
        except Exception:  # noqa: BLE001 - removed meanwhile
            pass


def _owner_alive(pid: int, start: int | None) -> bool:
    """The harness process that wrote a record still runs (the same process: a reused pid has another start time)."""
    if pid == os.getpid():
        return True
    if not pid_alive(pid):
        return False
    now = proc_start_time(pid)
    return start is None or now is None or now == start


def _kill_carriers(rec: ActiveRecord, record: Path, swept: Swept, clock: Clock) -> bool:
    """SIGKILL every process carrying the record's server id (the proof is the id each carries, not the record);
    False, with a note, when some still did after the rounds (the record is kept for the next gc)."""
    ended = carriers.kill_all(rec.server_id, clock)
    swept.processes.extend((c.pid, rec.cell_id) for c in ended.killed if c.pgid != rec.pgid)
    if ended.left:
        swept.notes.append(f"left {record}: process(es) {', '.join(map(str, ended.left))} still carry its server id "
                           f"after {carriers.KILL_ROUNDS} rounds of SIGKILL")
    return not ended.left


def sweep_process_groups(results_dir: Path, swept: Swept, clock: Clock = SYSTEM) -> None:
    """Kill the process groups of killed runs' servers, each only when proven still that server (prove_group), and
    every other process carrying the server id a record names; a record that proves nothing is never a kill and never
    a traceback: it is kept (malformed) or removed (stale), and said so in `swept.notes`."""
    for record in sorted(Path(results_dir).glob("*/active/*.json")):
        if scratch.through_symlink(record.parent, results_dir):
            swept.notes.append(f"left {record}: its folder is a symlink (not followed)")
            continue
        try:
            rec = read_active_record(record)
        except BadRecord as bad:
            swept.notes.append(f"left {record}: {bad} (not a record the harness wrote; nothing killed)")
            continue
        if _owner_alive(rec.owner_pid, rec.owner_start):
            continue  # a live run's server
        if rec.pgid in (os.getpgrp(), os.getpid()):
            swept.notes.append(f"left {record}: process group {rec.pgid} is this process's own (nothing killed)")
            continue
        proof = prove_group(rec)
        if proof is Proof.unknown:
            swept.notes.append(f"left {record}: cannot prove process group {rec.pgid} is the harness's ({proof.value})")
            continue
        if proof is Proof.ours:
            try:
                os.killpg(rec.pgid, signal.SIGKILL)
                swept.process_groups.append(rec.pgid)
            except ProcessLookupError:
                pass
            except PermissionError:
                swept.notes.append(f"left {record}: not allowed to kill process group {rec.pgid}")
                continue
        elif proof in (Proof.reused, Proof.not_ours):
            swept.notes.append(f"removed {record}: process group {rec.pgid} is not its server any more "
                               f"({proof.value}); not killed")
        if proof is not Proof.other_boot and not _kill_carriers(rec, record, swept, clock):
            continue
        record.unlink(missing_ok=True)


def sweep_before_run(results_dir: Path, runtime_name: str) -> Swept:
    """What every run (CLI or pytest) does first: reap what killed harness runs left, for this runtime."""
    return sweep(results_dir, [runtime_name] if runtime_name in ("docker", "podman") else [])


def sweep(results_dir: Path | None, engines: list[str], everything: bool = False) -> Swept:
    swept = Swept()
    if results_dir is not None and Path(results_dir).is_dir():
        sweep_process_groups(Path(results_dir), swept)
        swept.work_dirs = scratch.sweep(Path(results_dir), pid_alive)  # after the groups: nothing writes there now
    for engine in engines:
        sweep_containers(engine, swept, everything)
    return swept
