"""What the harness prints is text, never rich markup, and through a pipe no id is cut or wrapped.

Cell ids, axis values, paths, env values, image names and commands are the user's and may hold `[analysis]`, `[bold]`
or `[/]`. rich parses every plain str it renders as markup (and `:name:` as an emoji code): a Console.print argument,
a Table title, header or cell. So the CLI's consoles have markup, emoji codes and highlighting off (`plain_console`),
every table is a `PlainTable` (its str title, headers and cells become Text, literal on any console, the pytest
plugin's and a caller's too), and styling is Text spans (harness.report.style.outcome_text), never markup.

Through a pipe (a CI log, `| tee`, `| grep ID`) `show` lays a renderable out at its own width, not the 80 columns rich
assumes there: a table row or a sentence is one whole line, however long its ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import RenderableType

#: The widest a renderable is measured at through a pipe: far beyond any id, short of rich's arithmetic.
_UNBOUNDED = 100_000


def plain_console(*, stderr: bool = False) -> Console:
    """A console that prints str as written: no markup, no emoji codes (`sha256:…:` is none), no highlighting."""
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False)


def _literal(value, style: str = ""):
    return Text(str(value), style=style) if isinstance(value, str) else value


class PlainTable(Table):
    """A rich Table whose str title, caption, headers and cells are text, never markup."""

    def __init__(self, *headers, title=None, caption=None, **kwargs):
        # A Text title keeps no title_style of the table's: it carries the style itself.
        title = _literal(title, kwargs.get("title_style") or "table.title")
        caption = _literal(caption, kwargs.get("caption_style") or "table.caption")
        super().__init__(*headers, title=title, caption=caption, **kwargs)

    def add_column(self, header="", footer="", **kwargs) -> None:  # type: ignore[override]
        super().add_column(_literal(header), _literal(footer), **kwargs)

    def add_row(self, *renderables, **kwargs) -> None:  # type: ignore[override]
        super().add_row(*(_literal(r) for r in renderables), **kwargs)


def show(console: Console, renderable: RenderableType) -> None:
    """Print `renderable`: at a terminal as rich lays it out; elsewhere at the width it needs, so that a table's
    columns get their widest cell (no id cut with … or folded onto the next line) and a sentence stays one line."""
    if console.is_terminal:
        console.print(renderable)
        return
    from rich.measure import Measurement
    from rich.segment import Segment, Segments

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
