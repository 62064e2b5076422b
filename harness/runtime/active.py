"""The proof behind killing a local server we no longer hold: `active/<cell>.json` records the server's process group
and the id its processes carry (SERVER_ID_VAR) while it lives, and `gc` and the start-up sweep (harness.sweep) kill a
recorded group only when /proc proves it is still that server (same boot, same leader, a live member carrying the id).

The process runtime (harness.runtime.process) writes the record; this module reads it and proves it, and nothing here
signals a process.
"""

from __future__ import annotations

import os
import secrets
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from harness import nofollow
from harness.errors import BadRecord, FileRefused
from harness.files import read_json
from harness.runtime import carriers, scratch
from harness.runtime.carriers import proc_start_time

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
