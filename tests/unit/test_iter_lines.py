"""harness.files.iter_lines, the one bounded line reader (the log parser, `facts`, `predict --from-log` read logs by
it): line ends as vLLM's logs have them, a line cut at its bound and its excess skipped, only regular files."""

from __future__ import annotations

import os

import pytest

from harness.errors import FileRefused
from harness.files import READ_CHUNK, iter_lines
from harness.logfacts import parse_file
from harness.logfacts.text import MAX_LINE_BYTES


def lines(tmp_path, data: bytes, max_line_bytes: int = 1000, chunk_bytes: int = 4) -> list[str]:
    f = tmp_path / "log"
    f.write_bytes(data)
    return list(iter_lines(f, max_line_bytes, chunk_bytes))


def test_every_line_end_counts_once_even_split_across_two_reads(tmp_path):
    assert lines(tmp_path, b"abc\r\nde\rf\n\ng") == ["abc", "de", "f", "", "g"]  # chunk 1: `abc\r`, then `\nde…`
    assert lines(tmp_path, b"abc\r\nde\rf\n\ng", chunk_bytes=1 << 16) == ["abc", "de", "f", "", "g"]
    assert lines(tmp_path, b"") == [] and lines(tmp_path, b"\n") == [""]


def test_an_over_long_line_is_cut_at_its_bound_and_the_rest_of_it_skipped(tmp_path):
    assert lines(tmp_path, b"x" * 50 + b"\nok\n" + b"y" * 11, max_line_bytes=10) == ["x" * 10, "ok", "y" * 10]
    assert lines(tmp_path, b"x" * 50 + b"\r\nok", max_line_bytes=10, chunk_bytes=3) == ["x" * 10, "ok"]
    assert lines(tmp_path, b"caf\xc3\xa9 \xff\n") == ["café \ufffd"]


def test_a_log_is_read_at_the_parsers_bound_and_a_fifo_is_refused_unopened(tmp_path):
    f = tmp_path / "big.log"
    f.write_bytes(b"z" * (MAX_LINE_BYTES + 5) + b"\nINFO after\n" + b"w" * (MAX_LINE_BYTES + READ_CHUNK) + b"\n")
    # a line that ends in the read that took it past the bound is whole; one that does not is cut at the bound
    assert [len(x) for x in iter_lines(f, MAX_LINE_BYTES)] == [MAX_LINE_BYTES + 5, len("INFO after"), MAX_LINE_BYTES]
    assert parse_file(f) is not None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="FIFO"):
        next(iter_lines(fifo, 10))
