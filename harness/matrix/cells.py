"""From a matrix to its cells: the product of the axes less `exclude`, each with a stable id, argv, env and expectation.

Ids are built from axis value names, never positions, so adding a value to one axis leaves every other cell's id (and
its results, and the nightly comparison) untouched; a value that is a secret is named for its place on its axis
(harness.matrix.secret_names), never for itself. Ids avoid `=`, `,` and spaces so they work in `pytest -k` and
`--select`.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import itertools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from harness.errors import ConfigError, SelectionError, UsageError
from harness.matrix.model import CONTAINER_ONLY_MESSAGE, ExpectRule, Matrix, Mount, PatchSpec, Selector
from harness.matrix.rule_index import SelectorIndex, as_flags
from harness.verdict.catalogue import Reason
from harness.verdict.outcome import Outcome

_UNSAFE = re.compile(r"[^A-Za-z0-9_.+]+")
#: A negative number (`--max-model-len -1`, vLLM's "auto"): its sign is spelt, or `-1` would read as length 1.
_NEGATIVE = re.compile(r"^-(?=[0-9.])")

#: At most this many cells: each is a server boot (a minute or more on a GPU), so 10,000 is already weeks of one
#: GPU's time, and every record of a run lists every cell. Counted by multiplying the axis sizes, before any product
#: is built, so a 1.7 KB file of 40 two-valued axes (2**40 cells) is refused at once.
MAX_CELLS = 10_000
#: At most this many characters in a cell id: ids name files (`ID.log`, `ID.attempt1.log`, `ID.json`, a container
#: name), and a file name is at most 255 bytes; 200 leaves room for the longest suffix.
MAX_ID_CHARS = 200


@dataclass(frozen=True)
class Expectation:
    outcome: Outcome
    reason: Reason | None = None
    rule: int = 0
    #: The verdict must come within this many seconds of the cell's start.
    within_s: float | None = None

    def matches(self, outcome: Outcome, reason: Reason | None, verdict_s: float | None = None) -> bool:
        in_time = self.within_s is None or (verdict_s is not None and verdict_s <= self.within_s)
        return outcome == self.outcome and (self.reason is None or reason == self.reason) and in_time


@dataclass(frozen=True)
class Cell:
    """One configuration to boot: the matrix's common settings plus one fragment per axis, in axis order."""

    id: str
    index: int
    axes: dict[str, str]
    args: list[str]
    env: dict[str, str]
    image: str | None
    patches: tuple[PatchSpec, ...] = ()
    mounts: tuple[Mount, ...] = ()
    expected: Expectation | None = None
    #: `--model MODEL` + args: exactly what the server is given after the runtime's own command/entrypoint.
    server_args: list[str] = field(default_factory=list)
    #: The process runtime's command for this cell alone (a bisect's candidate build); empty: the matrix's `command`.
    command: tuple[str, ...] = ()


def axis_label(name: str, label: str | None) -> str:
    if label:
        return label
    words = [w for w in re.split(r"[_\-\s]+", name) if w]
    return "".join(w[0] for w in words) if len(words) > 1 else (words[0] if words else name)


def value_token(label: str, value: str) -> str:
    """`mml` + `131072` → `mml131072`; `mtp` + `mtp4` → `mtp4`; `floor` + `none` → `floor_none`; `mml` + `-1` →
    `mml_neg1`."""
    safe = _UNSAFE.sub("_", _NEGATIVE.sub("neg", value)).strip("_") or "x"
    if safe.lower().startswith(label.lower()):
        return safe
    return f"{label}{safe}" if safe[0].isdigit() else f"{label}_{safe}"


def cell_id_of(matrix: Matrix, assignment: dict[str, str]) -> str:
    """The id of the cell with these axis values: built from values, in axis order, never from positions."""
    return "-".join(value_token(axis_label(n, matrix.axes[n].label), assignment[n]) for n in matrix.axes)


def replace_flag(argv: list[str], flag: str, value: str) -> list[str]:
    """`argv` with every value of `flag` replaced; UsageError when the flag is not there."""
    out, hit = list(argv), False
    for i, token in enumerate(out):
        if token == flag and i + 1 < len(out):
            out[i + 1], hit = value, True
        elif token.startswith(flag + "="):
            out[i], hit = f"{flag}={value}", True
    if not hit:
        raise UsageError(f"the cell's arguments have no {flag}: cannot set its length")
    return out


def vary(template: Cell, matrix: Matrix, axis: str, flag: str, value: str) -> Cell:
    """The template cell with one axis at another value (the frontier's probe): its id, axes and the flag's value;
    no expectation (a measurement)."""
    axes = {**template.axes, axis: value}
    return dataclasses.replace(template, id=cell_id_of(matrix, axes), axes=axes,
                               args=replace_flag(template.args, flag, value),
                               server_args=replace_flag(template.server_args, flag, value), expected=None)


def groups_by(cells: list[Cell], axis: str) -> list[tuple[dict[str, str], list[Cell]]]:
    """The cells grouped by every axis but `axis`, groups and members in matrix order."""
    groups: dict[tuple, list[Cell]] = {}
    for c in cells:
        groups.setdefault(tuple((k, v) for k, v in c.axes.items() if k != axis), []).append(c)
    return [(dict(k), members) for k, members in groups.items()]


def _names(sel_value: str | list[str]) -> list[str]:
    return sel_value if isinstance(sel_value, list) else [sel_value]


def selector_matches(selector: Selector, assignment: dict[str, str]) -> bool:
    return all(assignment.get(axis) in _names(names) for axis, names in selector.items())


def _selector_problems(values: dict[str, dict[str, None]], selector: Selector, file: str,
                       key: str) -> list[ConfigError]:
    """`values`: each axis's value names in order, as dict keys (a matrix's thousands of rules each look theirs up)."""
    out = []
    for axis, names in selector.items():
        if axis not in values:
            out.append(ConfigError(file, f"{key}.{axis}", f"unknown axis (axes are: {', '.join(values)})"))
            continue
        if not _names(names):
            out.append(ConfigError(file, f"{key}.{axis}", "an empty list names no value"))
        for name in _names(names):
            if name not in values[axis]:
                out.append(ConfigError(file, f"{key}.{axis}",
                                       f"unknown value {name!r} (values are: {', '.join(values[axis])})"))
    return out


def _expectation(rules: list[ExpectRule], i: int | None) -> Expectation | None:
    if i is None:
        return None
    rule = rules[i]
    return Expectation(outcome=Outcome(rule.outcome), reason=Reason(rule.reason) if rule.reason else None, rule=i,
                       within_s=rule.within_s)


def _size_problems(matrix: Matrix, file: str, labels: dict[str, str]) -> list[ConfigError]:
    """Too many cells, or ids too long to name a file: found from the axes alone, before the product is built."""
    sizes = {n: len(a.value_names()) for n, a in matrix.axes.items()}
    count = math.prod(sizes.values())
    if count > MAX_CELLS:
        return [ConfigError(file, "axes", f"the {len(sizes)} axes make {count:,} cells (their sizes multiplied, "
                                          f"before exclude); at most {MAX_CELLS:,}: split the matrix")]
    longest = {n: max(a.value_names(), key=lambda v: len(value_token(labels[n], v))) for n, a in matrix.axes.items()}
    length = sum(len(value_token(labels[n], v)) for n, v in longest.items()) + len(longest) - 1
    if length <= MAX_ID_CHARS:
        return []
    axis = max(longest, key=lambda n: len(value_token(labels[n], longest[n])))
    value = longest[axis]
    if 2 * len(value_token(labels[axis], value)) < length:  # no one value is to blame: the axes add up
        return [ConfigError(file, "axes", f"the {len(longest)} axes make cell ids of up to {length:,} characters; at "
                                          f"most {MAX_ID_CHARS} (an id names the cell's files): shorten values, or "
                                          "set short `label:`s")]
    shown = repr(value) if len(value) <= 40 else f"{value[:40]!r}… ({len(value):,} characters)"
    return [ConfigError(file, f"axes.{axis}", f"value {shown} makes cell ids of {length:,} characters; at most "
                                              f"{MAX_ID_CHARS} (an id names the cell's files): shorten it, or give it "
                                              "a short name on a named axis")]


def _runtime_problems(matrix: Matrix, file: str) -> list[ConfigError]:
    """An axis value's image, patches or mounts on `runtime: process` would be ignored without a word."""
    if matrix.runtime != "process":
        return []
    return [ConfigError(file, f"axes.{n}.{v}.{key}", CONTAINER_ONLY_MESSAGE)
            for n, a in matrix.axes.items() for v in a.value_names() for key in a.fragment(v).container_keys()]


def expand(matrix: Matrix, file: str = "<matrix>") -> tuple[list[Cell], list[ConfigError]]:
    """All cells of the matrix, and what is wrong with them (selectors, labels, ids, rules that can never match; []
    when nothing): the loader keeps both, so a command expands the product once."""
    problems: list[ConfigError] = _runtime_problems(matrix, file)
    value_sets = {n: dict.fromkeys(v) for n, v in matrix.axis_values().items()}
    for i, selector in enumerate(matrix.exclude):
        if not selector:
            problems.append(ConfigError(file, f"exclude[{i}]", "an empty exclude would drop every cell"))
        problems += _selector_problems(value_sets, selector, file, f"exclude[{i}]")
    for i, rule in enumerate(matrix.expect):
        problems += _selector_problems(value_sets, rule.where, file, f"expect[{i}].where")

    names = list(matrix.axes)
    labels = {n: axis_label(n, matrix.axes[n].label) for n in names}
    seen_labels: dict[str, str] = {}
    for n, lab in labels.items():
        if lab in seen_labels:
            problems.append(ConfigError(file, f"axes.{n}",
                                        f"id label {lab!r} is also {seen_labels[lab]!r}'s; set `label:` on one"))
        seen_labels[lab] = n
    if problems:  # the product would be built on selectors or labels that are wrong
        return [], problems
    problems = _size_problems(matrix, file, labels)
    if problems:
        return [], problems

    cells: list[Cell] = []
    ids: dict[str, dict[str, str]] = {}
    rule_hits = [0] * len(matrix.expect)
    rule_any = 0  # bit i: expect[i] names a cell that is not excluded
    excluded = SelectorIndex(matrix.exclude, matrix.axis_values())
    expected_by = SelectorIndex([rule.where for rule in matrix.expect], matrix.axis_values())
    model_args = ["--model", matrix.model] if matrix.model else []
    for combo in itertools.product(*(matrix.axes[n].value_names() for n in names)):
        assignment = dict(zip(names, combo, strict=False))
        if excluded.matching(assignment):
            continue
        args, env = list(matrix.args), dict(matrix.env)
        image, patches, mounts = matrix.image, [], list(matrix.mounts)
        for n in names:
            frag = matrix.axes[n].fragment(assignment[n])
            args += frag.args
            env.update(frag.env)
            image = frag.image or image
            patches += frag.patches
            mounts += frag.mounts
        cell_id = cell_id_of(matrix, assignment)
        if cell_id in ids:
            problems.append(ConfigError(file, "axes", f"two cells get the id {cell_id!r} ({ids[cell_id]} and "
                                                      f"{assignment}); rename a value or set `label:`"))
            continue
        ids[cell_id] = assignment
        matching = expected_by.matching(assignment)
        rule_any |= matching
        expected = _expectation(matrix.expect, (matching & -matching).bit_length() - 1 if matching else None)
        if expected is not None:
            rule_hits[expected.rule] += 1
        cells.append(
            Cell(
                id=cell_id, index=len(cells), axes=assignment, args=args, env=env, image=image,
                patches=tuple(patches), mounts=tuple(mounts), expected=expected, server_args=model_args + args,
            )
        )
    if not cells:
        problems.append(ConfigError(file, "exclude", "excludes every cell: the matrix would be empty"))
    named = as_flags(rule_any, len(matrix.expect))
    for i, hits in enumerate(rule_hits):
        if hits == 0 and cells:
            why = ("every cell it names is excluded" if not named[i]
                   else "every cell it names is taken by an earlier rule")
            problems.append(ConfigError(file, f"expect[{i}]", f"rule can never match: {why}"))
    return cells, problems


def _near(word: str, choices) -> str:
    hits = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean {hits[0]!r}?" if hits else ""


def explain_missing_id(matrix: Matrix, cell_id: str, cells: list[Cell]) -> str:
    """Why no cell has this id: it is excluded (and by which rule), or it is not an id, with the nearest ones."""
    names = list(matrix.axes)
    for combo in itertools.product(*(matrix.axes[n].value_names() for n in names)):
        assignment = dict(zip(names, combo, strict=False))
        if cell_id_of(matrix, assignment) == cell_id:
            rule = next(i for i, sel in enumerate(matrix.exclude) if selector_matches(sel, assignment))
            return f"cell {cell_id!r} is excluded by exclude[{rule}] ({matrix.exclude[rule]})"
    near = difflib.get_close_matches(cell_id, [c.id for c in cells], n=3, cutoff=0.5)
    return f"no cell {cell_id!r}" + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else "")


class AxisNames(Protocol):
    """What `--select` checks its terms against: a matrix's axes and values, or those a history recorded."""

    def axis_values(self) -> dict[str, list[str]]: ...

    def value_name(self, axis: str, value: str) -> str: ...


class Selectable(Protocol):
    """A cell as `--select` reads one: its id and axes."""

    @property
    def id(self) -> str: ...

    @property
    def axes(self) -> Mapping[str, str]: ...


S = TypeVar("S", bound=Selectable)


def select_cells(cells: list[S], exprs: list[str] | None, matrix: AxisNames, source: str = "--select") -> list[S]:
    """`--select` terms: `axis=value[|value]` narrows, anything else is a glob on cell ids; terms in one EXPR are
    joined by commas and all must hold; several `--select` options add up. Selecting nothing is an error."""
    if not exprs:
        return cells
    values = matrix.axis_values()
    chosen: dict[str, S] = {}
    for expr in exprs:
        if not expr.strip():
            raise SelectionError(source, "", "an empty expression selects nothing (leave the option out for every "
                                             "cell)")
        conds: dict[str, set[str]] = {}
        globs: list[str] = []
        for term in (t.strip() for t in expr.split(",")):
            if not term:
                raise SelectionError(source, "", f"{expr!r} has an empty term (terms are joined by single commas)")
            if "=" in term:
                axis, _, names = term.partition("=")
                axis = axis.strip()
                wanted = [v.strip() for v in names.split("|")]
                wanted = [matrix.value_name(axis, v) for v in wanted]
                if not all(wanted):
                    raise SelectionError(source, axis, f"{term!r} has an empty value (values are joined by single "
                                                       "'|')")
                if axis not in values:
                    raise SelectionError(source, axis, f"unknown axis in {expr!r}{_near(axis, values)} (axes are: "
                                                       f"{', '.join(values)})")
                for v in wanted:
                    if v not in values[axis]:
                        raise SelectionError(source, axis, f"unknown value {v!r} in {expr!r}{_near(v, values[axis])} "
                                                           f"(values are: {', '.join(values[axis])})")
                conds[axis] = conds[axis] & set(wanted) if axis in conds else set(wanted)  # terms are ANDed
            else:
                globs.append(term)
        for cell in cells:
            if all(cell.axes[a] in vs for a, vs in conds.items()) and all(
                fnmatch.fnmatchcase(cell.id, g) or g == cell.id for g in globs
            ):
                chosen[cell.id] = cell
    if not chosen:
        raise SelectionError(source, "", f"{' '.join(exprs)!r} selects no cell")
    return [c for c in cells if c.id in chosen]
