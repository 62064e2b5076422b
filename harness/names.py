"""The base of every state the harness names: a str enum, so records hold the member while JSON, f-strings and
comparisons with what an older record holds all see the plain name."""

from __future__ import annotations

import enum


class Named(str, enum.Enum):
    """A name that prints as itself (`f"{Outcome.booted}"` is "booted") and equals its string."""

    def __str__(self) -> str:
        return self.value
