"""The log parser's speed, side by side with another commit's: the fake server's flood mix (ordinary warnings, a
100 KiB line, binary junk: what a server stuck in a warning loop prints) and the recorded real logs, fed line by line
to `LogParser.feed` as the watch feeds them. Each side runs in its own interpreter (the other commit's harness from
a git worktree), alternating the order each round so neither always gets the warmer machine; prints lines/s per side
and the ratio.

    python benchmarks/parser_speed.py                  # against 33569ba (before the catalogue of causes)
    python benchmarks/parser_speed.py --ref HEAD~3 --rounds 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What one side runs: feed every corpus once, best of `reps` timings, lines/s per corpus as JSON.
_SIDE = r"""
import json, sys, time
from pathlib import Path
from harness.logfacts.parser import LogParser
ordinary = "WARNING 11-29 10:00:00 [flood.py:1] the same warning again, and again, and again: " + "x" * 60
flood = ([ordinary] * 200 + ["INFO 11-29 10:00:00 [flood.py:2] " + "y" * (100 * 1024)]
         + [bytes(range(256)).replace(b"\n", b"").decode("latin-1") * 4] * 10) * 25
real = [line for p in sorted(Path(sys.argv[1]).rglob("*.log")) for line in p.read_text(errors="replace").splitlines()]
out = {}
for name, lines in (("flood", flood), ("real logs", real)):
    best = float("inf")
    for _ in range(int(sys.argv[2])):
        parser = LogParser()
        t0 = time.perf_counter()
        for line in lines:
            parser.feed(line)
        best = min(best, time.perf_counter() - t0)
    out[name] = len(lines) / best
print(json.dumps(out))
"""


def side(tree: Path, reps: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", _SIDE, str(ROOT / "tests" / "data" / "logs"), str(reps)], cwd=tree,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                          timeout=600, check=True)
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="33569ba", help="the commit to compare with (default: before the catalogue)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3, help="timings per side and round (the best is kept)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="parser-speed-") as tmp:
        old = Path(tmp) / "ref"
        subprocess.run(["git", "worktree", "add", "--detach", str(old), args.ref], cwd=ROOT, check=True,
                       capture_output=True, timeout=120)
        try:
            runs: dict[str, list[dict[str, float]]] = {"this tree": [], args.ref: []}
            for r in range(args.rounds):
                order = [("this tree", ROOT), (args.ref, old)]
                for name, tree in (order if r % 2 == 0 else order[::-1]):
                    runs[name].append(side(tree, args.reps))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True,
                           timeout=120)
    print(f"{'corpus':<12} {'this tree':>14} {args.ref:>14}  ratio (this / ref, lines/s; median of {args.rounds})")
    for corpus in runs["this tree"][0]:
        new = statistics.median(x[corpus] for x in runs["this tree"])
        ref = statistics.median(x[corpus] for x in runs[args.ref])
        print(f"{corpus:<12} {new:>12,.0f}/s {ref:>12,.0f}/s  {new / ref:.2f}")


if __name__ == "__main__":
    main()
