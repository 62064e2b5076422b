"""How outcomes look on a terminal: one colour and one symbol per outcome, for every renderer."""

from __future__ import annotations

#: rich styles, by outcome.
STYLE = {"booted": "green", "refused": "yellow", "crashed": "red", "timeout": "magenta", "error": "red bold"}
SYMBOL = {"booted": "●", "refused": "◐", "crashed": "✖", "timeout": "◷", "error": "⚠"}
