"""Which cells a command or a pytest session works on: the matrix file's cells after `--select` and `--shard`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.matrix.cells import Cell, select_cells
from harness.matrix.load import LoadedMatrix, load_matrix
from harness.matrix.shard import format_shard, parse_shard, shard_cells


@dataclass(frozen=True)
class Selected:
    loaded: LoadedMatrix
    cells: list[Cell]
    #: "I/N" when a shard was asked for.
    shard: str | None
    #: How many cells the selection held before the shard split.
    total: int


def selected(matrix: Path, select: list[str] | None, shard: str | None = None,
             placeholders: bool = False) -> Selected:
    """The matrix's cells after `--select` and `--shard` (with `placeholders`, unset variables read as `<NAME>`)."""
    loaded = load_matrix(matrix, placeholders=placeholders)
    cells = select_cells(list(loaded.cells), select, loaded.matrix)
    if not shard:
        return Selected(loaded, cells, None, len(cells))
    i, n = parse_shard(shard)
    return Selected(loaded, shard_cells(cells, i, n), format_shard(i, n), len(cells))
