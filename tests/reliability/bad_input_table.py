"""The bad-input table of docs/reliability.md, generated from the corpora's EXPECTED.tsv files and what the loader
says about each file today (test_bad_input.py checks that the doc is in sync).

    python -m tests.reliability.bad_input_table           # print the table
    python -m tests.reliability.bad_input_table --write   # rewrite it in docs/reliability.md
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.doc_block import DocBlock
from tests.helpers.env import ROOT

CORPUS = ROOT / "tests" / "data" / "bad_matrices"
EXTRA = ROOT / "tests" / "reliability" / "data" / "bad_matrices"
DOC = ROOT / "docs" / "reliability.md"
BEGIN, END = "<!-- bad-matrices:begin (python -m tests.reliability.bad_input_table --write) -->", \
    "<!-- bad-matrices:end -->"
BLOCK = DocBlock(DOC, BEGIN, END)
#: Variables the corpus relies on being unset (as tests/unit/test_bad_matrices.py).
UNSET = ("BOOT_HARNESS_TEST_UNSET", "BOOT_HARNESS_TEST_UNSET_TOO", "MODEL", "VLLM_IMAGE")


def rows(tsv: Path) -> list[tuple[str, str, str]]:
    out = []
    for line in tsv.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            file, key, words = line.split("\t")
            out.append((file, "" if key == "-" else key, "" if words == "-" else words))
    return out


def message(path: Path) -> tuple[str, str]:
    """(key, message) of the one line `validate` prints for this file, repo paths shown as <repo>."""
    from harness.errors import InputError
    from harness.matrix.load import load_matrix

    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    try:
        load_matrix(path, environ=env)
    except InputError as exc:
        return exc.key, exc.message.replace(str(ROOT), "<repo>")
    return "", "(no error: the file loads)"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    lines = [BEGIN, "", "| file | key | message (`validate` prints `FILE:key: message`, exit 2) |", "|---|---|---|"]
    for file, _key, _words in rows(CORPUS / "EXPECTED.tsv"):
        key, msg = message(CORPUS / file)
        lines.append(f"| `{file}` | {f'`{key}`' if key else '—'} | {_cell(msg)} |")
    for file, _key, _words in rows(EXTRA / "EXPECTED.tsv"):
        key, msg = message(EXTRA / file)
        lines.append(f"| `{file}` (new) | {f'`{key}`' if key else '—'} | {_cell(msg)} |")
    lines += ["", END]
    return "\n".join(lines)


def current() -> str | None:
    return BLOCK.current()


def write() -> None:
    BLOCK.write(render())


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write()
    else:
        print(render())
