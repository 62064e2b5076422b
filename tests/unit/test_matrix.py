"""How a matrix file becomes cells, written as examples (see docs/matrix.md for the reference).

Every test writes a small matrix, loads it the way `boot-harness validate` and `run` do (`load_matrix` then
`LoadedMatrix.cells`), and shows what comes out: cell ids, argv, env, expectations, selections, or the one-line error.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from harness.cli import main
from harness.errors import ConfigError, UsageError
from harness.matrix.cells import Cell, Expectation, select_cells
from harness.matrix.expand_env import expand_string
from harness.matrix.load import load_matrix

# The seed's shape: max_model_len {131072, 262144} x mtp {off, mtp4} x floor {none, env, bytes}.
SEED = """\
name: seed
model: /models/tiny
args: [--gpu-memory-utilization, 0.9]
env: {VLLM_LOGGING_LEVEL: INFO}
axes:
  max_model_len:
    flag: --max-model-len
    values: [131072, 262144]
  mtp:
    off:
    mtp4:
      args: [--speculative-config, '{"method": "mtp", "num_speculative_tokens": 4}']
  floor:
    none:
    env:
      env: {VLLM_KV_FLOOR_BYTES: "8589934592"}
    bytes:
      args: [--kv-cache-memory-bytes, "8589934592"]
"""


@pytest.fixture
def write(tmp_path: Path):
    """write(text) -> path of a matrix file holding `text` (dedented)."""

    def _write(text: str, name: str = "matrix.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return _write


@pytest.fixture
def cells_of(write):
    """cells_of(text, environ=None) -> the cells of that matrix, exactly as `run` would expand them."""

    def _cells(text: str, environ: dict[str, str] | None = None) -> list[Cell]:
        path = write(text)
        loaded = load_matrix(path, environ={} if environ is None else environ)
        return list(loaded.cells)

    return _cells


@pytest.fixture
def error_of(write):
    """error_of(text, environ=None) -> the ConfigError that loading the matrix raises."""

    def _error(text: str, environ: dict[str, str] | None = None) -> ConfigError:
        path = write(text)
        with pytest.raises(ConfigError) as info:
            load_matrix(path, environ={} if environ is None else environ)
        return info.value

    return _error


def ids(cells: list[Cell]) -> list[str]:
    return [c.id for c in cells]


def by_id(cells: list[Cell]) -> dict[str, Cell]:
    return {c.id: c for c in cells}


# ---------------------------------------------------------------------------------------------------------- flag axes


def test_a_flag_axis_passes_flag_and_value_for_each_value(cells_of):
    cells = cells_of("""
        name: t
        axes:
          max_model_len:
            flag: --max-model-len
            values: [131072, 262144]
    """)
    assert ids(cells) == ["mml131072", "mml262144"]
    assert [c.args for c in cells] == [["--max-model-len", "131072"], ["--max-model-len", "262144"]]
    # YAML numbers become the text the server gets; the axis value is that text too.
    assert cells[0].axes == {"max_model_len": "131072"}


def test_flag_axis_values_keep_their_yaml_text_for_floats_and_strings(cells_of):
    cells = cells_of("""
        name: t
        axes:
          gpu_memory_utilization:
            flag: --gpu-memory-utilization
            values: [0.85, "0.95"]
    """)
    assert [c.args[1] for c in cells] == ["0.85", "0.95"]
    assert ids(cells) == ["gmu0.85", "gmu0.95"]


# --------------------------------------------------------------------------------------------------------- named axes


def test_a_named_axis_maps_value_names_to_fragments_and_off_needs_no_body(cells_of):
    cells = cells_of("""
        name: t
        axes:
          mtp:
            off:
            mtp4:
              args: [--speculative-config, '{"method": "mtp", "num_speculative_tokens": 4}']
    """)
    assert ids(cells) == ["mtp_off", "mtp4"]
    off, mtp4 = cells
    assert off.args == [] and off.env == {}
    assert mtp4.args == ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}']


def test_yaml_1_2_booleans_on_off_yes_no_stay_value_names(cells_of):
    cells = cells_of("""
        name: t
        axes:
          eager:
            on: {args: [--enforce-eager]}
            off:
          prefix:
            yes: {args: [--enable-prefix-caching]}
            no: {args: [--no-enable-prefix-caching]}
    """)
    assert {c.axes["eager"] for c in cells} == {"on", "off"}
    assert {c.axes["prefix"] for c in cells} == {"yes", "no"}
    assert "eager_on-prefix_yes" in ids(cells)


def test_a_named_value_can_set_env_image_mounts_and_patches(write, tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "floor.diff").write_text("--- a/x\n+++ b/x\n")
    path = write(f"""
        name: t
        runtime: docker
        image: vllm/vllm-openai:v0.11.0
        mounts: [{{source: models, target: /models}}]
        axes:
          build:
            release:
            patched:
              image: vllm/vllm-openai:v0.11.0-debug
              env: {{VLLM_KV_FLOOR: "1"}}
              mounts: [{{source: extra, target: /extra, read_only: false}}]
              patches:
                - target: /usr/lib/python3/dist-packages/vllm/x.py
                  patch: patches/floor.diff
                  base_sha256: {"a" * 64}
                  patched_sha256: {"b" * 64}
    """)
    release, patched = list(load_matrix(path, environ={}).cells)
    assert release.image == "vllm/vllm-openai:v0.11.0" and release.patches == ()
    assert patched.image == "vllm/vllm-openai:v0.11.0-debug"
    assert patched.env == {"VLLM_KV_FLOOR": "1"}
    assert [m.target for m in patched.mounts] == ["/models", "/extra"]  # matrix mounts first, then the fragment's
    assert patched.mounts[0].read_only is True and patched.mounts[1].read_only is False
    assert [p.patch for p in patched.patches] == ["patches/floor.diff"]


def test_the_explicit_named_form_with_values_and_label(cells_of):
    cells = cells_of("""
        name: t
        axes:
          speculative:
            label: spec
            values:
              none: {}
              ngram: {args: [--speculative-config, '{"method": "ngram"}']}
    """)
    assert ids(cells) == ["spec_none", "spec_ngram"]


# ------------------------------------------------------------------------------------------------------------- ids


def test_ids_join_one_token_per_axis_in_axis_order(cells_of):
    cells = cells_of(SEED)
    assert len(cells) == 2 * 2 * 3
    assert ids(cells)[:3] == [
        "mml131072-mtp_off-floor_none", "mml131072-mtp_off-floor_env", "mml131072-mtp_off-floor_bytes"]
    assert "mml131072-mtp4-floor_none" in ids(cells)
    assert [c.index for c in cells] == list(range(12))


def test_ids_are_safe_for_pytest_k_and_select(cells_of):
    cells = cells_of("""
        name: t
        axes:
          tensor_parallel_size: {flag: --tensor-parallel-size, values: [1, 2]}
          kv_cache_dtype: {flag: --kv-cache-dtype, values: [auto, fp8_e4m3, "weird value=1,2"]}
    """)
    for cid in ids(cells):
        assert re.fullmatch(r"[A-Za-z0-9_.+-]+", cid), cid
        assert not set(cid) & {"=", ",", " "}
    assert "tps1-kcd_weird_value_1_2" in ids(cells)


def test_a_token_is_label_plus_value_unless_the_value_already_starts_with_the_label(cells_of):
    # Label: `label:` if given, else the initials of a multi-word axis name, else the whole name.
    # Digits are glued on (mml131072), words get an underscore (floor_none), mtp4 already starts with mtp.
    cells = cells_of(SEED)
    assert "mml262144-mtp4-floor_bytes" in ids(cells)


def test_label_overrides_the_id_prefix(cells_of):
    cells = cells_of("""
        name: t
        axes:
          max_model_len: {flag: --max-model-len, values: [4096], label: len}
    """)
    assert ids(cells) == ["len4096"]


def test_ids_do_not_move_when_another_axis_grows(cells_of):
    before = set(ids(cells_of(SEED)))
    after = set(ids(cells_of(SEED.replace("values: [131072, 262144]", "values: [131072, 262144, 524288]"))))
    assert before < after
    assert after - before == {i for i in after if i.startswith("mml524288-")}


def test_two_values_that_make_the_same_id_are_an_error(error_of):
    err = error_of("""
        name: t
        axes:
          kv_cache_dtype: {flag: --kv-cache-dtype, values: [fp8_e4m3, "fp8 e4m3"]}
    """)
    assert err.key == "axes"
    assert "two cells get the id 'kcd_fp8_e4m3'" in err.message


def test_two_axes_with_the_same_id_label_are_an_error_until_one_sets_label(error_of, cells_of):
    text = """
        name: t
        axes:
          max_model_len: {flag: --max-model-len, values: [4096]}
          max_mem_level: {flag: --max-mem-level, values: [1]}
    """
    err = error_of(text)
    assert err.key == "axes.max_mem_level"
    assert err.message == "id label 'mml' is also 'max_model_len''s; set `label:` on one"
    fixed = text.replace("values: [1]}", "values: [1], label: mem}")
    assert ids(cells_of(fixed)) == ["mml4096-mem1"]


# --------------------------------------------------------------------------------------------- argv and env composition


def test_argv_is_model_then_base_args_then_fragments_in_axis_order(cells_of):
    cell = by_id(cells_of(SEED))["mml262144-mtp4-floor_bytes"]
    assert cell.args == [
        "--gpu-memory-utilization", "0.9",                       # matrix `args`
        "--max-model-len", "262144",                             # axis 1
        "--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}',  # axis 2
        "--kv-cache-memory-bytes", "8589934592",                 # axis 3
    ]
    assert cell.server_args == ["--model", "/models/tiny", *cell.args]


def test_axis_order_is_the_order_written_not_alphabetical(cells_of):
    cells = cells_of("""
        name: t
        axes:
          zeta: {flag: --z, values: [1]}
          alpha: {flag: --a, values: [2]}
    """)
    assert cells[0].id == "zeta1-alpha2"
    assert cells[0].args == ["--z", "1", "--a", "2"]


def test_without_model_no_model_flag_is_added(cells_of):
    (cell,) = cells_of("name: t\naxes: {x: {flag: --x, values: [1]}}\n")
    assert cell.server_args == ["--x", "1"]


def test_env_is_base_env_updated_by_fragments_later_axes_win(cells_of):
    cells = cells_of("""
        name: t
        env: {VLLM_LOGGING_LEVEL: INFO, SHARED: base}
        axes:
          first:
            a: {env: {SHARED: first, ONLY_FIRST: "1"}}
          second:
            b: {env: {SHARED: second}}
    """)
    assert cells[0].env == {"VLLM_LOGGING_LEVEL": "INFO", "SHARED": "second", "ONLY_FIRST": "1"}


def test_env_values_from_yaml_numbers_are_text(cells_of):
    (cell,) = cells_of("name: t\nenv: {OMP_NUM_THREADS: 4, RATIO: 0.5}\naxes: {x: {flag: --x, values: [1]}}\n")
    assert cell.env == {"OMP_NUM_THREADS": "4", "RATIO": "0.5"}


# ------------------------------------------------------------------------------------------------------------ exclude


def test_exclude_drops_every_cell_matching_all_its_axes_and_lists_mean_any_of(cells_of):
    text = SEED + "exclude:\n  - {mtp: mtp4, floor: [env, bytes]}\n"
    cells = cells_of(text)
    assert len(cells) == 12 - 2 * 2
    assert not [c for c in cells if c.axes["mtp"] == "mtp4" and c.axes["floor"] != "none"]
    assert "mml131072-mtp4-floor_none" in ids(cells)
    assert [c.index for c in cells] == list(range(8))  # indexes count the cells that remain


def test_several_excludes_add_up(cells_of):
    text = SEED + "exclude:\n  - {max_model_len: 262144, mtp: mtp4}\n  - {floor: env}\n"
    cells = cells_of(text)
    assert len(cells) == 12 - 3 - 4 + 1  # the one cell both would drop is dropped once


def test_exclude_values_may_be_written_as_yaml_numbers(cells_of):
    cells = cells_of(SEED + "exclude:\n  - {max_model_len: 262144}\n")
    assert {c.axes["max_model_len"] for c in cells} == {"131072"}


def test_exclude_naming_an_unknown_axis_or_value_is_an_error(error_of):
    err = error_of(SEED + "exclude:\n  - {mtp: [mtp4, mtp8]}\n")
    assert (err.key, err.message) == ("exclude[0].mtp", "unknown value 'mtp8' (values are: off, mtp4)")
    err = error_of(SEED + "exclude:\n  - {speculative: mtp4}\n")
    assert err.key == "exclude[0].speculative" and err.message.startswith("unknown axis")


def test_an_exclude_that_removes_every_cell_is_an_error(error_of):
    err = error_of(SEED + "exclude:\n  - {mtp: off}\n  - {mtp: mtp4}\n")
    assert (err.key, err.message) == ("exclude", "excludes every cell: the matrix would be empty")


def test_an_empty_exclude_entry_is_an_error_not_a_wildcard(error_of):
    err = error_of(SEED + "exclude:\n  - {}\n")
    assert err.key == "exclude[0]"


# ------------------------------------------------------------------------------------------------------------- expect


EXPECT = SEED + """\
expect:
  - where: {max_model_len: 262144, floor: none}
    outcome: refused
    reason: kv_cache_too_small
  - where: {mtp: mtp4}
    outcome: refused
  - outcome: booted
"""


def test_expect_rules_are_tried_in_order_and_the_first_match_wins(cells_of):
    cells = by_id(cells_of(EXPECT))
    assert cells["mml262144-mtp4-floor_none"].expected == Expectation("refused", "kv_cache_too_small", rule=0)
    assert cells["mml262144-mtp4-floor_env"].expected == Expectation("refused", None, rule=1)
    assert cells["mml131072-mtp_off-floor_env"].expected == Expectation("booted", None, rule=2)


def test_a_rule_without_reason_accepts_any_reason_a_rule_with_one_demands_it(cells_of):
    cells = by_id(cells_of(EXPECT))
    with_reason = cells["mml262144-mtp_off-floor_none"].expected
    assert with_reason.matches("refused", "kv_cache_too_small")
    assert not with_reason.matches("refused", "cuda_oom_unknown")
    assert not with_reason.matches("booted", None)
    any_reason = cells["mml131072-mtp4-floor_env"].expected
    assert any_reason.matches("refused", "cuda_oom_unknown") and any_reason.matches("refused", None)


def test_a_cell_no_rule_matches_has_no_expectation(cells_of):
    cells = cells_of(SEED + "expect:\n  - where: {floor: bytes}\n    outcome: booted\n")
    assert sum(1 for c in cells if c.expected) == 4
    assert by_id(cells)["mml131072-mtp_off-floor_none"].expected is None


def test_where_values_may_be_lists(cells_of):
    cells = cells_of(SEED + "expect:\n  - where: {floor: [env, bytes]}\n    outcome: booted\n")
    assert {c.axes["floor"] for c in cells if c.expected} == {"env", "bytes"}


def test_a_rule_that_can_never_match_is_an_error_and_says_why(error_of):
    shadowed = error_of(SEED + "expect:\n  - outcome: booted\n  - where: {mtp: mtp4}\n    outcome: refused\n")
    assert (shadowed.key, shadowed.message) == (
        "expect[1]", "rule can never match: every cell it names is taken by an earlier rule")
    excluded = error_of(SEED + "exclude:\n  - {mtp: mtp4}\nexpect:\n  - where: {mtp: mtp4}\n    outcome: refused\n")
    assert (excluded.key, excluded.message) == ("expect[0]", "rule can never match: every cell it names is excluded")


def test_expect_naming_an_unknown_value_is_an_error(error_of):
    err = error_of(SEED + "expect:\n  - where: {max_model_len: 1048576}\n    outcome: refused\n")
    assert err.key == "expect[0].where.max_model_len"


# ---------------------------------------------------------------------------------------------- environment expansion


ENV_MATRIX = """
    name: t
    runtime: docker
    model: ${MODEL_DIR}/tiny
    image: ${IMAGE:-vllm/vllm-openai:v0.11.0}
    env: {TEMPLATE: "$${NOT_EXPANDED}"}
    axes:
      x: {flag: --x, values: ["${X_VALUE:-1}"]}
"""


def test_env_expansion_uses_the_environment(write):
    m = load_matrix(write(ENV_MATRIX), environ={"MODEL_DIR": "/srv/models", "IMAGE": "img:1", "X_VALUE": "7"}).matrix
    assert (m.model, m.image, m.axes["x"].values) == ("/srv/models/tiny", "img:1", ["7"])


def test_a_default_applies_when_the_variable_is_unset_or_empty(write):
    m = load_matrix(write(ENV_MATRIX), environ={"MODEL_DIR": "/m", "IMAGE": ""}).matrix
    assert (m.image, m.axes["x"].values) == ("vllm/vllm-openai:v0.11.0", ["1"])


def test_double_dollar_writes_a_literal_dollar_brace(write):
    m = load_matrix(write(ENV_MATRIX), environ={"MODEL_DIR": "/m"}).matrix
    assert m.env == {"TEMPLATE": "${NOT_EXPANDED}"}


def test_an_unset_variable_without_default_is_an_error_at_its_key(error_of):
    err = error_of(ENV_MATRIX, environ={})
    assert err.key == "model"
    assert err.message == "environment variable MODEL_DIR is not set and has no default (write ${MODEL_DIR:-default})"


def test_the_error_key_of_an_unset_variable_is_its_full_path(error_of):
    err = error_of("""
        name: t
        axes:
          floor:
            env:
              env: {VLLM_KV_FLOOR: "${FLOOR}"}
    """)
    assert err.key == "axes.floor.env.env.VLLM_KV_FLOOR"


def test_a_set_but_empty_variable_without_default_expands_to_empty():
    assert expand_string("a${EMPTY}b", {"EMPTY": ""}, "k") == "ab"


def test_malformed_references_are_errors_not_text(error_of):
    for bad in ("${MODEL_DIR", "${1X}", "${X-default}", "${}"):
        err = error_of(f"name: t\nmodel: '{bad}'\naxes: {{x: {{flag: --x, values: [1]}}}}\n", environ={"X": "1"})
        assert err.key == "model" and err.message.startswith("malformed variable reference"), bad


def test_keys_are_not_expanded_only_values(cells_of):
    (cell,) = cells_of("name: t\nenv: {PLAIN: '$HOME stays'}\naxes: {x: {flag: --x, values: [1]}}\n")
    assert cell.env == {"PLAIN": "$HOME stays"}  # only ${...} is a reference


# ------------------------------------------------------------------------------------------------------ select_cells


@pytest.fixture
def seed(write):
    loaded = load_matrix(write(SEED), environ={})
    return loaded.matrix, list(loaded.cells)


def test_no_select_takes_every_cell(seed):
    matrix, cells = seed
    assert select_cells(cells, None, matrix) == cells
    assert select_cells(cells, [], matrix) == cells


def test_select_axis_equals_value_or_value(seed):
    matrix, cells = seed
    chosen = select_cells(cells, ["floor=env|bytes"], matrix)
    assert len(chosen) == 8 and {c.axes["floor"] for c in chosen} == {"env", "bytes"}


def test_select_terms_joined_by_commas_must_all_hold(seed):
    matrix, cells = seed
    chosen = select_cells(cells, ["mtp=off,floor=none"], matrix)
    assert ids(chosen) == ["mml131072-mtp_off-floor_none", "mml262144-mtp_off-floor_none"]


def test_select_globs_match_cell_ids(seed):
    matrix, cells = seed
    assert ids(select_cells(cells, ["mml262144-*-floor_bytes"], matrix)) == [
        "mml262144-mtp_off-floor_bytes", "mml262144-mtp4-floor_bytes"]
    assert ids(select_cells(cells, ["mml131072-mtp4-floor_none"], matrix)) == ["mml131072-mtp4-floor_none"]


def test_select_globs_and_axis_terms_combine(seed):
    matrix, cells = seed
    assert ids(select_cells(cells, ["mml262144-*,mtp=mtp4,floor=none"], matrix)) == ["mml262144-mtp4-floor_none"]


def test_repeated_select_options_add_up_in_matrix_order(seed):
    matrix, cells = seed
    chosen = select_cells(cells, ["*-floor_bytes", "mml131072-mtp_off-floor_none", "floor=bytes"], matrix)
    assert ids(chosen) == [
        "mml131072-mtp_off-floor_none", "mml131072-mtp_off-floor_bytes",
        "mml131072-mtp4-floor_bytes", "mml262144-mtp_off-floor_bytes", "mml262144-mtp4-floor_bytes",
    ]


def test_select_unknown_axis_or_value_is_an_error(seed):
    matrix, cells = seed
    with pytest.raises(UsageError, match=r"^--select:speculative: unknown axis"):
        select_cells(cells, ["speculative=mtp4"], matrix)
    with pytest.raises(UsageError, match=r"^--select:mtp: unknown value 'mtp8'"):
        select_cells(cells, ["mtp=off|mtp8"], matrix)


def test_selecting_nothing_is_an_error_not_an_empty_run(seed):
    matrix, cells = seed
    with pytest.raises(UsageError, match="selects no cell"):
        select_cells(cells, ["mml999*"], matrix)
    with pytest.raises(UsageError, match="selects no cell"):
        select_cells(cells, ["mtp=mtp4,mml131072-mtp_off-*"], matrix)


# -------------------------------------------------------------------------------------------------- through the CLI


def test_cli_validate_and_cells_select(write, capsys):
    path = write(SEED)
    assert main(["validate", "--matrix", str(path)]) == 0
    assert "12 cells on 3 axes" in capsys.readouterr().out
    assert main(["cells", "-m", str(path), "-s", "mtp=mtp4,floor=none"]) == 0
    assert capsys.readouterr().out.split() == ["mml131072-mtp4-floor_none", "mml262144-mtp4-floor_none"]


def test_cli_select_error_is_one_line_and_exit_2(write, capsys):
    assert main(["cells", "-m", str(write(SEED)), "-s", "mtp=mtp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("--select:mtp: unknown value 'mtp8'")


def test_the_matrix_sha256_is_of_the_file_bytes(write):
    path = write(SEED)
    assert load_matrix(path, environ={}).sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_full_example_in_docs_matrix_md_is_what_it_says(tmp_path):
    doc = (Path(__file__).resolve().parents[2] / "docs" / "matrix.md").read_text(encoding="utf-8")
    example = doc.split("```yaml\n", 1)[1].split("```", 1)[0]
    listed = doc.split("$ boot-harness cells -m seed.yaml\n", 1)[1].split("```", 1)[0].split()
    path = tmp_path / "seed.yaml"
    path.write_text(example, encoding="utf-8")
    cells = by_id(list(load_matrix(path, environ={}).cells))
    assert list(cells) == listed
    cell = cells["mml262144-mtp4-floor_none"]
    assert (cell.expected.outcome, cell.expected.reason) == ("refused", "kv_cache_too_small")
    shown = doc.split("Cell `mml262144-mtp4-floor_none` runs:\n\n```text\n", 1)[1].split("```", 1)[0]
    argv = shlex.split(shown.replace("\\\n", " "))
    assert argv == ["vllm", "serve", *cell.server_args, "--host", "127.0.0.1", "--port", "PORT"]


# ---------------------------------------------------------------------------------- known bugs (see the fix notes)


def test_yaml_1_2_integers_octal_and_sexagesimal_are_not_reinterpreted(cells_of):
    cells = cells_of("name: t\naxes:\n  x: {flag: --x, values: [010, 1:30]}\n")
    assert [c.axes["x"] for c in cells] == ["10", "1:30"]


def test_a_named_value_called_label_is_never_silently_dropped(write):
    path = write("name: t\naxes:\n  m:\n    label:\n      args: [--x]\n    y:\n")
    try:
        cells = list(load_matrix(path, environ={}).cells)
    except ConfigError:
        return  # an error is fine; a smaller matrix is not
    assert len(cells) == 2


def test_a_bare_value_in_the_explicit_values_form_is_an_empty_fragment(cells_of):
    cells = cells_of("name: t\naxes:\n  spec:\n    values:\n      none:\n      ngram: {args: [--x]}\n")
    assert ids(cells) == ["spec_none", "spec_ngram"]


def test_an_error_inside_a_value_called_named_keeps_its_path(error_of):
    err = error_of("name: t\naxes:\n  m:\n    named: {args: [--x, true]}\n    other:\n")
    assert err.key == "axes.m.named.args"
