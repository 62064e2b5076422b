"""What the harness prints is text, never rich markup, and through a pipe no id is cut or wrapped.

Cell ids, axis values, paths, env values, image names and commands are the user's and may hold `[analysis]`, `[bold]`
or `[/]`. rich parses every plain str it renders as markup (and `:name:` as an emoji code): a Console.print argument,
a Table title, header or cell. So the CLI's consoles have markup, emoji codes and highlighting off (`plain_console`),
every table is a `PlainTable` (its str title, headers and cells become Text, literal on any console, the pytest
plugin's and a caller's too), and styling is Text spans (harness.report.style.outcome_text), never markup.

They may also hold control characters (an OSC 0 title, an OSC 8 hyperlink, BEL, CR): every str a table, `literal` or
`say_to` takes is shown through harness.escape.terminal first (so a column is measured as printed), and the
consoles (`SafeConsole`) escape whatever other text reaches them the same way, rich's own cursor controls aside.

Widths (`out_width`): at a terminal its own; through a pipe (a CI log, `| tee`, `| grep ID`) COLUMNS when it is set,
else PIPE_WIDTH. No id is ever cut to fit: a table's id columns (`add_column(id=True)`) are never wrapped, folded or
dropped; its other columns fold first, then the droppable ones are left out (said in a line under the table) or, in a
table of many like columns (the report's grid), the columns are laid out in several tables that each repeat the ids
(`PlainTable(split=True)`). A line (`show`, `say_to`) wraps at spaces, never inside a word, so an id, a path or a
flag stays whole; a line meant to be pasted (`whole`) is never wrapped. Only where an id alone is wider than the width
is a line longer than it.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import re
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from harness.escape import has_control, terminal

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import ConsoleOptions, RenderableType

#: The width of piped output when COLUMNS is not set: what a CI log pane (GitHub Actions, Buildkite, GitLab) shows on
#: a laptop without wrapping, and the width the pytest plugin's grid always had. 80 would fold the report's grid in
#: every log for a terminal nobody has; no bound at all gave lines of 560 characters.
PIPE_WIDTH = 120

#: The narrowest width honoured: below it a table has no room left beside its ids.
MIN_WIDTH = 40

#: A column that may fold is counted as wide as its longest word (a reason, `(kv_insufficient)`, is never broken),
#: at least FOLD_FLOOR and at most WORD_CAP (a path in it may fold), or its widest line when that is narrower.
FOLD_FLOOR, WORD_CAP = 10, 24


def out_width(console: Console) -> int:
    """The width `console`'s output is laid out at: the one it was given (a width argument, or COLUMNS when it was
    made), else the terminal's, else PIPE_WIDTH (rich's own fallback, 80, is for no terminal at all)."""
    given = console._width  # rich keeps the width argument, or COLUMNS read at construction, here
    if given is None:
        columns = os.environ.get("COLUMNS", "")
        given = int(columns) if columns.isdigit() else None
    if given:
        return max(MIN_WIDTH, given)
    return console.width if console.is_terminal else PIPE_WIDTH


class SafeConsole(Console):
    """A console no printed text can drive: each segment rich renders (but its own cursor controls, `Segment.control`)
    is shown through `terminal`, whatever built it. Text made by `literal` is clean already, and measured as shown."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and has_control(seg.text):
                seg = Segment(terminal(seg.text), seg.style)
            yield seg


def plain_console(*, stderr: bool = False, **kwargs) -> Console:
    """A console that prints str as written (no markup, no emoji codes: `sha256:…:` is none, no highlighting) and
    control characters as visible escapes."""
    return SafeConsole(stderr=stderr, **{"markup": False, "emoji": False, "highlight": False, **kwargs})


def safe_text(text: Text) -> Text:
    """`text` with its control characters shown as escapes, its styles kept (a Text built elsewhere: rich itself
    only drops BEL, BS, VT, FF and CR)."""
    if not has_control(text.plain):
        return text
    cuts = [i for i, ch in enumerate(text.plain) if has_control(ch)]
    pieces = text.divide(sorted({*cuts, *(i + 1 for i in cuts)}))
    out = text.blank_copy()
    for piece in pieces:
        if has_control(piece.plain):
            shown = terminal(piece.plain)
            piece = Text(shown, style=piece.style, spans=[Span(0, len(shown), s.style) for s in piece.spans])
        out.append_text(piece)
    return out


def literal(value, style: str = "", *, whole: bool = False):
    """A str as Text shown as written (markup, emoji codes and control characters literal); any other renderable
    (a Text made elsewhere: its control characters escaped) as it is. `whole`: never wrapped nor cut (a command meant
    to be pasted), whatever the width."""
    if isinstance(value, str):
        value = Text(terminal(value), style=style)
    elif isinstance(value, Text):
        value = safe_text(value)
    if whole and isinstance(value, Text):
        value.no_wrap, value.overflow = True, "ignore"
    return value


def _longest(value) -> tuple[int, int]:
    """The widest line and the widest word of a cell as printed (0 for a renderable that is no text)."""
    plain = value.plain if isinstance(value, Text) else value if isinstance(value, str) else ""
    return (max((cell_len(line) for line in plain.split("\n")), default=0),
            max((cell_len(word) for word in plain.split()), default=0))


@dataclasses.dataclass
class _Fit:
    """How a column gives way when its table is too wide: an id never; a `whole` one (a run id) is left out whole;
    any other folds, and is left out (highest `drop` first) when folding is not enough."""

    id: bool = False
    whole: bool = False
    drop: int | None = None
    longest: int = 0
    word: int = 0

    def see(self, cell) -> None:
        line, word = _longest(cell)
        self.longest, self.word = max(self.longest, line), max(self.word, word)

    def floor(self) -> int:
        if self.id or self.whole:
            return self.longest
        return min(self.longest, max(FOLD_FLOOR, min(self.word, WORD_CAP)))


class PlainTable(Table):
    """A rich Table whose str title, caption, headers and cells are text, never markup, their control characters
    shown as escapes; laid out so that no id is cut at any width (the module's docstring): `split` lays out a table
    too wide in several, each with the id columns, instead of leaving columns out."""

    def __init__(self, *headers, title=None, caption=None, split: bool = False, **kwargs):
        # A Text title keeps no title_style of the table's: it carries the style itself.
        title = literal(title, kwargs.get("title_style") or "table.title")
        caption = literal(caption, kwargs.get("caption_style") or "table.caption")
        self._fits: list[_Fit] = []
        self._split = split
        super().__init__(*headers, title=title, caption=caption, **kwargs)

    def add_column(self, header="", footer="", *, id: bool = False, whole: bool = False,
                   drop: int | None = None, **kwargs) -> None:
        """`id`: the column holds ids (never cut, folded nor left out); `whole`: values left out whole rather than
        folded; `drop`: may be left out when the table is too wide, highest first. Any other column folds."""
        if id or whole:  # never wrapped; as wide as its widest value (min_width), so `crop` never cuts one
            kwargs.update(no_wrap=True, overflow="crop")
        else:
            kwargs.setdefault("overflow", "fold")
        header = literal(header)
        self._fits.append(_Fit(id, whole, drop))
        self._fits[-1].see(header)
        super().add_column(header, literal(footer), **kwargs)
        if id or whole:
            self.columns[-1].min_width = self._fits[-1].longest

    def add_row(self, *renderables, **kwargs) -> None:
        cells = [literal(r) for r in renderables]
        for fit, cell in zip(self._fits, cells, strict=False):
            fit.see(cell)
        super().add_row(*cells, **kwargs)
        for fit, column in zip(self._fits, self.columns, strict=False):
            if fit.id or fit.whole:
                column.min_width = fit.longest

    def _least(self, keep: list[int]) -> int:
        """The narrowest the table with columns `keep` can be laid out without breaking a word it keeps whole."""
        box = (2 if self.box and self.show_edge else 0) + (len(keep) - 1 if self.box else 0)
        _, right, _, left = self.padding
        pads = [left + right] * len(keep)
        if pads and not self.pad_edge:
            pads[0] -= left
            pads[-1] -= right
        return box + sum(pads) + sum(self._fits[i].floor() for i in keep)

    def _with(self, keep: list[int], title: bool = True) -> PlainTable:
        """A copy with the columns `keep` (the rows share their cells)."""
        t = copy.copy(self)
        t.columns = [dataclasses.replace(self.columns[i], _index=n) for n, i in enumerate(keep)]
        if not title:
            t.title = None
        return t

    def __rich_console__(self, console, options):
        width = options.max_width
        every = list(range(len(self.columns)))
        if self._least(every) <= width or len(self._fits) != len(self.columns):
            yield from Table.__rich_console__(self, console, options)
            return
        ids = [i for i in every if self._fits[i].id]
        rest = [i for i in every if not self._fits[i].id]
        if self._split:
            chunks: list[list[int]] = [[]]
            for i in rest:
                if chunks[-1] and self._least(sorted([*ids, *chunks[-1], i])) > width:
                    chunks.append([])
                chunks[-1].append(i)
            for n, chunk in enumerate(chunks):
                if n:
                    yield Text("")
                keep = sorted([*ids, *chunk])
                yield from Table.__rich_console__(self._with(keep, title=not n), console,
                                                  options.update_width(max(width, self._least(keep))))
            return
        keep, left_out = list(every), []
        for i in sorted((i for i in rest if self._fits[i].drop is not None),
                        key=lambda i: (-(self._fits[i].drop or 0), -i)):
            if self._least(keep) <= width:
                break
            keep.remove(i)
            left_out.append(i)
        # nothing more to leave out: wider than asked rather than an id cut or a column squashed to nothing
        yield from Table.__rich_console__(self._with(keep), console,
                                          options.update_width(max(width, self._least(keep))))
        if left_out:
            headers = [self.columns[i].header for i in sorted(left_out)]
            names = ", ".join(h.plain if isinstance(h, Text) else str(h) for h in headers)
            yield Text(f"left out at {width} columns: {names} (a wider COLUMNS shows them)", style="dim")


def _prose(renderable):
    """`renderable` with each line of text it groups laid out by `wrap` (rich folds a word wider than the line: an
    id, a path); a table's cells fold as its columns say."""
    from rich.console import Group

    if isinstance(renderable, Group):
        return Group(*(_prose(r) for r in renderable.renderables))
    if isinstance(renderable, (str, Text)) and not getattr(renderable, "no_wrap", False):
        return Prose(renderable)
    return renderable


def lines_of(console: Console, renderable: RenderableType, width: int) -> list[list[Segment]]:
    """`renderable` laid out at `width`, line by line: never cropped (an id wider than the width is whole, its line
    longer), trailing blanks dropped (a table pads its last column; a log line needs none)."""
    from rich.segment import Segment as Seg

    options = console.options.update_width(width)
    out = []
    for line in Seg.split_lines(console.render(_prose(renderable), options)):
        while line and not line[-1].control and not line[-1].text.rstrip():
            line = line[:-1]
        if line and not line[-1].control:
            line = [*line[:-1], Seg(line[-1].text.rstrip(), line[-1].style)]
        out.append(line)
    return out


def show(console: Console, renderable: RenderableType) -> None:
    """Print `renderable` at `out_width`: at a terminal its width, through a pipe COLUMNS (PIPE_WIDTH when unset); a
    table's ids whole whatever the width (PlainTable), never cropped to it."""
    from rich.segment import Segments

    out: list[Segment] = []
    for line in lines_of(console, renderable, out_width(console)):
        out.extend([*line, Segment.line()])
    console.print(Segments(out), soft_wrap=True, crop=False)


def _finds(text: str, part: str) -> list[int]:
    out, at = [], text.find(part) if part else -1
    while at >= 0:
        out.append(at)
        at = text.find(part, at + len(part))
    return out


def wrap(line, width: int, indent: int = 2, keep: tuple[str | re.Pattern, ...] = ()) -> Text:
    """One line of output as lines of at most `width`: broken at spaces only (an id, a path, a flag never), nor
    inside any of `keep` (a flag and its value to paste; a pattern: `KV needed 1.00 GiB`), the lines after the first
    indented by `indent`. A `whole` Text (a command to paste) as it is."""
    text = literal(line)
    if not isinstance(text, Text) or text.no_wrap or "\n" in text.plain or cell_len(text.plain) <= width:
        return text
    plain = text.plain
    glued = [False] * len(plain)
    for k in keep:
        spans = [m.span() for m in k.finditer(plain)] if isinstance(k, re.Pattern) else \
            [(at, at + len(k)) for at in _finds(plain, k)]
        for a, b in spans:
            glued[a:b] = [True] * (b - a)
    words, start = [], 0  # (start, end) of each word: spaces inside `keep` are no breaks
    for end in range(len(plain) + 1):
        if end == len(plain) or (plain[end] == " " and not glued[end]):
            if end > start:
                words.append((start, end))
            start = end + 1
    # a label and its value (`results: PATH`) go on one line together where they fit on one
    groups: list[list[tuple[int, int]]] = []
    for w in words:
        if groups and plain[groups[-1][-1][1] - 1] == ":" and len(groups[-1]) == 1:
            groups[-1].append(w)
        else:
            groups.append([w])
    cuts, line_start, limit = [], 0, width  # a line runs from line_start to the end of its last part, spaces and all
    for group in groups:
        size = cell_len(plain[group[0][0]:group[-1][1]])
        parts = [group] if size <= width - indent or len(group) == 1 else [[w] for w in group]
        for part in parts:
            if part[0][0] > line_start and cell_len(plain[line_start:part[-1][1]]) > limit:
                cuts.append(part[0][0])
                line_start, limit = part[0][0], width - indent
    if not cuts:
        return text
    pieces = text.divide(cuts)
    out = pieces[0]
    out.rstrip()
    for piece in pieces[1:]:
        piece.rstrip()
        out.append("\n" + " " * indent)
        out.append_text(piece)
    out.no_wrap, out.overflow = True, "ignore"
    return out


class Prose:
    """A line laid out at the width it is rendered at by `wrap` (in a Group, a table's neighbour)."""

    def __init__(self, line, indent: int = 2, keep: tuple[str | re.Pattern, ...] = ()):
        self.line, self.indent, self.keep = line, indent, keep

    def __rich_console__(self, console, options):
        yield wrap(self.line, options.max_width, self.indent, self.keep)


def say_line(console: Console, line, keep: tuple[str | re.Pattern, ...] = ()) -> None:
    """Print one line of a command's output (say_to): at `out_width`, wrapped by `wrap`, never cropped. A text of
    several lines is laid out by its maker (a log's lines quoted in it stay whole) and printed as it is. On stderr a
    line is one line whatever its width: an error, a warning, an event of a run is one line to grep (the house rule
    for bad input), never wrapped."""
    text = literal(line) if console.stderr else wrap(line, out_width(console), keep=keep)
    console.print(text, highlight=False, markup=False, emoji=False, soft_wrap=True, crop=False)
