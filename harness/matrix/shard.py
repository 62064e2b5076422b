"""`--shard I/N`: a deterministic, disjoint split of the cells whose union is the whole selection.

A cell's shard comes from its id alone — the first 8 bytes of sha256(id), mod N — never from its position, so adding a
value to an axis moves no existing cell to another shard (and last night's shard logs still line up). The price of
hashing is balance: shards hold about len/N cells each, not exactly, and a tiny matrix can leave a shard empty. An
empty shard is not an error: `run` says so on stderr and writes an empty, complete run, so a CI shard matrix of any
width stays green and `merge` still gets one run directory per shard.

`--shard auto` is I/N read from the scheduler that started the process (harness.matrix.scheduler): a Buildkite
`parallelism` job, a Kubernetes Indexed Job's pod, a Slurm array task.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from harness.errors import UsageError
from harness.matrix.scheduler import SchedulerRef, detect

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class _HasId(Protocol):
    @property
    def id(self) -> str: ...


#: a cell (anything with an `.id`) or a cell id
T = TypeVar("T", bound="str | _HasId")


#: `--shard auto`: the index and count come from the scheduler's variables.
AUTO = "auto"


def parse_shard(text: str, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """`"2/3"` → `(2, 3)`: shard I of N, 1 ≤ I ≤ N; `"auto"`: the scheduler's, read from `env` (default: this
    process's environment). Anything else is a UsageError with one line."""
    if str(text).strip() == AUTO:
        ref = detect(os.environ if env is None else env)
        return ref.index - ref.first + 1, ref.count
    m = _SHARD.match(str(text))
    if not m:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 1/3 (shard I of N, counting from 1), or auto")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise UsageError(f"--shard {text!r}: N must be at least 1")
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text!r}: I must be between 1 and {n} (shards count from 1)")
    return i, n


def resolve_shard(text: str | None, env: Mapping[str, str] | None = None) -> tuple[str | None, SchedulerRef | None]:
    """`--shard` as the run records it: `"I/N"` (None: no shard) and, for `auto`, the scheduler job it came from."""
    if not text:
        return None, None
    if str(text).strip() == AUTO:
        ref = detect(os.environ if env is None else env)
        return ref.shard, ref
    return format_shard(*parse_shard(text)), None


def format_shard(i: int, n: int) -> str:
    return f"{i}/{n}"


def shard_of(cell_id: str, n: int) -> int:
    """The shard (1..n) a cell id belongs to, for any matrix it is in."""
    if n < 1:
        raise ValueError("n must be at least 1")
    digest = hashlib.sha256(cell_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n + 1


def shard_cells(cells: Sequence[T], i: int, n: int) -> list[T]:
    """The cells of shard i of n, in their original order. Works on anything with an `.id` (a Cell) or on ids."""
    if not 1 <= i <= n:
        raise UsageError(f"--shard {i}/{n}: I must be between 1 and {n}")
    return [c for c in cells if shard_of(_id(c), n) == i]


def _id(cell: str | _HasId) -> str:
    return cell if isinstance(cell, str) else cell.id
