"""A GPU's CUDA compute capability from its name (NVML's, or one a user names with `--gpu`): what decides, before
any boot, whether the GPU has the dtype a cell asks for (bfloat16 needs 8.0).

From NVIDIA's table (developer.nvidia.com/cuda-gpus); a name is matched by its model token, most specific first, so
"NVIDIA A100-SXM4-80GB", "Tesla T4" and "a10g" all read. None: a name this table does not know (no prediction).
"""

from __future__ import annotations

import re

#: (pattern over the lower-cased name, capability); the first that matches wins.
_TABLE: tuple[tuple[str, tuple[int, int]], ...] = tuple((p, c) for p, c in (
    (r"\bgb?200\b|\bb[12]00\b|\bb300\b|\bgb300\b", (10, 0)),
    (r"\brtx pro \d{4}.*blackwell|\brtx 50[5-9]0\b|\brtx 5090\b", (12, 0)),
    (r"\bgh200\b|\bh[12]00\b|\bh800\b|\bh20\b", (9, 0)),
    (r"\bl40s?\b|\bl4\b|\bl20\b|\brtx 40[5-9]0\b|\brtx \d{4} ada\b|\bada generation\b", (8, 9)),
    (r"\borin\b", (8, 7)),
    (r"\ba100\b|\ba800\b|\ba30\b", (8, 0)),
    (r"\ba10g?\b|\ba40\b|\ba16\b|\ba2\b|\brtx a\d{4}\b|\brtx 30[5-9]0\b|\brtx 3050\b", (8, 6)),
    (r"\bt4\b|\brtx 20[6-8]0\b|\btitan rtx\b|\bquadro rtx\b|\bgtx 16[5-6]0\b", (7, 5)),
    (r"\bv100\b|\btitan v\b", (7, 0)),
    (r"\bp100\b", (6, 0)),
    (r"\bp40\b|\bp4\b|\bgtx 10[5-8]0\b|\btitan xp?\b", (6, 1)),
    (r"\bm40\b|\bm60\b", (5, 2)),
    (r"\bk80\b", (3, 7)),
))
_COMPILED = tuple((re.compile(p), c) for p, c in _TABLE)


def capability_of(name: str) -> tuple[int, int] | None:
    """The compute capability of the GPU `name` names ("Tesla T4" → (7, 5)), or None when the table has no match."""
    low = re.sub(r"[-_]", " ", name.lower())[:200]
    for rx, cap in _COMPILED:
        if rx.search(low):
            return cap
    return None
