"""The harness's exception hierarchy.

Every error a user can cause by what they wrote or what their machine lacks is a ``UsageError``: the CLI prints its one
line (for a matrix file, one line per mistake) and exits 2, never a traceback. Everything else is a bug or an
environment failure and is reported as such.
"""

from __future__ import annotations

from harness.exitcodes import ExitCode


class HarnessError(Exception):
    """Base of every error the harness raises on purpose; the CLI prints its one line and exits with `exit_code`."""

    exit_code = ExitCode.FAILED


class UsageError(HarnessError):
    """Bad input or a missing prerequisite: one line for the user, exit code 2."""

    exit_code = ExitCode.USAGE


class ConfigError(UsageError):
    """A mistake in a matrix file, located as ``FILE:key.path: what is wrong``."""

    def __init__(self, file: str, key: str, message: str):
        self.file, self.key, self.message = file, key, message
        location = f"{file}:{key}" if key else file
        super().__init__(f"{location}: {message}")


class ConfigErrors(ConfigError):
    """Every mistake found in one matrix file, one `FILE:key.path: what is wrong` line each (still exit 2)."""

    def __init__(self, problems: list[ConfigError]):
        self.problems = problems
        first = problems[0]
        super().__init__(first.file, first.key, first.message)
        self.args = ("\n".join(str(p) for p in problems),)

    def __str__(self) -> str:
        return self.args[0]

    @classmethod
    def of(cls, problems: list[ConfigError]) -> ConfigError:
        return problems[0] if len(problems) == 1 else cls(problems)


class RuntimeUnavailable(UsageError):
    """The runtime a matrix asks for cannot run here (no vllm executable, no container engine, missing image)."""


class Interrupted(HarnessError):
    """The harness was asked to stop (SIGINT/SIGTERM/SIGHUP); raised where the run can still clean up."""

    exit_code = ExitCode.INTERRUPTED


class EngineGone(Interrupted):
    """The container engine stopped answering between cells (restarted, upgraded, killed) and did not come back in
    time: the run stops as if interrupted — what finished is kept, `--resume` finishes it."""


class GpuLost(HarnessError):
    """NVML no longer answers for a GPU ("GPU is lost", "Unknown Error"): the driver or the board is gone."""

    def __init__(self, index: int, message: str):
        self.index = index
        super().__init__(message)


class GpusGone(Interrupted):
    """A GPU the run hands out was lost: no more cells start on it, so the run stops as if interrupted — what
    finished is kept, `--resume` finishes it once the GPU is back."""


class UnsetVariable(HarnessError):
    """A `${NAME}` in a matrix file with no value and no default; the loader turns each into one ConfigError line."""

    def __init__(self, path: str, message: str, name: str | None = None):
        self.path, self.message, self.name = path, message, name
        super().__init__(message)


class NvmlUnavailable(HarnessError):
    """No NVML here: the library is missing, the driver does not answer, or it sees no GPU (a GPU request on such a
    machine becomes a RuntimeUnavailable)."""


class RecordWriteError(HarnessError):
    """A record could not be written (a full disk, a read-only mount): what is on disk stays the last whole version
    (writes are atomic), the run stops, and `--resume` finishes it once the cause is gone."""

    def __init__(self, path: object, exc: OSError):
        import errno

        self.path, self.errno = path, exc.errno
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        super().__init__(f"{path}: could not be written: {exc.strerror or exc} ({name}); what was written before is "
                         "kept: make room, then --resume the run")


class CellStartError(HarnessError):
    """A cell could not be started; the cell's outcome becomes ``error`` with this message as its reason."""


class ProbeFailed(HarnessError):
    """A memory probe can no longer read the server's memory (the container is gone, NVML errs, no permission): the
    curve stops there with this reason; the cell and the run go on (harness.memory)."""


class FileRefused(ConfigError):
    """A file the harness will not read or write as asked — a FIFO (it would block), a device (it never ends, or is
    not ours to replace), a link out of a run, a file past its size bound, NaN or nesting past the bound in a record —
    located as ``FILE:key.path: what is wrong`` (exit 2), so no command hangs, eats memory or replaces what it met."""


class RunDamaged(ConfigErrors):
    """Every record of a run directory that cannot be read or is missing, one ``FILE:key: what is wrong`` line each
    (exit 2): a command never goes on with part of a run as if it were all of it."""
