#!/usr/bin/env python3
"""Fuzz the log parser at volume: real vLLM log lines (tests/data/logs), mutated and generated, fed the way a watcher
feeds a server's output. Zero exceptions allowed, and the parse throughput is printed.

    python benchmarks/fuzz_parser.py [--lines 200000] [--seed N]

`LogParser.feed` swallows any exception (a log line must never break the watcher), so a bug would only show as a
lost fact. This run therefore wraps every step `feed` takes (the keyword pre-check, segmenting, cleaning, matching) to
count what it would swallow, checks the facts stay a valid record, and parses the whole corpus once more as a file
with mixed line endings (`parse_file`). Exit 1 on any exception or broken invariant.

Throughput is measured separately, on the same lines through the plain `feed` (no wrappers), and on the unmutated
real lines alone for reference.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import harness.logfacts.parser as parser_mod  # noqa: E402 - sys.path first
from harness.logfacts import LogFacts, LogParser, parse_file  # noqa: E402 - sys.path first
from harness.logfacts.model import MESSAGE_MAX_CHARS  # noqa: E402 - sys.path first
from harness.logfacts.patterns import KEYWORDS  # noqa: E402 - sys.path first

LOGS = ROOT / "tests" / "data" / "logs"
JUNK = "0123456789.,()/ -:[]{}=%x\x1b[31m\x1b[0m\r\t\ufffd\x00GiBMiBtokens" + "é€😀"
DECOR = ["(EngineCore_DP0 pid=7) ", "(VllmWorker rank=0 pid=9) ", "[rank0]: ", "\x1b[1;36m(APIServer pid=1)\x1b[0;0m ",
         "INFO 11-29 10:00:00 [x.py:1] ", "ERROR 11-29 10:00:00 [core.py:9] ", "INFO:     ", "ValueError: ", "  "]
NUMBERS = ["0", "-1", "1e309", "nan", "99999999999999999999", "1,048,576", "0.0", "-0.01", "3.4028235e38", "٣"]


def real_lines() -> list[str]:
    lines = []
    for path in sorted(LOGS.rglob("*.log")):
        lines += [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines


def mutate(rng: random.Random, line: str, corpus: list[str]):
    """One real line, torn the ways a pipe, a terminal or an odd build tears it (sometimes as bytes)."""
    how = rng.randrange(12)
    n = len(line)
    i = rng.randint(0, n)
    j = rng.randint(i, n)
    if how == 0:
        return line
    if how == 1:
        return line[:i] + "".join(rng.choice(JUNK) for _ in range(rng.randint(0, 12))) + line[j:]
    if how == 2:
        return line[:i]
    if how == 3:
        return line[j:]
    if how == 4:
        return line[:j] + line[i:]
    if how == 5:
        other = rng.choice(corpus)
        return line[:i] + other[rng.randint(0, len(other)):]
    if how == 6:
        return " ".join(rng.choice(NUMBERS) if any(c.isdigit() for c in tok) and rng.random() < 0.5 else tok
                        for tok in line.split(" "))
    if how == 7:
        return "".join(rng.choice(DECOR) for _ in range(rng.randint(1, 3))) + line
    if how == 8:  # repeated: now and then far past the parser's 64 Ki-character cap
        return (line + " ") * (rng.randint(100, 1500) if rng.random() < 0.1 else rng.randint(2, 5))
    if how == 9:
        raw = line.encode()
        k = rng.randint(0, len(raw))
        return raw[:k] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 8))) + raw[k:]  # bytes, as fed
    if how == 10:
        return line[:i] + rng.choice(["\r", "\n", "\r\n"]) + line[i:]
    return line[:i] + rng.choice(KEYWORDS) + line[j:]


def generated(rng: random.Random) -> object:
    """Text that was never a log line: keywords in random company, random unicode, random bytes."""
    how = rng.randrange(3)
    if how == 0:
        words = KEYWORDS + tuple(NUMBERS) + ("(", ")", "GiB", ":")
        return " ".join(rng.choice(words) for _ in range(rng.randint(1, 20)))
    if how == 1:
        return "".join(chr(rng.randrange(0x110000)) if rng.random() < 0.3 else rng.choice(JUNK)
                       for _ in range(rng.randint(0, 200))).encode("utf-8", "replace").decode("utf-8", "replace")
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))


class Swallowed:
    """Wraps each step of LogParser.feed so that an exception it would swallow is counted (and then re-raised, so
    feed behaves exactly as in production)."""

    def __init__(self) -> None:
        self.errors: Counter[str] = Counter()
        self.examples: dict[str, tuple[object, str]] = {}
        self.current: object = None
        self._orig = {}

    def _wrap(self, owner, name: str) -> None:
        fn = getattr(owner, name)
        self._orig[(owner, name)] = fn

        def wrapped(*a, **kw):
            try:
                return fn(*a, **kw)
            except Exception as exc:  # counted by kind, and raised on
                key = f"{name}: {type(exc).__name__}: {str(exc)[:120]}"
                self.errors[key] += 1
                self.examples.setdefault(key, (self.current, traceback.format_exc()))
                raise

        setattr(owner, name, wrapped)

    def __enter__(self):
        self._wrap(parser_mod, "_coerce")
        self._wrap(parser_mod, "worth_reading")
        self._wrap(parser_mod, "segments")
        self._wrap(parser_mod, "split_line")
        self._wrap(parser_mod.phases.PhaseReader, "feed")
        self._wrap(parser_mod.phases.PhaseReader, "stamp")
        self._wrap(LogParser, "_feed_message")
        return self

    def __exit__(self, *exc) -> None:
        for (owner, name), fn in self._orig.items():
            setattr(owner, name, fn)


def check_facts(parser: LogParser, problems: list[str], line: object) -> None:
    facts = parser.facts
    try:
        LogFacts.model_validate(facts.model_dump())
    except Exception as exc:  # noqa: BLE001 - any exception is a finding to report
        problems.append(f"facts no longer a valid record after {line!r:.200}: {exc}")
    if facts.refusal is not None and len(facts.refusal.message) > MESSAGE_MAX_CHARS:
        problems.append(f"refusal message of {len(facts.refusal.message)} characters after {line!r:.200}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=200_000, help="lines to feed (default 200000; at least 100000)")
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    corpus = real_lines()
    lines: list[object] = []
    while len(lines) < args.lines:
        lines.append(generated(rng) if rng.random() < 0.1 else mutate(rng, rng.choice(corpus), corpus))
    kinds = Counter("bytes" if isinstance(x, bytes) else "text" for x in lines)

    # 1. every line through feed, with each step watched; a fresh parser every few dozen lines, as per boot
    problems: list[str] = []
    raised: list[str] = []
    with Swallowed() as watch:
        parser = LogParser()
        for n, line in enumerate(lines):
            if n % rng.randint(20, 400) == 0:
                check_facts(parser, problems, line)
                parser = LogParser()
            watch.current = line
            try:
                parser.feed(line)  # type: ignore[arg-type]  # fuzzed: any object, not only str
            except Exception:  # noqa: BLE001 - feed must never raise
                raised.append(traceback.format_exc())
        check_facts(parser, problems, None)

    # 2. the same lines as one file with mixed line endings, streamed by parse_file
    with tempfile.NamedTemporaryFile("wb", suffix=".log", delete=False) as f:
        for line in lines:
            data = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
            f.write(data + rng.choice([b"\n", b"\r\n", b"\r"]))
        path = Path(f.name)
    try:
        t0 = time.perf_counter()
        file_facts = parse_file(path)
        file_s = time.perf_counter() - t0
        file_mb = path.stat().st_size / 2**20
    except Exception:  # noqa: BLE001 - any exception is a finding to report
        raised.append("parse_file: " + traceback.format_exc())
        file_facts, file_s, file_mb = None, 0.0, 0.0
    finally:
        path.unlink(missing_ok=True)

    # 3. throughput: plain feed, no wrappers
    def rate(items: list[object], repeat: int = 1) -> tuple[float, float]:
        size = sum(len(x) for x in items) * repeat
        p = LogParser()
        t0 = time.perf_counter()
        for _ in range(repeat):
            for x in items:
                p.feed(x)  # type: ignore[arg-type]  # fuzzed: any object, not only str
        dt = time.perf_counter() - t0
        return len(items) * repeat / dt, size / dt / 2**20

    fuzz_lps, fuzz_mbs = rate(lines)
    real_lps, real_mbs = rate(corpus, repeat=max(1, 100_000 // len(corpus)))

    swallowed = sum(watch.errors.values())
    print(f"corpus: {len(corpus)} real lines from {LOGS.relative_to(ROOT)}; fed {len(lines)} lines "
          f"({kinds['text']} text, {kinds['bytes']} bytes; seed {args.seed})")
    print(f"exceptions: {len(raised)} raised by feed/parse_file, {swallowed} swallowed inside feed; "
          f"{len(problems)} broken invariants")
    for key, count in watch.errors.most_common(10):
        line, tb = watch.examples[key]
        print(f"  {count} x {key}\n    line: {line!r:.300}\n{tb}")
    for tb in raised[:5]:
        print(tb)
    for problem in problems[:10]:
        print("  " + problem)
    if file_facts is not None:
        print(f"parse_file: {file_facts.lines} physical lines, {file_mb:.1f} MB in {file_s:.2f} s "
              f"({file_facts.lines / file_s:,.0f} lines/s)")
    print(f"throughput (feed): fuzzed lines {fuzz_lps:,.0f} lines/s ({fuzz_mbs:.1f} MB/s); "
          f"real log lines {real_lps:,.0f} lines/s ({real_mbs:.1f} MB/s)")
    ok = not raised and not swallowed and not problems and len(lines) >= 100_000
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
