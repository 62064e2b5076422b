"""One escaping layer per output kind: what a value becomes on a terminal, in markdown, in a pasted shell command.

Axis keys and values, ids, paths, argv, env values and whatever a forged record holds are the user's (or an
attacker's) and may carry `\\x1b]0;title\\x07`, an OSC 8 hyperlink, `<script>`, `[l](javascript:…)` or a backtick.
Records keep them exact; only what is shown is escaped, here, once per kind:

- terminal: every C0/C1 control character, DEL and the bidi controls that reorder a line become visible escapes
  (`\\x1b`, `\\r`, `\\u202e`); `terminal` keeps \\n and \\t for the layout, `terminal_line` shows them too (a value, a
  `# comment` line). Its output holds no control character, so escaping it again changes nothing.
- markdown: `md_text` for prose and table cells (`<` and `&` as entities, markdown's link, emphasis, code and table
  punctuation backslash-escaped, a newline a `<br>`), `md_code` for a code span no value can close (a fence longer
  than any backtick run inside; a `<code>` element of escaped text for a value holding `<` or `&`).
- shell: `shell_quote`, shlex.quote for a printable word, else `$'…'` with the controls as `\\xHH` (bash, zsh and
  POSIX 2024 sh read it back exactly), so a printed command is terminal-safe and still pastes.
- HTML: html.escape, as the HTML reports already do.

The server's log is cleaned differently, for parsing (harness.logfacts.text strips its colour codes); what is left
of it passes through `terminal` like any value.
"""

from __future__ import annotations

import re

#: C0 but \t and \n, DEL, C1, and the Unicode controls that reorder or break what is shown (bidi marks, embeddings,
#: overrides and isolates; the line and paragraph separators).
_OTHER = "\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[{_OTHER}]")
_CONTROL_OR_LAYOUT = re.compile(f"[\t\n{_OTHER}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    ch = match.group()
    return _NAMED.get(ch) or (f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")


def has_control(text: str) -> bool:
    """Whether `text` holds a character a terminal would act on (\\n and \\t aside)."""
    return _CONTROL.search(text) is not None


def terminal(text: str) -> str:
    """`text` for a terminal: its control characters as visible escapes, \\n and \\t kept for the layout."""
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


def terminal_line(text: str) -> str:
    """`text` as one line for a terminal: \\n and \\t shown as escapes too."""
    return _CONTROL_OR_LAYOUT.sub(_visible, text) if _CONTROL_OR_LAYOUT.search(text) else text


# ---------------------------------------------------------------------------------------------------- markdown

#: `<` and `&` as entities (no tag, comment, autolink or entity can open: `>` and `"` mean nothing without them and
#: stay readable, `need > cap`); markdown's inline punctuation backslash-escaped (the escape itself, code spans,
#: emphasis, links and images, table cells): no link, image, code span or cell break can form from a value.
_MD = {"&": "&amp;", "<": "&lt;", "\\": "\\\\", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "|": "\\|"}
_MD_SPECIAL = re.compile(r"[&<\\`*\[\]|]")
#: What makes a block of a line it starts (a quote, a heading): escaped where a value starts, since a value may start
#: a list item's text (`- > x` would quote).
_MD_BLOCK_START = re.compile(r"\A[>#]")


def md_text(text: object) -> str:
    """`text` as literal markdown prose or a table cell's content: what it says is what is shown; a newline a
    `<br>` (a table row or a list item stays one line)."""
    text = terminal(str(text)).replace("\t", " ")
    text = _MD_BLOCK_START.sub(r"\\\g<0>", _MD_SPECIAL.sub(lambda m: _MD[m.group()], text))
    return text.replace("\n", "<br>")


_BACKTICKS = re.compile("`+")


def md_code(text: object, *, in_table: bool = False) -> str:
    """`text` as one code span no value can close: fenced by one backtick more than its longest run, padded with a
    space where it starts or ends with one (markdown strips that pad). In a table cell a `|` would still end the
    cell: `in_table` escapes it (GFM reads `\\|` as `|` there, code spans included). A value holding `<` or `&` is a
    `<code>` element of escaped text instead: a code span shows an entity as written, so its tag would stay in the
    file as is, for whatever reads the file without rendering it."""
    text = terminal_line(str(text))
    if "<" in text or "&" in text:
        return f"<code>{md_text(text)}</code>"
    if in_table:
        text = text.replace("|", "\\|")
    if not text:
        return "` `"
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------------------------------------------- shell

_SHELL_CONTROL = re.compile(f"[\t\n{_OTHER}]")
_ANSI_C = {"\\": "\\\\", "'": "\\'", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _ansi_c_char(match: re.Match[str]) -> str:
    """A character as `$'…'` writes it: its UTF-8 bytes as `\\xHH` (what `\\u` would give, in any locale)."""
    ch = match.group()
    return _ANSI_C.get(ch) or "".join(f"\\x{b:02x}" for b in ch.encode("utf-8"))


_ANSI_C_SPECIAL = re.compile(f"[\\\\'\t\n{_OTHER}]")


def ansi_c(text: str) -> str:
    """`$'…'`: one shell word holding `text` exactly, every control character a visible escape."""
    return "$'" + _ANSI_C_SPECIAL.sub(_ansi_c_char, text) + "'"


def shell_quote(word: str) -> str:
    """One shell word for `word`, safe to print: shlex.quote when it is printable (\\t and \\n included: those are
    shown as escapes too), else `$'…'`."""
    import shlex

    return ansi_c(word) if _SHELL_CONTROL.search(word) else shlex.quote(word)


def dq_controls(quoted: str) -> str:
    """The inside of a double-quoted word with its control characters spliced out as `"$'\\x1b'"` (the quote closed,
    an ANSI-C word, the quote reopened): the same word to a shell, and nothing a terminal acts on."""
    if not _SHELL_CONTROL.search(quoted):
        return quoted
    return _SHELL_CONTROL.sub(lambda m: '"' + ansi_c(m.group()) + '"', quoted)
