"""Which cells a command or a pytest session works on: the matrix file's cells after `--select` and `--shard`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from harness.jsonout import JsonOutput, Number
from harness.matrix.cells import Cell, select_cells
from harness.matrix.load import LoadedMatrix, load_matrix
from harness.matrix.shard import format_shard, parse_shard, shard_cells
from harness.verdict import Outcome, Reason


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


# ---------------------------------------------------------------- `cells --json` (harness.jsonout)


class CellExpectedJson(JsonOutput):
    outcome: Outcome
    reason: Reason | None
    within_s: Number | None


class CellJson(JsonOutput):
    cell_id: str
    axes: dict[str, str]
    server_args: list[str] = Field(description="the arguments after the server command, secrets masked")
    env: dict[str, str] = Field(description="the cell's environment, secrets masked")
    image: str | None
    expected: CellExpectedJson | None


class CellsJson(JsonOutput):
    """`boot-harness cells --json`: the matrix's cells after --select and --shard, each with the record's keys."""

    matrix: str
    selection: list[str]
    shard: str | None = Field(description="I/N when a shard was asked for")
    total: int = Field(description="how many cells the selection held before the shard split")
    cells: list[CellJson]


def cells_output(matrix: Path, select: list[str] | None, sel: Selected) -> CellsJson:
    """Each selected cell as its record will hold it: a secret in its argv or env (or the environment's) masked."""
    from harness.masking import Masker, secret_values

    cells = []
    for c in sel.cells:
        masker = Masker(secret_values() | secret_values(c.env, c.server_args))
        expected = None if not c.expected else CellExpectedJson(outcome=c.expected.outcome, reason=c.expected.reason,
                                                                 within_s=c.expected.within_s)
        cells.append(CellJson(cell_id=c.id, axes=c.axes, server_args=masker.argv(c.server_args),
                              env=masker.env(c.env), image=c.image, expected=expected))
    return CellsJson(matrix=str(matrix), selection=select or [], shard=sel.shard, total=sel.total, cells=cells)
