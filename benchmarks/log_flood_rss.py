"""A server that floods its log: the harness's memory must stay flat (peak RSS <= 150 MB) whatever the size.

    python benchmarks/log_flood_rss.py                        # 1 GB while the server boots, the figure in the docs
    python benchmarks/log_flood_rss.py --mb 1024 --when ready --probe-delay 20   # while the harness is in the probe
    python benchmarks/log_flood_rss.py --runtime docker       # the fake in the local vLLM CPU image
    python benchmarks/log_flood_rss.py --line-kb 60 --when ready --probe-delay 20   # long lines only

The server is tests/fakes/fake_vllm.py (FAKE_VLLM_SCENARIO=flood): ordinary warning lines, 100 KiB lines, binary junk
and a 1 MiB line, as fast as the pipe takes them. The harness is `boot-harness run` in a child process whose own peak
RSS (getrusage ru_maxrss) it reports at exit; a run with a 0 MB flood is the baseline. Prints the peak, the growth
over the baseline, the log written and the rate at which the harness recorded it.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.reliability.flood import flood_run  # noqa: E402 - sys.path first

LIMIT_MB = 150.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=1024, help="megabytes of log the server writes (default 1024)")
    ap.add_argument("--when", choices=["boot", "ready"], default="boot",
                    help="flood while booting, or right after ready (while the harness probes)")
    ap.add_argument("--probe-delay", type=float, default=0.0, help="seconds the server takes to answer the probe")
    ap.add_argument("--line-kb", type=float, default=0,
                    help="every line this many KiB (default: the mix of short, 100 KiB and 1 MiB lines)")
    ap.add_argument("--runtime", choices=["process", "docker"], default="process")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (the log is --mb big)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bh-flood-"))
    try:
        extra = {"FAKE_VLLM_FLOOD_LINE_KB": str(args.line_kb)} if args.line_kb else {}
        base = flood_run(0, args.when, args.probe_delay, args.runtime, work / "baseline", 120)
        got = flood_run(args.mb, args.when, args.probe_delay, args.runtime, work / "flood", 1800, **extra)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    growth = got["peak_rss_mb"] - base["peak_rss_mb"]
    rate = got["written_mb"] / got["wall_s"]
    print(f"runtime {args.runtime}, flood {args.mb:g} MB{f' of {args.line_kb:g} KiB lines' if args.line_kb else ''} "
          f"while {'booting' if args.when == 'boot' else 'probing'}"
          f"{f' (probe takes {args.probe_delay:g} s)' if args.probe_delay else ''}")
    print(f"baseline (0 MB): peak RSS {base['peak_rss_mb']:.1f} MB, {base['outcome']}")
    print(f"flood:           peak RSS {got['peak_rss_mb']:.1f} MB (+{growth:.1f} MB), {got['outcome']}, "
          f"verdict at {got['verdict_s']:.1f} s")
    print(f"log written: {got['written_mb']:.0f} MB in {got['wall_s']:.1f} s ({rate:.1f} MB/s taken), "
          f"{got['log_mb']:.1f} MB saved (log_max_mb), {got['skimmed_lines']:,} lines only skimmed")
    ok = got["peak_rss_mb"] <= LIMIT_MB and got["outcome"] == "booted/ready"
    print(f"{'PASS' if ok else 'FAIL'}: peak RSS {got['peak_rss_mb']:.1f} MB, limit {LIMIT_MB:g} MB")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
