"""Text-only fallbacks for the emoji the text renderers use, for the HTML pages: a page is opened where no emoji font
is installed (a CI artifact on a Linux desktop, a headless browser) and an emoji there is an empty box. Each emoji
becomes words, or the symbol in its text presentation (U+FE0E), which the usual fonts (DejaVu) draw."""

from __future__ import annotations

import re

#: emoji → what the page shows instead
FALLBACK = {"⏱": "time", "⚠": "⚠\ufe0e"}

_EMOJI = re.compile("(" + "|".join(map(re.escape, FALLBACK)) + ")[\ufe0e\ufe0f]?")


def text_only(page: str) -> str:
    """`page` with every emoji of FALLBACK (with or without a presentation selector) replaced by its fallback."""
    return _EMOJI.sub(lambda m: FALLBACK[m.group(1)], page)
