#!/usr/bin/env python3
"""Write the JSON Schemas of the matrix file, the results records and every command's `--json` into harness/schemas/.

    python scripts/export-schemas.py           # (re)write the files
    python scripts/export-schemas.py --check   # exit 1 if a committed file differs from what the models export

The models are the source of truth; these files are derived from them for editors (yaml-language-server, VS Code)
and for other tools that read results. tests/unit/test_schemas.py fails when they drift, so run this after changing
harness/matrix/model.py, harness/results/model.py or harness/logfacts/model.py.

harness/schemas/matrix.schema.json   ← harness.matrix.model.Matrix, adjusted to accept the file *as written*
harness/schemas/results.schema.json  ← harness.results.model.RunResult (results.json)
harness/schemas/cell.schema.json     ← harness.results.model.CellResult (cells/<cell_id>.json)
harness/schemas/<command>.output.schema.json ← harness.cli.outputs.OUTPUTS[command]: what `boot-harness COMMAND
                                       --json` prints (facts, kv, plan, cells, analyze, compare, history, check, report,
                                       frontier, bisect), exported as pydantic serializes it (every key always
                                       printed)

Why the matrix schema is adjusted: pydantic describes what `Matrix` holds after its "before" validators ran, and
those validators accept more than they produce. A file says `values: [131072]` and `args: [--x, 0.9]` (YAML numbers;
the model turns them into text), writes a named axis bare (`mtp: {off:, mtp4: {...}}`; the model rewrites it to
`{values: {...}}`), and lists GPU ids as numbers. Without the adjustments the schema would reject the documented
examples. Each adjustment replaces one node at a named place and fails loudly if that place is gone, so a model change
shows up here instead of as a silently wrong schema. The checks the model's validators make on single fields (env
names, sha256 digests, absolute targets, dashed flags) are added as patterns; the cross-checks (unknown axis in
`exclude`, duplicate ids, rules that never match, `${VAR}` expansion, patch files on disk) are for
`boot-harness validate` only.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "harness" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

#: What an argv item, an env value or a selector value may be in the file: text or a number, never a boolean.
ARGV_ITEM = {"type": ["string", "number"]}

NAMED_AXIS_SHORTHAND = {
    "title": "NamedAxisShorthand",
    "description": (
        "A named axis written bare: each key is a value name and its fragment (or nothing, for an empty fragment); "
        "`label:` sets the id prefix. Same as `{values: {...}, label: ...}`."
    ),
    "type": "object",
    "properties": {"label": {"type": "string"}},
    "additionalProperties": {"anyOf": [{"$ref": "#/$defs/Fragment"}, {"type": "null"}]},
    "not": {"anyOf": [{"required": ["flag"]}, {"required": ["values"]}]},
    "minProperties": 1,
}


def _node(schema: dict[str, Any], path: tuple[Any, ...]) -> Any:
    node: Any = schema
    for step in path:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            raise SystemExit(f"export-schemas: the model's schema has no {'/'.join(map(str, path))}; "
                             "update the adjustments in scripts/export-schemas.py") from None
    return node


def _replace(schema: dict[str, Any], path: tuple[Any, ...], new: Any) -> None:
    parent = _node(schema, path[:-1])
    _node(schema, path)  # must exist
    parent[path[-1]] = copy.deepcopy(new)


def _selector(schema: dict[str, Any], path: tuple[Any, ...]) -> None:
    """A selector maps axis names to a value name or a list of them; YAML may write either as numbers."""
    _replace(schema, (*path, "additionalProperties"), {"anyOf": [ARGV_ITEM, {"type": "array", "items": ARGV_ITEM}]})


def matrix_schema() -> dict[str, Any]:
    from harness.matrix.model import _ENV_NAME, _SHA256, Matrix

    s = Matrix.model_json_schema()
    # What the model's field validators check, said in the schema too (from the model's own patterns), so an editor
    # flags it while typing.
    for path in (("properties", "env"), ("$defs", "Fragment", "properties", "env")):
        _node(s, path)["propertyNames"] = {"pattern": _ENV_NAME.pattern}
    for field in ("base_sha256", "patched_sha256"):
        _node(s, ("$defs", "PatchSpec", "properties", field))["pattern"] = _SHA256.pattern
    for path in (("$defs", "PatchSpec", "properties", "target"), ("$defs", "Mount", "properties", "target")):
        _node(s, path)["pattern"] = "^/"
    _node(s, ("$defs", "FlagAxis", "properties", "flag"))["pattern"] = "^-"
    for path in (
        ("properties", "args", "items"),
        ("properties", "command", "items"),
        ("properties", "env", "additionalProperties"),
        ("$defs", "Fragment", "properties", "args", "items"),
        ("$defs", "Fragment", "properties", "env", "additionalProperties"),
        ("$defs", "FlagAxis", "properties", "values", "items"),
    ):
        _replace(s, path, ARGV_ITEM)
    _selector(s, ("properties", "exclude", "items"))
    _node(s, ("properties", "exclude", "items"))["minProperties"] = 1  # `- {}` would exclude every cell
    _selector(s, ("$defs", "ExpectRule", "properties", "where"))
    # gpus: "all", a count, or a list of device ids (`[0, 1]` as well as `["0", "1"]`).
    gpu_list = [alt for alt in _node(s, ("properties", "gpus", "anyOf")) if alt.get("type") == "array"]
    if len(gpu_list) != 1:
        raise SystemExit("export-schemas: gpus no longer has exactly one list form; update scripts/export-schemas.py")
    gpu_list[0]["items"] = {"type": ["string", "integer"]}
    gpu_list[0]["minItems"] = 1
    # gpus: 0 is refused by the model's validator.
    for alt in _node(s, ("properties", "gpus", "anyOf")):
        if alt.get("type") == "integer":
            alt["minimum"] = 1
    # Named axes are usually written bare.
    s["$defs"]["NamedAxisShorthand"] = copy.deepcopy(NAMED_AXIS_SHORTHAND)
    _node(s, ("properties", "axes", "additionalProperties", "oneOf")).append({"$ref": "#/$defs/NamedAxisShorthand"})
    # In the long form, too, a value with nothing after it is an empty fragment.
    _replace(s, ("$defs", "NamedAxis", "properties", "values", "additionalProperties"),
             {"anyOf": [{"$ref": "#/$defs/Fragment"}, {"type": "null"}]})
    return _finish(s, "harness.matrix.model.Matrix", "A boot-harness matrix file (YAML), as written.")


def results_schema() -> dict[str, Any]:
    from harness.results.model import RunResult

    return _finish(RunResult.model_json_schema(), "harness.results.model.RunResult",
                   "A boot-harness run record: RESULTS_DIR/<run_id>/results.json.")


def cell_schema() -> dict[str, Any]:
    from harness.results.model import CellResult

    return _finish(CellResult.model_json_schema(), "harness.results.model.CellResult",
                   "A boot-harness cell record: RESULTS_DIR/<run_id>/cells/<cell_id>.json.")


def output_schemas() -> dict[str, dict[str, Any]]:
    """`<command>.output.schema.json` for each command with a `--json` (harness.cli.outputs)."""
    from harness.cli.outputs import OUTPUTS, output_schema

    out = {}
    for command, kind in OUTPUTS.items():
        source = " | ".join(f"{t.__module__}.{t.__qualname__}" for t in getattr(kind, "__args__", (kind,)))
        out[f"{command}.output.schema.json"] = _finish(output_schema(command), source,
                                                       f"What `boot-harness {command} --json` prints.")
    return out


def _finish(schema: dict[str, Any], source: str, what: str) -> dict[str, Any]:
    head = {"$schema": DRAFT, "$comment": f"{what} Generated from {source} by scripts/export-schemas.py; do not edit."}
    return {**head, **schema}


def build() -> dict[str, dict[str, Any]]:
    """File name → schema, exactly what would be written."""
    return {
        "matrix.schema.json": matrix_schema(),
        "results.schema.json": results_schema(),
        "cell.schema.json": cell_schema(),
        **output_schemas(),
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on any difference")
    parser.add_argument("--out", type=Path, default=SCHEMA_DIR, help=f"where to write (default: {SCHEMA_DIR})")
    args = parser.parse_args(argv)
    stale = []
    for name, schema in build().items():
        path = args.out / name
        text = render(schema)
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if args.check:
            if current != text:
                stale.append(name)
        elif current != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(f"out of date: {', '.join(stale)} (run scripts/export-schemas.py)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
