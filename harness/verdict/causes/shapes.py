"""The regex building blocks every log pattern shares (the causes' and harness.logfacts.patterns'), written once.

Bounded digit runs keep float()/int() cheap and exact on adversarial input.
"""

from __future__ import annotations

# A GiB figure: "12.5", "12.50", "0.0", "-2.34" (available memory goes negative when weights overflow the budget).
NUM = r"(-?\d{1,15}(?:\.\d{1,15})?)(?![\d.]\d)"
# A token count: "10,720" or "2048".
INT = r"(\d{1,3}(?:,\d{3}){1,6}|\d{1,18})(?![\d,]\d)"
# What may precede a refusal's text on its line: an exception's class ("ValueError: ", "torch.OutOfMemoryError: ")
# or pydantic's "Value error, ". Anchoring refusals here keeps source-code lines in tracebacks from matching.
# Words or a marker before the class in a paste ("报错ValueError: ...", "🚫 ValueError: ...": not ASCII, then at most
# a space or a quote) and a launcher's own prefix inside
# the message (Xinference's actor "[address=127.0.0.1:37657, pid=3125985] ") are allowed around it.
EXC = (r"\A(?:[^\x00-\x7f]{1,40}[ \"']?(?=[A-Za-z_][\w.]{0,100}(?:Error|Exception|Exit)\s*:))?"
       r"(?:[A-Za-z_][\w.]{0,100}(?:Error|Exception|Exit)\s*:\s*|Value error,\s*)?"
       r"(?:\[address=[^\]\s]{1,100},\s*pid=\d{1,10}\]\s*)?")

UNIT_GIB = {"B": 1 / (1 << 30), "KiB": 1 / (1 << 20), "MiB": 1 / (1 << 10), "GiB": 1.0, "TiB": 1024.0}


def named(name: str, shape: str) -> str:
    """`shape` (NUM, INT: one group each) with its group named, so a match's groupdict() is the numbers it read."""
    return shape.replace("(", f"(?P<{name}>", 1)


def to_int(text: str | None) -> int | None:
    """A logged integer ("10,720" → 10720); None for None or anything that is not one."""
    if text is None:
        return None
    digits = text.replace(",", "")
    return int(digits) if digits.isdigit() else None


def to_float(text: str | None) -> float | None:
    if text is None:
        return None
    return float(text)
