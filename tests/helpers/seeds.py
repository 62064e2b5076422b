"""The pristine file the seed patch applies to, made from the seed's own context lines."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SEED_PATCH = ROOT / "patches" / "gpu_worker-kv-cap.patch"


def pristine_from_the_seeds_context() -> bytes:
    """A gpu_worker.py as the fork image must have it around line 824: 823 lines before, then the hunk's context and
    removed lines (each ending in a newline, as in any Python file), then more code."""
    body = SEED_PATCH.read_text().split("\n@@ -824,6 +824,21 @@\n", 1)[1]
    old = [line[1:] for line in body.split("\n") if line[:1] in (" ", "-")]
    assert len(old) == 6
    lines = [f"# fork line {i}\n" for i in range(1, 824)] + [f"{line}\n" for line in old]
    tail = ['                    "the rest of the fork\'s message", cap)\n', "        return\n"]
    return "".join(lines + tail).encode()
