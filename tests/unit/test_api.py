"""The public face: `harness` exports what a script uses (docs/api.md), each name resolves to the object its module
defines, is listed by `dir()`, is documented, and the doc's python blocks run as written — the nightly script on the
matrix's own (process) runtime with its servers scripted, the rest as they stand. That `import harness.version` stays
light is checked from a fresh interpreter in tests/integration/test_api_imports.py (unit tests start no program)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import sys
from pathlib import Path

import pytest

import harness
from harness.runtime.fake import FakeRuntime, Script

ROOT = Path(__file__).resolve().parents[2]
API_DOC = ROOT / "docs" / "api.md"
PUBLIC = sorted(harness.__all__)


def python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", API_DOC.read_text(encoding="utf-8"), re.S | re.M)


def block(marker: str) -> str:
    (found,) = [b for b in python_blocks() if marker in b]
    return found


#: Each python block of docs/api.md, by a phrase only it holds; each has a test below.
BLOCKS = {"nightly": '"""nightly.py', "predict": "predict_kv(", "fake runtime": "FakeRuntime("}


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_resolves_to_what_its_module_defines(name):
    value = getattr(harness, name)
    module, attribute = harness._EXPORTS[name]
    assert value is getattr(importlib.import_module(module), attribute), f"harness.{name} moved: fix the block"


def test_the_names_are_written_once_in_the_type_checking_block():
    """`__all__` and the lazy table are the block's imports, read from the source: no second list to keep equal."""
    source = (ROOT / "harness" / "__init__.py").read_text()
    tree = ast.parse(source)
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"]
    written = [a.asname or a.name for i in block.body for a in i.names]
    assert harness.__all__ == written and list(harness._EXPORTS) == written
    assert len(set(written)) == len(written) and "__version__" in written and "predict_kv" in written
    assigned = {ast.unparse(t) for n in ast.walk(tree) if isinstance(n, ast.Assign | ast.AnnAssign)
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target])}
    assert not assigned & {"__all__", "_EXPORTS"}, "a second list of the public names"


def test_dir_lists_every_public_name_and_an_unknown_one_is_an_attribute_error():
    assert set(PUBLIC) <= set(dir(harness))
    with pytest.raises(AttributeError, match="no attribute 'run_cells'"):
        harness.run_cells  # noqa: B018 - the access is what raises


def test_no_public_name_is_a_subpackage_s_name():
    """`harness.predict` is the subpackage once anything imports it, whatever the root exports under that name."""
    submodules = {m.name for m in pkgutil.iter_modules(harness.__path__)}
    assert "predict" in submodules and not set(PUBLIC) & submodules
    importlib.import_module("harness.predict")
    assert harness.predict_kv is importlib.import_module("harness.predict.predictor").predict


@pytest.mark.parametrize("name", PUBLIC)
def test_each_public_name_is_documented(name):
    assert re.search(rf"`{re.escape(name)}[`(]", API_DOC.read_text(encoding="utf-8")), f"docs/api.md: add {name}"


def test_each_python_block_of_the_doc_is_run_here():
    assert sorted(next(k for k, m in BLOCKS.items() if m in b) for b in python_blocks()) == sorted(BLOCKS)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """The doc's relative paths as from the project root (examples/), its writes under tmp_path, and the variables
    the CPU example reads: the tiny models whose config.json the KV prediction reads."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VLLM_CPU_VENV", str(tmp_path / "no-venv"))
    monkeypatch.setenv("TINY_MODELS", str(ROOT / "tests" / "data" / "kv" / "models"))
    return tmp_path


#: What the example matrices read from the environment, unset in a fresh clone.
SETUP_VARIABLES = ("VLLM_CPU_VENV", "TINY_MODELS", "ARCH_MODELS")


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """The doc's blocks as a new user runs them: from a clone's root, nothing set up."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path)
    for name in SETUP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run_block(code: str, argv: list[str]) -> tuple[int | None, dict]:
    """`code` as a script run with `argv`: (its exit code, None when it did not exit; its globals)."""
    namespace: dict = {"__name__": "__main__"}
    sys_argv = sys.argv
    sys.argv = argv
    try:
        exec(compile(code, str(API_DOC), "exec"), namespace)
    except SystemExit as exc:
        return int(exc.code or 0), namespace
    finally:
        sys.argv = sys_argv
    return None, namespace


def test_the_nightly_script_boots_compares_and_exits_as_the_cli_would(workdir, monkeypatch, capsys):
    expected_refused = ["mml4096-spec_off-kv_tight", "mml4096-spec_draft-kv_tight"]
    nights = [FakeRuntime({c: Script.refused_kv(4096) for c in expected_refused}),
              FakeRuntime({c: Script.refused_kv(4096) for c in [*expected_refused, "mml4096-spec_draft-kv_raised"]})]
    # the matrix's own runtime (process), its servers scripted: the script is run exactly as the doc shows it
    monkeypatch.setattr("harness.runtime.process.ProcessRuntime", lambda command: nights.pop(0))
    code, first = run_block(block(BLOCKS["nightly"]), ["nightly.py"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    assert out == ["mml4096-spec_off-kv_tight refused (kv_cache_too_small) matched None",
                   "mml4096-spec_draft-kv_tight refused (kv_cache_too_small) matched None",
                   "mml4096-spec_draft-kv_raised booted (ready) matched 10720"]

    code, _ = run_block(block(BLOCKS["nightly"]), ["nightly.py", str(first["session"].run_dir)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert "mml4096-spec_draft-kv_raised refused (kv_cache_too_small) MISSED None" in out
    assert out[-1] == "regression: mml4096-spec_draft-kv_raised booted → refused (kv_cache_too_small)"
    assert len(list((workdir / "results").glob("*/results.json"))) == 2


def test_the_prediction_block_prints_what_the_kv_command_predicts(workdir, capsys):
    assert run_block(block(BLOCKS["predict"]), ["predict.py"])[0] is None
    from harness.predict.model import read_model
    from harness.predict.predictor import predict
    from harness.predict.serve_flags import parse_serve_flags

    p = predict(read_model(ROOT / "examples/models/glm-5.3-flash"),
                parse_serve_flags(["--max-model-len", "131072"]), available_bytes=40 * 1024**3)
    assert capsys.readouterr().out == (f"{p.bytes_per_token} B/token, {p.need_bytes} B for one request, "
                                       f"{p.kv_tokens} tokens, fits: True\n")


def test_the_fake_runtime_block_rehearses_every_cell_as_expected(fresh_clone, capsys):
    code, namespace = run_block(block(BLOCKS["fake runtime"]), ["rehearse.py"])
    assert code is None
    run_dir = namespace["session"].run_dir
    run = harness.load_run(run_dir)[0]
    assert run.summary["cells"] == 6 and run.summary["matched"] == 6 and run.runtime == "fake"
    printed = capsys.readouterr().out.splitlines()
    comment = [ln.removeprefix("# ") for ln in block(BLOCKS["fake runtime"]).splitlines() if ln.startswith("# 6 of")]
    assert printed == comment == ["6 of 6 cells as expected: <ExitCode.OK: 0>"], "it prints what its comment says"
    assert not [p for p in run_dir.rglob("*") if p.is_dir() and not any(p.iterdir())], "nothing empty is left"
    assert sorted(p.name for p in run_dir.iterdir()) == ["cells", "logs", "results.json"]


def test_the_nightly_block_in_a_fresh_clone_refuses_as_run_does_in_one_line(fresh_clone):
    with pytest.raises(harness.ConfigError) as err:
        run_block(block(BLOCKS["nightly"]), ["nightly.py"])
    assert len(str(err.value).splitlines()) == 1
    assert "VLLM_CPU_VENV, TINY_MODELS are not set" in str(err.value)
    assert "set them up with: . \"$(bash scripts/setup-cpu-example.sh | tail -1)\"" in str(err.value)
    assert not (fresh_clone / "results").exists()


def test_the_prediction_block_needs_no_setup_either(fresh_clone, capsys):
    assert run_block(block(BLOCKS["predict"]), ["predict.py"])[0] is None
    assert capsys.readouterr().out.endswith(" tokens, fits: True\n")
