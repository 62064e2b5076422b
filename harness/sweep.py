"""Removing what a killed harness left behind: containers carrying our labels, process groups recorded in run dirs,
and the cells' scratch directories.

Only leftovers whose harness process is gone are touched, so two harness runs on one host never reap each other.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import RuntimeUnavailable
from harness.runtime import scratch
from harness.runtime.process import group_carries


def pid_alive(pid: int) -> bool:
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
    engines_unreachable: list[str] = field(default_factory=list)
    #: `work/<cell>` scratch (and its TMPDIR) of runs whose harness died
    work_dirs: list[Path] = field(default_factory=list)


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
        found = client.containers.list(all=True, filters={"label": f"{eng.LABEL_PREFIX}.owner-pid"},
                                       ignore_removed=True)
    except Exception as exc:  # noqa: BLE001 - the engine went away or hung while listing: reported, not raised
        if eng.trouble(engine, "containers list", exc, eng.DEFAULT_CALL_TIMEOUT_S) is None:
            raise
        swept.engines_unreachable.append(engine)
        return
    for c in found:
        labels = c.labels or {}
        if not everything:
            if labels.get(f"{eng.LABEL_PREFIX}.host") != host:
                continue
            try:
                owner = int(labels.get(f"{eng.LABEL_PREFIX}.owner-pid", "0"))
            except ValueError:
                owner = 0
            if owner == os.getpid() or (owner and pid_alive(owner)):
                continue
        try:
            c.remove(force=True)
            swept.containers.append(c.name)
        except Exception:  # noqa: BLE001 - removed meanwhile
            pass


def sweep_process_groups(results_dir: Path, swept: Swept) -> None:
    for record in Path(results_dir).glob("*/active/*.json"):
        try:
            data = json.loads(record.read_text())
            pgid, owner = int(data["pgid"]), int(data.get("owner_pid", 0))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if owner == os.getpid() or (owner and pid_alive(owner)):
            continue
        server_id = data.get("server_id")
        if server_id and not group_carries(pgid, server_id):
            record.unlink(missing_ok=True)  # the server is gone, and its group id may be someone else's by now
            continue
        try:
            os.killpg(pgid, signal.SIGKILL)
            swept.process_groups.append(pgid)
        except ProcessLookupError:
            pass
        except PermissionError:
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
