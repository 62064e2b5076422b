"""The exit codes of every `boot-harness` command, in one table."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    #: Every expectation met (run, repro --exec, check), no regression (compare), or the command simply did its job.
    OK = 0
    #: A cell missed its expectation or errored (run, repro --exec, check), a regression (compare), a frontier that
    #: could not be found (frontier).
    FAILED = 1
    #: Bad input or a missing prerequisite (runtime, image, GPU, NVML): one line on stderr, before anything ran.
    USAGE = 2
    #: Interrupted (Ctrl-C, SIGTERM, SIGHUP): what finished is kept and `--resume` goes on.
    INTERRUPTED = 130
