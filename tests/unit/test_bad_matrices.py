"""Every malformed matrix in tests/data/bad_matrices/ is refused the same way, through the real command line:

    boot-harness validate --matrix FILE   →   exit 2, one stderr line `FILE:key.path: what is wrong`, no traceback

EXPECTED.tsv says, per file, the key path that line must name (`-`: the whole file, `FILE: what`) and words the
message must contain (`-`: not checked). Each file holds one mistake, described in its first comment line.
The good matrices in tests/data/good_matrices/ must pass the same command with exit 0. A variable the environment
does not set (UNSET_NOTED) is the environment's mistake, not the file's: `validate` says so in a note and exits 0,
while `run` (and the loader) refuse it in the one line EXPECTED.tsv names.

Each file gets its own `validate` process (forked from one interpreter that imported the CLI once; see below).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli import BOOT_HARNESS, boot_harness
from tests.helpers.env import require

DATA = Path(__file__).resolve().parent.parent / "data"
BAD = DATA / "bad_matrices"
GOOD = DATA / "good_matrices"
REPO = DATA.parent.parent

#: Variables the bad matrices rely on being unset (and the good ones on falling back to their defaults).
UNSET = ("BOOT_HARNESS_TEST_UNSET", "BOOT_HARNESS_TEST_UNSET_TOO", "MODEL", "VLLM_IMAGE")



@dataclass(frozen=True)
class Expected:
    file: str
    key: str  # "" for the whole file
    words: str  # "" when not checked


def read_expected() -> dict[str, Expected]:
    rows: dict[str, Expected] = {}
    for line in (BAD / "EXPECTED.tsv").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        file, key, words = line.split("\t")
        assert file not in rows, f"EXPECTED.tsv lists {file} twice"
        rows[file] = Expected(file, "" if key == "-" else key, "" if words == "-" else words)
    return rows


EXPECTED = read_expected()
BAD_FILES = sorted(p.name for p in BAD.glob("*.yaml"))
GOOD_FILES = sorted(p.name for p in GOOD.glob("*.yaml"))


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET}
    env["NO_COLOR"] = "1"
    return env


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def validate(path: Path, program: Sequence[str] = BOOT_HARNESS) -> Result:
    """One cold `boot-harness validate --matrix PATH` (path relative to the repo, as a user would type it)."""
    r = boot_harness("validate", "--matrix", path.relative_to(REPO), program=program, cwd=REPO, env=clean_env(),
                     inherit_env=False, timeout=60)
    return Result(r.returncode, r.stdout, r.stderr)


# A cold interpreter costs ~0.4 s of CPU, mostly importing pydantic and building the models; a hundred of them would
# make this module the slowest in the suite. So one interpreter imports the CLI once and forks a child per file: each
# validate still runs in its own process, with its own stdout/stderr and exit status, through `main()` exactly as the
# console script calls it (an uncaught exception prints a traceback and exits 1, as it would there).
# `test_forked_runs_match_cold_runs` checks that the two ways agree.
_FORKING_DRIVER = r"""
import os, sys, traceback
import harness.matrix.cells, harness.matrix.load  # imported lazily by main(); import once, before forking
from harness.cli import main

out, paths = sys.argv[1], sys.argv[2:]
running = {}  # pid -> index


def reap():
    pid, status = os.wait()
    with open(os.path.join(out, f"{running.pop(pid)}.rc"), "w") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))


for i, path in enumerate(paths):
    while len(running) >= max(2, os.cpu_count() or 2):
        reap()
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd, name in ((1, "out"), (2, "err")):
            f = os.open(os.path.join(out, f"{i}.{name}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        try:
            code = main(["validate", "--matrix", path])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(code)
    running[pid] = i
while running:
    reap()
"""


def validate_all(paths: list[Path], tmp: Path) -> dict[str, Result]:
    shown = [str(p.relative_to(REPO)) for p in paths]
    if not hasattr(os, "fork"):
        with ThreadPoolExecutor(max_workers=max(4, (os.cpu_count() or 2) * 2)) as pool:
            return dict(zip(shown, pool.map(validate, paths), strict=False))
    subprocess.run([sys.executable, "-c", _FORKING_DRIVER, str(tmp), *shown], cwd=REPO, env=clean_env(),
                   check=True, timeout=120)
    return {
        s: Result(int((tmp / f"{i}.rc").read_text()), (tmp / f"{i}.out").read_text(encoding="utf-8"),
                  (tmp / f"{i}.err").read_text(encoding="utf-8"))
        for i, s in enumerate(shown)
    }


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Result]:
    paths = [BAD / f for f in BAD_FILES] + [GOOD / f for f in GOOD_FILES]
    return validate_all(paths, tmp_path_factory.mktemp("validate"))


def test_every_bad_matrix_is_listed_in_expected_tsv_and_vice_versa():
    assert set(BAD_FILES) == set(EXPECTED), "add the file to EXPECTED.tsv (or remove the stale row)"
    assert len(BAD_FILES) >= 35


def test_every_bad_matrix_says_what_its_mistake_is():
    for name in BAD_FILES:
        data = (BAD / name).read_bytes()
        if data.strip():
            assert data.startswith(b"# "), f"{name}: start with a comment saying what the one mistake is"


def _params(names: list[str]):
    return list(names)


#: Bad matrices whose one mistake is an unset variable: valid with a note, refused by `run`.
UNSET_NOTED = ("env_var_unset.yaml", "env_var_unset_in_axis.yaml")


@pytest.mark.parametrize("name", UNSET_NOTED)
def test_an_unset_variable_is_a_note_at_validate_and_the_loaders_one_line(name: str, results):
    from harness.errors import ConfigError
    from harness.matrix.load import load_matrix

    shown = f"tests/data/bad_matrices/{name}"
    r = results[shown]
    assert (r.returncode, r.stderr) == (0, "note: BOOT_HARNESS_TEST_UNSET is not set, shown as <NAME>; `run` needs "
                                           "it\n")
    assert r.stdout.startswith(f"{shown}: ok — ")
    with pytest.raises(ConfigError) as err:
        load_matrix(BAD / name, environ={})
    assert err.value.key == EXPECTED[name].key and EXPECTED[name].words in err.value.message


@pytest.mark.parametrize("name", _params([n for n in BAD_FILES if n not in UNSET_NOTED]))
def test_bad_matrix_is_one_line_exit_2(name: str, results):
    shown = f"tests/data/bad_matrices/{name}"
    r = results[shown]
    exp = EXPECTED[name]
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, f"exit {r.returncode}; stdout={r.stdout!r} stderr={r.stderr!r}"
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert r.stderr.endswith("\n")
    (line,) = lines
    prefix = f"{shown}:{exp.key}: " if exp.key else f"{shown}: "
    assert line.startswith(prefix), f"expected {prefix!r}…, got {line!r}"
    assert line[len(prefix):].strip(), "the line must say what is wrong"
    assert exp.words in line
    assert r.stdout == ""


@pytest.mark.parametrize("name", GOOD_FILES)
def test_good_matrix_validates(name: str, results):
    r = results[f"tests/data/good_matrices/{name}"]
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith(f"tests/data/good_matrices/{name}: ok — ")


#: A few files run cold, each in a fresh interpreter, to check the forked runs above tell the truth.
COLD = ["non_utf8.yaml", "env_var_unset.yaml", "patch_file_missing.yaml"]


def test_forked_runs_match_cold_runs(results):
    paths = [BAD / f for f in COLD] + [GOOD / "seed.yaml"]
    with ThreadPoolExecutor(max_workers=len(paths)) as pool:
        cold = list(pool.map(validate, paths))
    for path, r in zip(paths, cold, strict=False):
        assert r == results[str(path.relative_to(REPO))], path.name


def test_the_console_script_behaves_like_the_module():
    script = shutil.which("boot-harness") or str(Path(sys.executable).with_name("boot-harness"))
    require("the boot-harness console script", Path(script).exists(),
            "scripts/setup-dev.sh installs it (pip install -e .)")
    r = validate(BAD / "unknown_top_key.yaml", [script])
    assert (r.returncode, r.stderr) == (
        2, "tests/data/bad_matrices/unknown_top_key.yaml:timeout: unknown key (did you mean 'timeout_s'?)\n")


def test_a_missing_matrix_file_is_one_line_exit_2():
    r = boot_harness("validate", "--matrix", "no/such/matrix.yaml", cwd=REPO, timeout=60)
    assert (r.returncode, r.stderr) == (2, "no/such/matrix.yaml: no such file\n")
