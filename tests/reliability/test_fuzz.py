"""Fuzzing the matrix loader: whatever a file holds, loading it gives a Matrix (and its cells) or one located error,
never a traceback. The log parser's own properties are in tests/unit/test_logfacts_properties.py, and the parser is
fuzzed at volume by benchmarks/fuzz_parser.py; the readers that cut a server's output into lines are checked here.

Budget: a few hundred examples each, ~10 s in all."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.errors import InputError
from harness.matrix.load import load_matrix
from harness.matrix.model import Matrix
from harness.runtime.reader import MAX_LINE, pump_chunks, pump_lines
from tests.helpers.env import ROOT

GOOD = sorted((ROOT / "tests" / "data" / "good_matrices").glob("*.yaml")) + sorted((ROOT / "examples").glob("*.yaml"))
FUZZ = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
ENV = {"VLLM_CPU_VENV": "/opt/vllm", "TINY_MODELS": "/models", "ARCH_MODELS": "/models", "GLM_MODEL_DIR": "/models/glm"}

# ---------------------------------------------------------------------------------------------------- strategies

KEYS = ["name", "runtime", "command", "model", "args", "env", "timeout_s", "probe", "linger_s", "axes", "exclude",
        "expect", "image", "gpus", "ipc", "shm_size", "mounts", "container_port", "entrypoint", "pull", "gpus_per_cell",
        "flag", "values", "label", "where", "outcome", "reason", "patches", "target", "patch", "base_sha256",
        "patched_sha256", "source", "read_only", "mml", "mtp", "off", "on", "booted", "refused"]
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20), st.sampled_from(["${HOME}", "${UNSET_FUZZ_VAR}", "${X:-d}", "$${", "${", "--max-model-len",
                                           "process", "docker", "all", "booted", "1g", "/abs", "a" * 64, "-1", "0"]),
)
KEY = st.one_of(st.sampled_from(KEYS), st.text(max_size=8), st.integers(-3, 3), st.booleans())
TREE = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(KEY, inner, max_size=5)), max_leaves=25)


@st.composite
def matrix_like(draw) -> dict:
    """Mostly-plausible matrices: the real keys, with values that are sometimes right and often not."""
    doc = draw(st.dictionaries(st.sampled_from(KEYS[:21]), TREE, max_size=8))
    if draw(st.booleans()):
        doc["name"] = draw(st.one_of(st.just("fuzz"), SCALARS))
    if draw(st.booleans()):
        axis = draw(st.one_of(
            st.fixed_dictionaries({"flag": st.one_of(st.just("--max-model-len"), SCALARS),
                                   "values": st.one_of(st.lists(SCALARS, max_size=3), TREE)}),
            st.dictionaries(st.one_of(st.sampled_from(["off", "on", "a", "b"]), KEY),
                            st.one_of(st.none(), st.fixed_dictionaries({}, optional={
                                "args": TREE, "env": TREE, "image": SCALARS, "patches": TREE, "mounts": TREE})),
                            max_size=3),
            TREE))
        doc["axes"] = {draw(st.one_of(st.just("a"), KEY)): axis}
    return doc


def _dump(doc) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def load_text(text: str, tmp: Path) -> None:
    """Through the real loader (file, decode, YAML, env, model, cells, patch files): a Matrix, or an InputError."""
    path = tmp / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        loaded = load_matrix(path, environ=ENV)
    except InputError as exc:
        assert str(exc).startswith(str(path)), exc
        return
    assert isinstance(loaded.matrix, Matrix)
    assert list(loaded.cells)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(doc=st.one_of(matrix_like(), TREE))
def test_any_yaml_tree_loads_or_is_one_config_error(doc, scratch):
    load_text(_dump(doc), scratch)


@st.composite
def mutated_good_matrix(draw) -> str:
    """A real matrix file, torn: lines dropped, doubled, cut, re-indented, or junk pasted in."""
    text = draw(st.sampled_from(GOOD)).read_text()
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        how = draw(st.sampled_from(["drop", "double", "cut", "indent", "dedent", "junk", "swap"]))
        if how == "drop":
            del lines[i]
        elif how == "double":
            lines.insert(i, lines[i])
        elif how == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif how == "indent":
            lines[i] = "  " + lines[i]
        elif how == "dedent":
            lines[i] = lines[i].lstrip()
        elif how == "junk":
            lines[i] = lines[i] + draw(st.text(alphabet=":-[]{}&*!|>'\"%@`#,?$ \t\x00\ufeff", max_size=6))
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines) + "\n"


@FUZZ
@given(text=mutated_good_matrix())
def test_a_torn_real_matrix_loads_or_is_one_config_error(text, scratch):
    load_text(text, scratch)


def test_the_good_matrices_the_mutations_start_from_do_load():
    for path in GOOD:
        assert list(load_matrix(path, environ=ENV).cells)


# Deep nesting, alias bombs and infinite deadlines: files the fuzzer reaches only by luck, so they are fixed cases in
# tests/reliability/data/bad_matrices (test_bad_input.py).


# ---------------------------------------------------------------------------------------------------- the readers


def _lines_from(pump, data: bytes, chunks: list[int]) -> list[str]:
    got: list[str | None] = []
    if pump is pump_lines:
        pump_lines(io.BytesIO(data), got.append)
    else:
        pieces, i = [], 0
        for n in chunks:
            pieces.append(data[i:i + n])
            i += n
        pieces.append(data[i:])
        pump_chunks(iter(pieces), got.append)
    assert got[-1] is None and None not in got[:-1], "one end of log, last"
    return got[:-1]  # type: ignore[return-value]  # no None: asserted


PIECES = [b"\n", b"\r\n", b"\r", b"x" * 100, b"\xff\xfe", b"\x00", "é€😀".encode(), b"y" * (MAX_LINE - 1),
          b"z" * MAX_LINE]
BYTES = st.binary(max_size=3000) | st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join)


@settings(max_examples=200, deadline=None)
@given(data=BYTES, chunks=st.lists(st.integers(0, 70000), max_size=8))
def test_the_readers_keep_every_byte_and_bound_every_line(data, chunks):
    """However the bytes are chunked (docker's stream) or read (a pipe), no line is longer than MAX_LINE, nothing is
    lost but the newlines, and the two readers agree wherever no line reaches MAX_LINE."""
    for pump in (pump_lines, pump_chunks):
        lines = _lines_from(pump, data, chunks)
        assert all(len(line) <= MAX_LINE for line in lines)  # n bytes never decode to more than n characters
        assert sum(len(line) for line in lines) >= len(data.replace(b"\n", b"")) // 4
    assume(all(len(part) < MAX_LINE for part in data.split(b"\n")))
    decoded = [p.decode("utf-8", errors="replace") for p in data.split(b"\n")]
    expected = decoded[:-1] + ([decoded[-1]] if decoded[-1] else [])
    assert _lines_from(pump_chunks, data, chunks) == expected
    assert _lines_from(pump_lines, data, chunks) == expected
