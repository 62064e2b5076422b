"""The one walk over a folder tree: `os.walk` recurses once per level before Python 3.12, so a folder nested 1,200
deep (made in a second by a script, or by a runner's artifact unpacked where runs are looked for) ends `history` or
`merge` in a RecursionError. This one keeps its own stack: any depth costs memory per folder, never stack frames."""

from __future__ import annotations

import os
from collections.abc import Iterator


def walk(top: str | os.PathLike[str]) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk(top)` top-down, in the same order: (folder, its sub-folders, its other entries) for each folder at or
    under `top`; a link is never entered (a link to a folder is one of the other entries). Prune as with os.walk: the
    caller edits the sub-folder list in place before asking for the next folder. A folder that cannot be listed is
    left out, as os.walk leaves it."""
    stack = [os.fspath(top)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        dirs: list[str] = []
        others: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else others).append(entry.name)
        yield folder, dirs, others
        stack.extend(os.path.join(folder, d) for d in reversed(dirs))
