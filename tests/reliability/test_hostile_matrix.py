"""Hostile matrices and selections: values that collapse into one (`1` and `'1'`, `true` and `'True'`, `1.50` and
`'1.5'`), null names, NUL characters, values too long for a cell id to name a file, a cell-count bomb, integers Python
will not read, YAML types a matrix has no use for (`!!set`, `!!binary`), container settings on `runtime: process`,
loose booleans (`probe: "no"`), floats where an integer is meant, and `--select` expressions that are empty or
contradict themselves.

Each is refused by `validate` in one line `FILE:key: what is wrong` (exit 2), and `run` refuses it the same way before
a run directory exists — or, where the input has a meaning, it is read as written (`-1` keeps its sign in the id,
`1.0e+9` is passed as `1000000000`, `setup:` is never expanded). The hand-written files of this class are in
tests/reliability/data/bad_matrices (checked by test_bad_input.py); the ones generated here are too big or too odd to
keep as files.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.matrix.cells import MAX_CELLS, MAX_ID_CHARS
from harness.matrix.load import load_matrix
from tests.helpers.reliability import cli, fake_matrix

#: A matrix file is refused in well under this; past it, the loader is working through the input (a hang).
HUNG_S = 30

_AXIS = "axes:\n  case: {a: {}, b: {}}\n"


def _doc(head: str = "", axes: str = _AXIS) -> str:
    return f"name: hostile\n{head}{axes}"


def _bomb(n_axes: int = 40) -> str:
    return _doc(axes="axes:\n" + "".join(f"  a{i}: {{flag: --f{i}, values: [x, y]}}\n" for i in range(n_axes)))


#: (id, file text, key the line names, words it holds).
REFUSED = [
    ("flag-values-1-and-quoted-1", _doc(axes="axes:\n  tp: {flag: --tp, values: [1, '1']}\n"),
     "axes.tp.values", "values 1 and '1' are both '1'"),
    ("flag-values-1.0-and-1", _doc(axes="axes:\n  tp: {flag: --tp, values: [1.0, 1]}\n"),
     "axes.tp.values", "values 1.0 and 1 are both '1'"),
    ("flag-values-1.50-and-quoted-1.5", _doc(axes="axes:\n  g: {flag: --g, values: [1.50, '1.5']}\n"),
     "axes.g.values", "are both '1.5'"),
    ("named-values-1-and-quoted-1", _doc(axes="axes:\n  m:\n    1: {}\n    '1': {}\n"),
     "line 5", "keys 1 and '1' are both the name '1'"),
    ("named-values-true-and-quoted-True", _doc(axes="axes:\n  m:\n    true: {}\n    'True': {}\n"),
     "line 5", "keys True and 'True' are both the name 'True'"),
    ("named-values-1.5-and-quoted-1.5", _doc(axes="axes:\n  m:\n    1.5: {}\n    '1.5': {}\n"),
     "line 5", "are both the name '1.5'"),
    ("named-value-null", _doc(axes="axes:\n  m:\n    a: {}\n    null: {}\n"), "line 5", "a null key"),
    ("named-value-tilde", _doc(axes="axes:\n  m:\n    ~: {}\n"), "line 4", "a null key"),
    ("env-name-null", _doc('env: {null: "1"}\n'), "line 2", "a null key"),
    ("nul-in-model", _doc('model: "/srv/m\\0x"\n'), "model", "NUL character"),
    ("nul-in-command", _doc('command: [vllm, "se\\0rve"]\n'), "command[1]", "NUL character"),
    ("nul-in-env-value", _doc('env: {A: "x\\0"}\n'), "env.A", "NUL character"),
    ("nul-in-flag-value", _doc(axes='axes:\n  mml: {flag: --max-model-len, values: ["1\\0"]}\n'),
     "axes.mml.values[0]", "NUL character"),
    ("nul-in-fragment-arg", _doc(axes='axes:\n  m: {a: {args: ["--x", "\\0"]}}\n'),
     "axes.m.a.args[1]", "NUL character"),
    ("nul-in-setup", _doc('setup: "source \\0"\n'), "setup", "NUL character"),
    ("nul-from-a-default", _doc('model: "${HOSTILE_UNSET:-a\\0b}"\n'), "model", "NUL character"),
    ("nul-byte-raw", b"name: hostile\nmodel: a\x00b\n" + _AXIS.encode(), "line 2", "unacceptable character"),
    ("flag-value-300-chars", _doc(axes=f"axes:\n  spec: {{flag: --spec, values: ['{'x' * 300}']}}\n"),
     "axes.spec", f"makes cell ids of 305 characters; at most {MAX_ID_CHARS}"),
    ("named-value-300-chars", _doc(axes=f"axes:\n  m: {{{'v' * 300}: {{}}}}\n"),
     "axes.m", "(300 characters)"),
    ("30-axes-of-short-values", _doc(axes="axes:\n" + "".join(f"  axis{i}: {{flag: --f{i}, values: [value{i}]}}\n"
                                                               for i in range(30))),
     "axes", f"the 30 axes make cell ids of up to 429 characters; at most {MAX_ID_CHARS}"),
    ("40-axes-x-2-values", _bomb(), "axes", f"the 40 axes make 1,099,511,627,776 cells (their sizes multiplied, "
                                            f"before exclude); at most {MAX_CELLS:,}"),
    ("14-axes-x-2-values", _bomb(14), "axes", "make 16,384 cells"),
    ("yaml-int-4301-digits", _doc(f"container_port: {'9' * 4301}\n"), "line 2", "an integer of 4,301 digits"),
    ("json-int-4301-digits", '{"name": "hostile", "axes": {"m": {"flag": "--m", "values": [' + "1" * 4301 + "]}}}",
     "line 1", "an integer of 4,301 digits"),
    ("yaml-set", _doc(axes="axes:\n  m: {flag: --m, values: !!set {a, b}}\n"), "line 3", "a YAML set (!!set)"),
    ("yaml-omap", _doc("env: !!omap [{A: '1'}]\n"), "line 2", "!!omap"),
    ("yaml-pairs", _doc("env: !!pairs [{A: '1'}]\n"), "line 2", "!!pairs"),
    ("yaml-binary", _doc("model: !!binary aGk=\n"), "line 2", "!!binary"),
    *[(f"{key}-on-process", _doc(f"{key}: {value}\n"), key, "is a container setting")
      for key, value in [("image", "vllm/vllm-openai"), ("mounts", "[{source: /a, target: /b}]"),
                         ("entrypoint", "[vllm]"), ("pull", "never"), ("ipc", "host"), ("shm_size", "1g"),
                         ("container_port", 8000), ("engine_timeout_s", 5)]],
    ("fragment-mounts-on-process", _doc(axes="axes:\n  m: {a: {mounts: [{source: /a, target: /b}]}}\n"),
     "axes.m.a.mounts", "is a container setting"),
    *[(f"probe-{name}", _doc(f"probe: {value}\n"), "probe", "must be a valid boolean: true or false")
      for name, value in [("quoted-no", '"no"'), ("no", "no"), ("0", "0"), ("1", "1"), ("quoted-yes", "'yes'"),
                          ("off", "off")]],
    ("read-only-off", _doc("runtime: docker\nimage: i\nmounts: [{source: /a, target: /b, read_only: off}]\n"),
     "mounts[0].read_only", "true or false"),
    ("flag-value-inf", _doc(axes="axes:\n  m: {flag: --m, values: [.inf]}\n"), "axes.m.values", "finite"),
    ("flag-value-nan", _doc(axes="axes:\n  m: {flag: --m, values: [.nan]}\n"), "axes.m.values", "finite"),
    ("flag-value-1.0e+300", _doc(axes="axes:\n  m: {flag: --m, values: [1.0e+300]}\n"), "axes.m.values",
     "past a float's exact range"),
    ("gpus-per-cell-1.5", _doc("gpus_per_cell: 1.5\n"), "gpus_per_cell", "integer"),
]


@pytest.mark.parametrize("text,key,words", [pytest.param(*case[1:], id=case[0]) for case in REFUSED])
def test_a_hostile_matrix_is_one_line_at_validate(text, key, words, tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    try:
        r = cli("validate", "--matrix", path, env={"HOSTILE_UNSET": ""}, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"validate hung: no answer within {HUNG_S} s")
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.returncode == 2, f"exit {r.returncode}: {r.stdout}{r.stderr}"
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"{path}:{key}: ") and words in line, line
    assert "\0" not in line


@pytest.mark.parametrize("cases,top", [
    ({"a": {}}, {"model": "fake\0model"}),
    ({"x" * 300: {}}, {}),
    ({"a": {}}, {"axes": {f"a{i}": {"flag": f"--f{i}", "values": ["x", "y"]} for i in range(40)}}),
], ids=["nul-in-model", "named-value-300-chars", "40-axes-x-2-values"])
def test_run_refuses_it_before_a_run_directory_exists(cases, top, tmp_path):
    bad = fake_matrix(tmp_path / "bad.yaml", {k: {"FAKE_VLLM_SCENARIO": "boot"} for k in cases}, **top)
    results = tmp_path / "results"
    earlier = results / "earlier-run"
    earlier.mkdir(parents=True)
    (earlier / "results.json").write_text('{"kept": true}')
    try:
        r = cli("run", "--matrix", bad, "--results-dir", results, timeout=HUNG_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"run hung: no answer within {HUNG_S} s")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.splitlines()) == 1 and r.stderr.startswith(f"{bad}:"), r.stderr
    assert sorted(p.name for p in results.iterdir()) == ["earlier-run"], "a run directory was made"
    assert (earlier / "results.json").read_text() == '{"kept": true}', "an earlier run was touched"


# ---------------------------------------------------------------------------------------------------- read as written


def _load(tmp_path, text: str, **environ: str):
    (tmp_path / "m.yaml").write_text(text)
    loaded = load_matrix(tmp_path / "m.yaml", environ=environ)
    return loaded.matrix, list(loaded.cells)


def test_a_negative_length_keeps_its_sign_in_the_id(tmp_path):
    _, cells = _load(tmp_path, _doc(axes="axes:\n  max_model_len: {flag: --max-model-len, values: [-1, 1, 4096]}\n"))
    assert [c.id for c in cells] == ["mml_neg1", "mml1", "mml4096"]
    assert [c.args for c in cells] == [["--max-model-len", v] for v in ("-1", "1", "4096")]


@pytest.mark.parametrize("written,passed", [
    ("1.0e+9", "1000000000"), ("2.0", "2"), ("0.9", "0.9"), ("1.5e-3", "0.0015"), ("4096", "4096"), ("'1.0'", "1.0"),
], ids=["1.0e+9", "2.0", "0.9", "1.5e-3", "4096", "quoted-1.0"])
def test_a_float_written_integer_is_passed_as_an_integer(written, passed, tmp_path):
    _, (cell,) = _load(tmp_path, _doc(axes=f"axes:\n  n: {{flag: --n, values: [{written}]}}\n"))
    assert cell.args == ["--n", passed]


def test_setup_is_never_expanded(tmp_path):
    text = _doc('setup: "export MODEL=${HOSTILE_SETUP_VAR}; source ${HOME}/env"\n')
    matrix, _ = _load(tmp_path, text)
    assert matrix.setup == "export MODEL=${HOSTILE_SETUP_VAR}; source ${HOME}/env"
    r = cli("validate", "--matrix", tmp_path / "m.yaml", timeout=HUNG_S)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("value,expected", [("true", True), ("FALSE", False), ("${HOSTILE_PROBE:-false}", False)],
                         ids=["true", "FALSE", "expanded-false"])
def test_a_yaml_boolean_is_still_read(value, expected, tmp_path):
    matrix, _ = _load(tmp_path, _doc(f"probe: {value}\n"))
    assert matrix.probe is expected


# ---------------------------------------------------------------------------------------------------- --select


@pytest.mark.parametrize("expr,words", [
    ("case=a,case=b", "'case=a,case=b' selects no cell"),
    ("", "--select: an empty expression"),
    ("  ", "--select: an empty expression"),
    ("case=a,", "--select: 'case=a,' has an empty term"),
    (",", "--select: ',' has an empty term"),
    ("case=a,,case_b", "has an empty term"),
    ("case=a||b", "--select:case: 'case=a||b' has an empty value"),
    ("case=", "--select:case: 'case=' has an empty value"),
], ids=["same-axis-twice", "empty", "blank", "trailing-comma", "comma-only", "double-comma", "double-bar",
        "no-value"])
def test_a_bad_selection_is_one_line_exit_2(expr, words, tmp_path):
    m = fake_matrix(tmp_path / "m.yaml", {"a": {"FAKE_VLLM_SCENARIO": "boot"}, "b": {"FAKE_VLLM_SCENARIO": "boot"}})
    r = cli("cells", "--matrix", m, "--select", expr, timeout=HUNG_S)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr
    assert r.stdout == "", "no cell was listed"


def test_terms_on_one_axis_are_anded(tmp_path):
    m = fake_matrix(tmp_path / "m.yaml", {v: {"FAKE_VLLM_SCENARIO": "boot"} for v in ("a", "b", "c")})
    r = cli("cells", "--matrix", m, "--select", "case=a|b,case=b|c", "--json", timeout=HUNG_S)
    assert r.returncode == 0, r.stderr
    assert [c["cell_id"] for c in json.loads(r.stdout)["cells"]] == ["case_b"]
