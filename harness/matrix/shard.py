"""`--shard I/N`: a deterministic, disjoint split of the cells whose union is the whole selection.

A cell's shard comes from its id alone — the first 8 bytes of sha256(id), mod N — never from its position, so adding a
value to an axis moves no existing cell to another shard (and last night's shard logs still line up). The price of
hashing is balance: shards hold about len/N cells each, not exactly, and a tiny matrix can leave a shard empty. An
empty shard is not an error: `run` says so on stderr and writes an empty, complete run, so a CI shard matrix of any
width stays green and `merge` still gets one run directory per shard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TypeVar

from harness.errors import UsageError

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")

T = TypeVar("T")


def parse_shard(text: str) -> tuple[int, int]:
    """`"2/3"` → `(2, 3)`: shard I of N, 1 ≤ I ≤ N. Anything else is a UsageError with one line."""
    m = _SHARD.match(str(text))
    if not m:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 1/3 (shard I of N, counting from 1)")
    i, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise UsageError(f"--shard {text!r}: N must be at least 1")
    if not 1 <= i <= n:
        raise UsageError(f"--shard {text!r}: I must be between 1 and {n} (shards count from 1)")
    return i, n


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


def _id(cell: object) -> str:
    return cell if isinstance(cell, str) else cell.id  # type: ignore[attr-defined]
