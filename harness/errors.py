"""The harness's exception tree: every error it raises on purpose, in one place.

The CLI prints a `HarnessError`'s one line (a located error's one line per mistake) and exits with its `exit_code`,
never a traceback; anything else is a bug or an environment failure and is reported as such. Which to catch
(docs/api.md): `InputError` for what a user wrote or pointed at, `RunStopped` for a run that stopped and can be
resumed, `HarnessError` for all of them. An `InternalSignal` is how one part tells another what happened; the part
above turns it into what the user sees (the arrow), so it is never the one to catch.

    HarnessError                  exit 1 unless its class says otherwise
    ├── UsageError                exit 2: bad input or a missing prerequisite
    │   ├── InputError            located: `FILE:key.path: what is wrong` (.file, .key, .message, .problems)
    │   │   ├── ConfigError       a mistake in a matrix file
    │   │   │   └── ConfigErrors  every mistake in one matrix file, one line each
    │   │   ├── SelectionError    a `--select` term the matrix has nothing for
    │   │   ├── FileRefused       a file the harness will not read or write as asked (a FIFO, a link out of a run)
    │   │   └── RunDamaged        every record of a run that cannot be read or is missing, one line each
    │   ├── RuntimeUnavailable    the runtime a matrix asks for cannot run here
    │   ├── PatchMismatch         a matrix's patch does not fit its image
    │   └── EndsDisagree          a bisect's ends do not give their sides' verdicts
    ├── RunStopped                exit 130: what finished is kept, `--resume` finishes the run
    │   ├── Interrupted           Ctrl-C, SIGTERM, SIGHUP
    │   ├── EngineGone            the container engine stopped answering and did not come back
    │   └── GpusGone              a GPU the run hands out was lost
    ├── RecordWriteError          a record could not be written (a full disk)
    ├── CellStartError            a cell could not be started: the cell's outcome is `error`
    ├── PatchError                a patch that does not apply, a file whose hash is not the promised one
    ├── PatchStopped              `bisect --on-patch-fail stop`: the patch stopped fitting, that is the answer
    └── InternalSignal            never the user's: caught where it is raised, and turned into ...
        ├── UnsetVariable         ... a ConfigError line (the matrix loader)
        ├── NvmlUnavailable       ... the CPU inventory, or RuntimeUnavailable for a GPU request
        ├── GpuLost               ... GpusGone, or a memory curve's end
        ├── ProbeFailed           ... a memory curve's end (the cell goes on)
        └── BadRecord             ... a gc note (an active/ record never acted on)
"""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import ClassVar

from harness.exitcodes import ExitCode


class HarnessError(Exception):
    """Base of every error the harness raises on purpose; the CLI prints its one line and exits with `exit_code`."""

    exit_code: ClassVar[ExitCode] = ExitCode.FAILED


# ---- what a user wrote or pointed at (exit 2)

class UsageError(HarnessError):
    """Bad input or a missing prerequisite: one line for the user, exit code 2."""

    exit_code = ExitCode.USAGE


class InputError(UsageError):
    """A mistake located in what the user gave (a file, an option): ``FILE:key.path: what is wrong``. `problems` is
    every mistake it stands for, one line each (itself, for one)."""

    def __init__(self, file: str, key: str, message: str):
        self.file, self.key, self.message = file, key, message
        location = f"{file}:{key}" if key else file
        super().__init__(f"{location}: {message}")

    @property
    def problems(self) -> list[InputError]:
        return [self]


class _Several(InputError):
    """Several located mistakes at once, one line each; located itself at the first."""

    def __init__(self, problems: Sequence[InputError]):
        self._problems = list(problems)
        first = problems[0]
        super().__init__(first.file, first.key, first.message)
        self.args = ("\n".join(str(p) for p in problems),)

    def __str__(self) -> str:
        return str(self.args[0])

    @property
    def problems(self) -> list[InputError]:
        return self._problems

    @classmethod
    def of(cls, problems: Sequence[InputError]) -> InputError:
        return problems[0] if len(problems) == 1 else cls(problems)


class ConfigError(InputError):
    """A mistake in a matrix file, located as ``FILE:key.path: what is wrong``."""


class ConfigErrors(_Several, ConfigError):
    """Every mistake found in one matrix file, one `FILE:key.path: what is wrong` line each (still exit 2)."""


class SelectionError(InputError):
    """A `--select` (or `--cell`) expression the matrix has nothing for, located as ``--select:axis: what is wrong``."""


class FileRefused(InputError):
    """A file the harness will not read or write as asked — a FIFO (it would block), a device (it never ends, or is
    not ours to replace), a link out of a run, a file past its size bound, NaN or nesting past the bound in a record —
    located as ``FILE:key.path: what is wrong`` (exit 2), so no command hangs, eats memory or replaces what it met."""


class RunDamaged(_Several):
    """Every record of a run directory that cannot be read or is missing, one ``FILE:key: what is wrong`` line each
    (exit 2): a command never goes on with part of a run as if it were all of it."""


class RuntimeUnavailable(UsageError):
    """The runtime a matrix asks for cannot run here (no vllm executable, no container engine, missing image)."""


class PatchMismatch(UsageError):
    """A PatchError met while preparing a cell's image: bad input for a run (exit 2), and for a bisect a finding of
    its own about that candidate (harness.bisect.runner)."""


class EndsDisagree(UsageError):
    """An end did not give its side's verdict: nothing to bisect (exit 2, one line with what each end gave)."""


# ---- a run that stopped before its end: what finished is kept, `--resume` goes on (exit 130)

class RunStopped(HarnessError):
    """The run stopped before its end and can be resumed; raised where it can still clean up."""

    exit_code = ExitCode.INTERRUPTED


class Interrupted(RunStopped):
    """The harness was asked to stop (SIGINT/SIGTERM/SIGHUP)."""

    exit_code = ExitCode.INTERRUPTED


class EngineGone(RunStopped):
    """The container engine stopped answering between cells (restarted, upgraded, killed) and did not come back in
    time: the run stops — what finished is kept, `--resume` finishes it."""

    exit_code = ExitCode.INTERRUPTED


class GpusGone(RunStopped):
    """A GPU the run hands out was lost: no more cells start on it, so the run stops — what finished is kept,
    `--resume` finishes it once the GPU is back."""

    exit_code = ExitCode.INTERRUPTED


# ---- failures of a run or a command (exit 1)

class RecordWriteError(HarnessError):
    """A record could not be written (a full disk, a read-only mount): what is on disk stays the last whole version
    (writes are atomic), the run stops, and `--resume` finishes it once the cause is gone."""

    def __init__(self, path: object, exc: OSError):
        self.path, self.errno = path, exc.errno
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        super().__init__(f"{path}: could not be written: {exc.strerror or exc} ({name}); what was written before is "
                         "kept: make room, then --resume the run")


class CellStartError(HarnessError):
    """A cell could not be started; the cell's outcome becomes ``error`` with this message as its reason."""


class PatchError(HarnessError):
    """A patch that does not apply, or a file whose hash is not the one the matrix promised."""


class PatchStopped(HarnessError):
    """`--on-patch-fail stop`: the cell's patch stopped fitting at a candidate; that is the answer (exit 1)."""


# ---- internal signals: one part of the harness telling another; never what a user is shown as such

class InternalSignal(HarnessError):
    """Raised by one part of the harness for the part above it, which turns it into what the user sees (see the
    tree above). Still a HarnessError, so one that escaped by a bug is one line, not a traceback."""


class UnsetVariable(InternalSignal):
    """A `${NAME}` in a matrix file with no value and no default; the loader turns each into one ConfigError line."""

    def __init__(self, path: str, message: str, name: str | None = None):
        self.path, self.message, self.name = path, message, name
        super().__init__(message)


class NvmlUnavailable(InternalSignal):
    """No NVML here: the library is missing, the driver does not answer, or it sees no GPU (a GPU request on such a
    machine becomes a RuntimeUnavailable)."""


class GpuLost(InternalSignal):
    """NVML no longer answers for a GPU ("GPU is lost", "Unknown Error"): the driver or the board is gone."""

    def __init__(self, index: int, message: str):
        self.index = index
        super().__init__(message)


class ProbeFailed(InternalSignal):
    """A memory probe can no longer read the server's memory (the container is gone, NVML errs, no permission): the
    curve stops there with this reason; the cell and the run go on (harness.memory)."""


class BadRecord(InternalSignal):
    """An active/ record that is not one the harness wrote (the message says why): never acted on."""
