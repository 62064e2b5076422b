"""The command-line values every command shares, each checked by one argparse `type=` validator: a bad value is one
line (`boot-harness CMD: argument --flag: what is wrong`) and exit 2 before any work starts, never a traceback later
nor a silent default. One validator per kind of value: a port, a length, a size, a version, a file that must exist.
"""

from __future__ import annotations

import argparse
import math
import re
import sys

from harness.units import GIB

#: vLLM's lengths and the KV block: more than a trillion tokens is a typo, not a model (the arithmetic stays exact)
MAX_TOKENS = 1 << 40
#: a KV pool of more than 4 EiB is a typo: beyond any machine (and beyond the int64 vLLM keeps it in)
MAX_BYTES = 1 << 62

#: X.Y or X.Y.Z, a leading v, and what vLLM's own version strings append (rc1, .dev45, .post1, +cu128, +g1234abc)
_VERSION = re.compile(r"v?\d+\.\d+(?:\.\d+)?(?:(?:rc|a|b|\.?dev|\.?post)\d*)*(?:\+[0-9A-Za-z.\-_]+)?")


def port(text: str) -> int:
    """A TCP port a server can listen on: 1 to 65535 (0 would be "any", which nothing could then reach)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (an integer from 1 to 65535)") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (an integer from 1 to 65535)")
    return value


def repeat(text: str) -> int:
    """A number of boots: 1 to 100."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (an integer from 1 to 100)") from None
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (an integer from 1 to 100)")
    return value


def length(text: str) -> int:
    """A positive token count as vLLM writes it (131072, 128k, 128K), at most MAX_TOKENS."""
    from harness.units import human_int

    value = human_int(text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive length (131072, 128k, 128K)")
    if value > MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"{text!r}: beyond any model (at most {MAX_TOKENS:,} tokens)")
    return value


def gib(text: str) -> float:
    """A size in GiB: a finite number, 0 or more, that fits MAX_BYTES (not nan, inf, -1, 1e400)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in GiB (40, 0.5)") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in GiB: a finite number, 0 or more")
    if value * GIB > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r}: beyond any machine (at most {MAX_BYTES // GIB:,} GiB)")
    return value


def byte_count(text: str) -> int:
    """A size in bytes (4294967296, 4G), 0 or more, at most MAX_BYTES."""
    from harness.units import human_int

    value = human_int(text)
    if value is None or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte count (4294967296, 4G)")
    if value > MAX_BYTES:
        raise argparse.ArgumentTypeError(f"{text!r}: beyond any machine (at most {MAX_BYTES:,} bytes)")
    return value


def vllm_version(text: str) -> str:
    """A vLLM release (0.32.0, v0.11.1rc2): refused when it is no version; a warning on stderr when it is one the
    predictor has no rules for (newer than the newest it knows: that one's rules are used; older than the first)."""
    from harness.predict.versions import DEFAULT_VERSION, outside_known

    if not _VERSION.fullmatch(text.strip()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a vLLM version (write X.Y.Z, e.g. {DEFAULT_VERSION})")
    if why := outside_known(text):
        from harness.escape import terminal_line

        print(terminal_line(f"warning: --vllm-version {text}: {why}"), file=sys.stderr)
    return text.strip()
