"""A generated block of a doc (between two marker comments): read it, and rewrite it from what a generator renders. A
test compares the two, so a doc's generated table cannot drift from what it describes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DocBlock:
    doc: Path
    begin: str
    end: str

    def current(self) -> str | None:
        """The block as the doc holds it, markers included; None when the doc lacks them."""
        text = self.doc.read_text(encoding="utf-8") if self.doc.exists() else ""
        if self.begin not in text or self.end not in text:
            return None
        return text[text.index(self.begin): text.index(self.end) + len(self.end)]

    def write(self, rendered: str) -> None:
        old = self.current()
        if old is None:
            raise SystemExit(f"{self.doc}: no {self.begin} ... {self.end} block to fill")
        self.doc.write_text(self.doc.read_text(encoding="utf-8").replace(old, rendered), encoding="utf-8")
