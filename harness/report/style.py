"""How outcomes look on a terminal: one colour and one symbol per outcome, for every renderer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.verdict import Outcome

if TYPE_CHECKING:
    from rich.text import Text


#: rich styles, by outcome or its name (an Outcome is a str; the grid shows them bold).
STYLE: dict[str, str] = {Outcome.booted: "green", Outcome.refused: "yellow", Outcome.crashed: "red",
                         Outcome.timeout: "magenta", Outcome.error: "bold red"}
SYMBOL: dict[str, str] = {Outcome.booted: "●", Outcome.refused: "◐", Outcome.crashed: "✖",
                          Outcome.timeout: "◷", Outcome.error: "⚠"}


def outcome_text(outcome: Outcome | str, label: str | None = None, *, bold: bool = False) -> Text:
    """`label` (default: the outcome) in the outcome's colour, as Text: literal whatever the label holds (its control
    characters shown as escapes)."""
    from rich.text import Text

    from harness.escape import terminal

    style = STYLE.get(outcome, "")
    if bold and style and "bold" not in style.split():
        style = f"bold {style}"
    return Text(terminal(str(outcome) if label is None else label), style=style)
