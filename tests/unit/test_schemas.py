"""The committed JSON Schemas (harness/schemas/*.json) are what the models export now, and they describe real files.

If `test_committed_schemas_match_the_models` fails, a model changed: run `python scripts/export-schemas.py` and commit
the result.
"""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
import yaml

from harness.logfacts import KvFacts, Refusal
from harness.matrix.load import _UniqueKeyLoader, load_matrix
from harness.results.model import (
    AppliedPatch,
    CellResult,
    ContainerInfo,
    Expected,
    GpuInfo,
    HostInfo,
    MatrixRef,
    RunResult,
    Timings,
)

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMAS = ROOT / "harness" / "schemas"
GOOD = ROOT / "tests" / "data" / "good_matrices"
BAD = ROOT / "tests" / "data" / "bad_matrices"

#: Bad matrices whose mistake only `boot-harness validate` can see (cross-checks between keys, ${VAR} expansion,
#: files on disk, cell ids); every other bad matrix that is valid YAML must be rejected by the schema alone.
NEEDS_VALIDATE = {
    "axis_name_with_equals.yaml", "duplicate_cell_ids.yaml", "duplicate_flag_value.yaml", "label_collision.yaml",
    "label_with_space.yaml", "patch_file_missing.yaml", "exclude_empty_value_list.yaml",
    "exclude_removes_every_cell.yaml", "exclude_unknown_axis.yaml", "exclude_unknown_value.yaml",
    "exclude_unknown_value_in_list.yaml", "expect_rule_all_excluded.yaml", "expect_rule_shadowed.yaml",
    "expect_unknown_axis.yaml", "expect_unknown_value.yaml", "env_var_bash_default.yaml", "env_var_malformed.yaml",
    "env_var_malformed_name.yaml", "env_var_nested_default.yaml", "env_var_unset.yaml", "env_var_unset_in_axis.yaml",
    "memory_on_process.yaml",  # a rule between two keys (memory: only with a container runtime)
}


def _export_module():
    spec = importlib.util.spec_from_file_location("export_schemas", ROOT / "scripts" / "export-schemas.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


export = _export_module()


def schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(name))


def errors(name: str, instance: object) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator(name).iter_errors(instance)]


def read_yaml(path: Path) -> object:
    """A matrix file as parsed YAML, with the harness's own loader (YAML 1.2 booleans, duplicate keys refused)."""
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader)  # a SafeLoader subclass: safe


# -------------------------------------------------------------------------------------------------------- no drift


BUILT = export.build()


@pytest.mark.parametrize("name", sorted(BUILT))
def test_committed_schemas_match_the_models(name: str):
    committed = (SCHEMAS / name).read_text(encoding="utf-8")
    assert committed == export.render(BUILT[name]), f"{name} is stale: run `python scripts/export-schemas.py`"


def test_every_committed_schema_is_exported_and_every_json_command_has_one():
    from harness.cli.outputs import OUTPUTS

    assert {p.name for p in SCHEMAS.glob("*.json")} == set(BUILT), "a schema no model exports, or one not committed"
    assert {"matrix.schema.json", "results.schema.json", "cell.schema.json"} <= set(BUILT)
    assert {f"{c}.output.schema.json" for c in OUTPUTS} <= set(BUILT)


def test_export_check_mode_reports_drift(tmp_path, capsys):
    assert export.main(["--check"]) == 0
    (tmp_path / "matrix.schema.json").write_text("{}\n")
    assert export.main(["--check", "--out", str(tmp_path)]) == 1
    assert "out of date: matrix.schema.json, results.schema.json, cell.schema.json" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["matrix.schema.json", "results.schema.json", "cell.schema.json"])
def test_schemas_are_valid_draft_2020_12(name: str):
    s = schema(name)
    jsonschema.Draft202012Validator.check_schema(s)
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_the_results_schemas_are_the_models_verbatim():
    # Only the matrix schema is adjusted (for the file as written); records are exactly what the models dump.
    for name, model in (("results.schema.json", RunResult), ("cell.schema.json", CellResult)):
        s = schema(name)
        assert {k: v for k, v in s.items() if k not in ("$schema", "$comment")} == model.model_json_schema()


# ---------------------------------------------------------------------------------------------------- matrix files


@pytest.mark.parametrize("path", sorted(GOOD.glob("*.yaml")), ids=lambda p: p.name)
def test_good_matrices_as_written_match_the_schema(path: Path):
    assert errors("matrix.schema.json", read_yaml(path)) == []


def test_the_schema_rejects_what_the_model_rejects_field_by_field():
    checked = 0
    for path in sorted(BAD.glob("*.yaml")):
        if path.name in NEEDS_VALIDATE:
            continue
        try:
            data = read_yaml(path)
        except (yaml.YAMLError, UnicodeDecodeError, TypeError, ValueError):
            continue  # not YAML (or not UTF-8): nothing for a schema to look at
        if data is None:
            continue
        assert errors("matrix.schema.json", data), f"{path.name}: the schema accepts it"
        checked += 1
    assert checked >= 40


def test_a_misspelt_key_names_its_place():
    data = read_yaml(GOOD / "seed.yaml")
    data["expect"][0]["reasons"] = data["expect"][0].pop("reason")
    (msg,) = errors("matrix.schema.json", data)
    assert msg.startswith("$.expect[0]: Additional properties are not allowed ('reasons'")


# ---------------------------------------------------------------------------------------------------------- records


def sample_cells() -> list[CellResult]:
    t0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    booted = CellResult(
        cell_id="mml131072-mtp_off-floor_none", axes={"max_model_len": "131072", "mtp": "off", "floor": "none"},
        runtime="docker", argv=["vllm", "serve", "--model", "/models/tiny", "--api-key", "***"],
        env={"HF_TOKEN": "***", "VLLM_LOGGING_LEVEL": "INFO"}, outcome="booted", reason="ready",
        expected=Expected(outcome="booted"), matched=True, exit_code=None,
        timings=Timings(ready_s=41.2, event_s=41.2, verdict_s=41.9, total_s=47.0),
        kv=KvFacts(model_load_gib=7.5, available_gib=52.3, kv_tokens=856_912, max_concurrency=6.54,
                   concurrency_tokens=131_072, cuda_graph_gib=0.6, engine_init_s=38.1),
        vllm_version="0.11.0", log_path="logs/mml131072-mtp_off-floor_none.log",
        log_tail=["INFO ... Application startup complete."],
        started_at=t0, finished_at=t0, port=8000,
        container=ContainerInfo(engine="docker", engine_version="27.3.1", image="vllm/vllm-openai:v0.11.0",
                                image_digest="sha256:" + "ab" * 32, container_id="3f2a", container_name="bh-x",
                                oom_killed=False),
        patches=[AppliedPatch(target="/usr/lib/x.py", patch="patches/kvfloor.diff", base_sha256="a" * 64,
                              patched_sha256="b" * 64, patched_file="patched/x.py")],
        gpus=[GpuInfo(index=0, name="NVIDIA H200", driver="560.35", total_gib=139.8, free_gib=139.1)],
    )
    refused = CellResult(
        cell_id="mml262144-mtp_off-floor_none", axes={"max_model_len": "262144", "mtp": "off", "floor": "none"},
        runtime="process", argv=["vllm", "serve", "--max-model-len", "262144"], env={}, outcome="refused",
        reason="kv_cache_too_small", detail="needs 24.0 GiB of KV cache, 12.5 GiB available",
        expected=Expected(outcome="refused", reason="kv_cache_too_small"), matched=True, exit_code=1,
        kv=KvFacts(available_gib=12.5),
        refusal=Refusal(kind="kv_cache_too_small", message="To serve at least one request with the models's max seq "
                        "len (262144), (24.0 GiB KV cache is needed, which is larger than the available KV cache "
                        "memory (12.5 GiB).", max_seq_len=262144, needed_gib=24.0, available_gib=12.5,
                        estimated_max_model_len=136_000),
    )
    unexpected = CellResult(cell_id="mml262144-mtp4-floor_none", axes={"max_model_len": "262144", "mtp": "mtp4",
                            "floor": "none"}, runtime="process", argv=["vllm"], env={}, outcome="timeout",
                            attempts=2)
    return [booted, refused, unexpected]


def test_sample_cell_records_match_the_cell_schema():
    for cell in sample_cells():
        assert errors("cell.schema.json", cell.model_dump(mode="json")) == []


def test_a_run_directory_written_by_the_store_matches_the_schemas(tmp_path):
    """Through the real writer: RESULTS_DIR/<run_id>/results.json and cells/<cell_id>.json."""
    from harness.results.store import RunStore

    loaded = load_matrix(GOOD / "seed.yaml", environ={})
    store = RunStore.create(tmp_path, loaded, "process", [], selection=["mtp=off"], run_id="20250102-030405-seed-beef")
    for cell in sample_cells():
        store.record(cell)
    store.finish("complete")
    run_dir = tmp_path / "20250102-030405-seed-beef"
    run = json.loads((run_dir / "results.json").read_text())
    assert errors("results.schema.json", run) == []
    assert run["summary"]["cells"] == 3 and run["status"] == "complete"
    for f in sorted((run_dir / "cells").glob("*.json")):
        assert errors("cell.schema.json", json.loads(f.read_text())) == [], f.name
    assert len(list((run_dir / "cells").glob("*.json"))) == 3


def test_a_minimal_run_record_matches_and_strays_do_not():
    run = RunResult(run_id="r", matrix=MatrixRef(path="/m.yaml", sha256="c" * 64, name="seed"), runtime="process",
                    started_at=datetime(2025, 1, 1, tzinfo=UTC),
                    host=HostInfo(hostname="h", platform="Linux", python="3.12.3"), harness_version="0.1.0")
    data = run.model_dump(mode="json")
    assert errors("results.schema.json", data) == []
    assert errors("results.schema.json", {**data, "schema_version": 2})
    assert errors("results.schema.json", {**data, "status": "done"})
    cell = sample_cells()[1].model_dump(mode="json")
    assert errors("cell.schema.json", {**cell, "outcome": "passed"})
    assert errors("cell.schema.json", {**cell, "kv": {**cell["kv"], "available_GiB": 1.0}})
    assert errors("cell.schema.json", {**cell, "refusal": {**cell["refusal"], "kind": "out_of_luck"}})
