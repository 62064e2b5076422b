"""What the harness prints is text, never rich markup, and through a pipe no id is cut or wrapped.

Cell ids, axis values, paths, env values, image names and commands are the user's and may hold `[analysis]`, `[bold]`
or `[/]`. rich parses every plain str it renders as markup (and `:name:` as an emoji code): a Console.print argument,
a Table title, header or cell. So the CLI's consoles have markup, emoji codes and highlighting off (`plain_console`),
every table is a `PlainTable` (its str title, headers and cells become Text, literal on any console, the pytest
plugin's and a caller's too), and styling is Text spans (harness.report.style.outcome_text), never markup.

They may also hold control characters (an OSC 0 title, an OSC 8 hyperlink, BEL, CR): every str a table, `literal` or
`say_to` takes is shown through harness.escape.terminal first (so a column is measured as printed), and the
consoles (`SafeConsole`) escape whatever other text reaches them the same way, rich's own cursor controls aside.

Through a pipe (a CI log, `| tee`, `| grep ID`) `show` lays a renderable out at its own width, not the 80 columns rich
assumes there: a table row or a sentence is one whole line, however long its ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.segment import Segment
from rich.table import Table
from rich.text import Span, Text

from harness.escape import has_control, terminal

if TYPE_CHECKING:
    from collections.abc import Iterable

    from rich.console import ConsoleOptions, RenderableType

#: The widest a renderable is measured at through a pipe: far beyond any id, short of rich's arithmetic.
_UNBOUNDED = 100_000


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


def literal(value, style: str = ""):
    """A str as Text shown as written (markup, emoji codes and control characters literal); any other renderable
    (a Text made elsewhere: its control characters escaped) as it is."""
    if isinstance(value, str):
        return Text(terminal(value), style=style)
    return safe_text(value) if isinstance(value, Text) else value


class PlainTable(Table):
    """A rich Table whose str title, caption, headers and cells are text, never markup, their control characters
    shown as escapes."""

    def __init__(self, *headers, title=None, caption=None, **kwargs):
        # A Text title keeps no title_style of the table's: it carries the style itself.
        title = literal(title, kwargs.get("title_style") or "table.title")
        caption = literal(caption, kwargs.get("caption_style") or "table.caption")
        super().__init__(*headers, title=title, caption=caption, **kwargs)

    def add_column(self, header="", footer="", **kwargs) -> None:  # type: ignore[override]
        super().add_column(literal(header), literal(footer), **kwargs)

    def add_row(self, *renderables, **kwargs) -> None:  # type: ignore[override]
        super().add_row(*(literal(r) for r in renderables), **kwargs)


def show(console: Console, renderable: RenderableType) -> None:
    """Print `renderable`: at a terminal as rich lays it out; elsewhere at the width it needs, so that a table's
    columns get their widest cell (no id cut with … or folded onto the next line) and a sentence stays one line."""
    if console.is_terminal:
        console.print(renderable)
        return
    from rich.measure import Measurement
    from rich.segment import Segments

    wide = console.options.update_width(_UNBOUNDED)
    width = max(1, Measurement.get(console, wide, renderable).maximum)
    lines = console.render_lines(renderable, console.options.update_width(width), pad=False)
    out: list[Segment] = []
    for line in lines:
        while line and not line[-1].text.rstrip():  # a table pads its last column; a log line needs no trailing blanks
            line = line[:-1]
        if line:
            line = [*line[:-1], Segment(line[-1].text.rstrip(), line[-1].style, line[-1].control)]
        out.extend([*line, Segment.line()])
    console.print(Segments(out), soft_wrap=True, crop=False)
