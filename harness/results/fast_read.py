"""The fast road of the one run reader (harness.results.store.load_run), for reading many runs (`history`): the same
run `load_run` reads, in a fraction of its time, taken only when the one loader would take it too. Anything else — a
file that is not a bounded regular file, bytes that are not strict JSON or not a record, a cell missing or under
another's name, a results.json not laid out as the harness writes it — makes `read_run` answer None, and
`read_records` reads that run through `load_run`, which names what is wrong exactly as it always did. A year of
nights is 23,000 cell records; this is what lets `history` read them in about a second.

- Each file is one pass of pydantic-core over its bytes, into a *strict copy* of the record's model (`strict_copy`):
  the fields and types of harness.results.model, with every float refusing NaN, Infinity and overflow and every
  integer more than MAX_INT_DIGITS digits — what `parse_json` refuses, so no parse into Python objects and no walk
  over them. Every field is validated, not only those history uses (but the memory curve, below), so a NaN in any of
- A memory curve is not history's to read: it is cut from the bytes unparsed (`cut_memory`, read as null), its
  samples (up to 500 [t, bytes] pairs a cell) passed over unread — parsing them would cost ten times the rest of the
  record, and validating the rest of a curve (devices, logged sizes, phases) cost more than the rest of the record:
  with curves on 8 GPUs a year of nights took 2.4 s to tell instead of 1.6 s.
- results.json's copy of each cell is rebuilt from cells/ on every read (cells/ is the truth), so it is not parsed
  but compared, byte for byte, with the cell files just validated: the same bytes are the same strict JSON, and give
  the ids results.json lists, in its order. Only its run-level fields are parsed.
"""

from __future__ import annotations

import functools
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast

from pydantic import BaseModel, Field, create_model

import harness.files
from harness.errors import InputError
from harness.files import MAX_INT_DIGITS, open_dir, read_bytes_at
from harness.results.model import CellResult, RunResult
from harness.results.store import load_run

#: parse_json's bounds (harness.files): an integer of more than MAX_INT_DIGITS digits is refused, and so is a float
#: that is not finite. A float field takes a 21-digit integer as a float past 10**20, so floats that far out are
#: refused here too, and the loader decides them (it takes 1e25, not 21 digits), as it always did.
_BIG = 10 ** MAX_INT_DIGITS
_FLOAT = Annotated[float, Field(allow_inf_nan=False, gt=-float(_BIG), lt=float(_BIG))]
_INT = Annotated[int, Field(gt=-_BIG, lt=_BIG)]


def _strict(annotation: Any) -> Any:
    """`annotation` with every float and int bounded as parse_json bounds them, and every model a strict copy."""
    if annotation is float:
        return _FLOAT
    if annotation is int:
        return _INT
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return strict_copy(annotation)
    origin = typing.get_origin(annotation)
    if (origin is None and annotation not in (Any, object)) or origin is Literal:
        return annotation  # str, bool, None, datetime, an enum, a literal: no number in them to bound
    args = typing.get_args(annotation)
    if origin is Annotated:
        return Annotated[(_strict(args[0]), *annotation.__metadata__)]
    inner = tuple(a if a is Ellipsis else _strict(a) for a in args)
    if origin in (Union, types.UnionType):
        return Union[inner]  # noqa: UP007 - a union of types built at run time: `|` takes no tuple
    if origin in (list, set, frozenset):
        return origin[inner[0]]
    if origin in (dict, tuple):
        return origin[inner]
    # Any, or a type this does not know: read less strictly than the loader reads it, so said at import (the unit
    # tests import this), and a new kind of field in harness.results.model is taught here before history reads it
    raise TypeError(f"{annotation!r}: a type history's strict read does not know; teach harness.results.fast_read")


@functools.cache
def strict_copy(model: type[BaseModel]) -> type[BaseModel]:
    """A subclass of `model` (its methods kept) whose fields validate as `model`'s do and whose numbers are bounded
    as parse_json bounds them: what `model_validate_json` takes from bytes is what parse_json + `model_validate`
    would take, but NaN and overflow refused by type instead of by a walk."""
    fields: dict[str, Any] = {name: (_strict(f.annotation), f) for name, f in model.model_fields.items()}
    return create_model(f"Strict{model.__name__}", __base__=model, __module__=__name__, **fields)


StrictCell = cast(type[CellResult], strict_copy(CellResult))  # a subclass: its fields and methods are CellResult's
StrictRun = cast(type[RunResult], strict_copy(RunResult))

_SAMPLES = b'"samples":'
_SPACE = (b" ", b"\n", b"\r", b"\t")


def cut_memory(data: bytes, indent: bytes = b"\n  ") -> bytes:
    """`data` with each memory curve read as null, unparsed, where the record is laid out as the harness writes it
    (`indent=2`; `indent` is the line start of the record's keys: deeper for results.json's copies). A curve is the
    object from `"memory": {` to the first line that is `indent` and `}` — a JSON string holds no raw newline, so that
    line ends it — holding no line of a key at the record's level. Its samples array is passed over unread: it holds
    numbers only, so it ends at the last `]` before the next `"` (one memchr over up to 500 pairs). Any other layout
    is left whole (validated whole, or compared whole). History never reads a curve: parsing the samples cost ten
    times the rest of the record, and validating the rest of a curve (its devices, logged sizes and phases) more
    than the rest of the record (a year of nights: 23,000 curves)."""
    return _cut(data, indent)[0]


#: Where a record's one curve lay (`_cut`): the curve's `{`, its samples array's `[` and `]`, and the end of the line
#: that closes the curve — what lets results.json's copy of the record be compared around that array (`_same_copy`).
Curve = tuple[int, int, int, int]


@functools.cache
def _key_line(indent: bytes) -> Callable[[bytes, int, int], re.Match[bytes] | None]:
    """`data.find(indent + b'"', start, end)`, found (a match) or not (None) twice as fast over a curve's lines: its
    every line starts with `indent` and spaces, which bytes.find's skip table passes one byte at a time."""
    return re.compile(re.escape(indent + b'"')).search


def _cut(data: bytes, indent: bytes) -> tuple[bytes, Curve | None]:
    """`cut_memory`'s bytes, and where the curve lay when the record held one, its samples passed over."""
    key, end_line, key_line = indent + b'"memory": {', indent + b"}", indent + b'"'
    key_line_in = _key_line(indent)
    out: list[bytes] = []
    spans: list[Curve | None] = []
    start = 0
    i = data.find(key)
    while i >= 0:
        obj = i + len(key) - 1
        pos, skipped = obj, None
        s = data.find(_SAMPLES, obj)
        if s >= 0 and key_line_in(data, obj, s + 1) is None:  # the curve's own samples: its array passed over
            j = s + len(_SAMPLES)
            while data[j:j + 1] in _SPACE:
                j += 1
            if data[j:j + 1] == b"[":
                q = data.find(b'"', j)
                q = q if q >= 0 else len(data)
                k = data.rfind(b"]", max(j, q - 64), q)  # its `]` lies a line or two before that `"`
                k = k if k >= 0 else data.rfind(b"]", j, q)
                if k >= 0:
                    pos, skipped = k, (j, k)  # no `"` between j and k: no key line either
        end = data.find(end_line, pos)
        if end < 0 or data.find(key_line, pos, end) >= 0:
            i = data.find(key, obj)
            continue
        out += [data[start:obj], b"null"]
        start = end + len(end_line)
        spans.append((obj, *skipped, start) if skipped else None)
        i = data.find(key, start)
    if not out:
        return data, None
    out.append(data[start:])
    return b"".join(out), spans[0] if len(spans) == 1 else None


def _reindent(body: bytes) -> bytes:
    """A cell record as results.json holds its copy: two levels deeper (`model_dump_json(indent=2)` of the run)."""
    return body.replace(b"\n", b"\n    ")


def _same_copy(raw: bytes, pos: int, body: bytes, curve: Curve) -> int | None:
    """Where results.json's copy at `pos` ends, when it is, line for line, the cell file `body` but the samples
    array of its curve (`curve`, found in `body`), itself passed over as `_cut` passes it over; None otherwise (then
    the copies are cut and compared as a whole). The copy's curve up to that array is the cell file's, so no key
    line lies in it, and past the array the rest of the copy is the cell file's: the copy, cut, is the cell, cut —
    without a second search for the curve and its key lines in each of a year's 23,000 copies."""
    _, j, k, _ = curve
    head = _reindent(body[:j])
    if not (raw.startswith(b"\n    ", pos) and raw.startswith(head, pos + 5)):
        return None
    j2 = pos + 5 + len(head)
    q = raw.find(b'"', j2)
    q = q if q >= 0 else len(raw)
    k2 = raw.rfind(b"]", max(j2, q - 64), q)
    k2 = k2 if k2 >= 0 else raw.rfind(b"]", j2, q)
    tail = _reindent(body[k + 1:])
    if k2 < 0 or not raw.startswith(tail, k2 + 1):
        return None
    return k2 + 1 + len(tail)


def _utf8(data: bytes) -> None:
    """What parse_json decodes first (pydantic-core refuses a string that is not UTF-8 too; this says it for all)."""
    if not data.isascii():
        data.decode("utf-8")  # a UnicodeDecodeError (a ValueError): the loader says it


_CELLS = b'\n  "cells": ['
_COPY_INDENT = b"\n      "
_ELEMENT = b'\n    {\n      "cell_id": "'


def _listed(raw: bytes, cells: dict[str, bytes],
            whole: dict[str, tuple[bytes, Curve] | None]) -> tuple[list[str], bytes] | None:
    """The ids results.json lists, in its order, and results.json without them (`"cells": []`), its curves cut, when
    each listed copy is, line for line, the cell file of its id (indented two levels deeper, as
    `model_dump_json(indent=2)` of the run writes it), its curve cut as the cell's is; None otherwise. `cells`: each
    cell file, cut; `whole`: by id, a cell file that held one curve, uncut, with where it lay — its copy compared
    around its samples in place (`_same_copy`) — or None for one without a curve (compared whole). Where a copy is
    not the same so, results.json is cut whole and compared again: that decides, as it always did."""
    fast = _copies(raw, cells, whole)
    if fast is not None:
        return fast
    return _copies(cut_memory(raw, _COPY_INDENT), cells, None)


def _copies(raw: bytes, cells: dict[str, bytes],
            whole: dict[str, tuple[bytes, Curve] | None] | None) -> tuple[list[str], bytes] | None:
    """`_listed`'s comparison: of results.json as read, each copy around its samples (`whole` given), or of
    results.json cut whole, each copy compared with its cell cut (`whole` None)."""
    i = raw.find(_CELLS)
    if i < 0:
        return None
    pos = i + len(_CELLS)
    listed: list[str] = []
    if raw.startswith(b"]", pos):
        end = pos
    else:
        while True:
            if not raw.startswith(_ELEMENT, pos):
                return None
            s = pos + len(_ELEMENT)
            e = raw.find(b'"', s)
            cid = raw[s:e]
            if e < 0 or b"\\" in cid:
                return None
            name = cid.decode("utf-8")
            body = cells.get(name)
            if body is None:
                return None
            if whole is not None and name not in whole:
                return None  # a cell cut otherwise (two curves, samples not passed over): compared cut
            got = whole.get(name) if whole is not None else None
            if got is not None:
                after = _same_copy(raw, pos, *got)
                if after is None:
                    return None
                pos = after
            else:
                copy = b"\n    " + _reindent(body)
                if not raw.startswith(copy, pos):
                    return None
                pos += len(copy)
            listed.append(name)
            if raw.startswith(b",", pos):
                pos += 1
            elif raw.startswith(b"\n  ]", pos):
                end = pos + 3
                break
            else:
                return None
    head = raw[:i + len(_CELLS)] + raw[end:]
    return listed, cut_memory(head, _COPY_INDENT) if whole is not None else head


def read_run(run_dir: Path) -> tuple[Any, list[Any]] | None:
    """(the run, its cells in the run's order) as `load_run(run_dir)` gives them — strict copies of RunResult and
    CellResult, without their memory curves (None) — or None: read it with `load_run`."""
    try:
        with open_dir(run_dir) as dfd:
            return _read(dfd)
    except (InputError, ValueError, OSError):  # ValueError: pydantic's ValidationError, a UnicodeDecodeError
        return None


def _read(dfd: int) -> tuple[Any, list[Any]] | None:
    raw = read_bytes_at(dfd, "results.json")
    left = harness.files.RUN_LIMIT - len(raw)  # a run past the loader's bound: the loader refuses it, in its words
    with open_dir("cells", at=dfd) as cfd:
        cells: dict[str, Any] = {}
        bodies: dict[str, bytes] = {}
        whole: dict[str, tuple[bytes, Curve] | None] = {}
        with os.scandir(cfd) as listing:
            files = sorted((e for e in listing if e.name.endswith(".json") and not e.name.startswith(".")),
                           key=lambda e: e.name)  # .<id>.json.*.tmp: a write a kill cut short, not a record
        validate = StrictCell.__pydantic_validator__.validate_json  # model_validate_json, less its Python call
        for f in files:
            data = read_bytes_at(cfd, f)
            left -= len(data)
            if left < 0:
                return None
            name = f.name[:-len(".json")]
            cut, curve = _cut(data, b"\n  ")
            if curve is not None:
                whole[name] = (data, curve)
            elif cut is data:
                whole[name] = None
            _utf8(cut)
            cell = validate(cut)
            if cell.cell_id != name:
                return None
            cells[name] = cell
            bodies[name] = cut
    # the copies are compared with the cells, the rest parsed: UTF-8 both
    got = _listed(raw, bodies, whole)
    if got is None:
        return None
    listed, head = got
    run = StrictRun.model_validate_json(head)
    # every "cells" of what was parsed is accounted for — the run's own (emptied above), one per merged run, the
    # summary's count — so no second list of cells is there for the loader to read instead of the one compared
    if run.cells or head.count(b'"cells"') != 1 + len(run.merged_from) + ("cells" in run.summary):
        return None
    rank = {cid: i for i, cid in enumerate(listed)}
    return run, sorted(cells.values(), key=lambda c: (rank.get(c.cell_id, len(rank)), c.cell_id))


def read_records(run_dir: Path) -> tuple[RunResult, list[CellResult]]:
    """(the run, its cells in the run's order) as `load_run(run_dir)` reads them: by `read_run` where it takes the
    run (its memory curves None: a caller of this reads none), else by `load_run`, whose InputError names what is
    wrong."""
    fast = read_run(run_dir)
    if fast is not None:
        return fast
    run = load_run(run_dir)[0]
    return run, run.cells
