"""What every `--json` output is: a pydantic model, printed by `emit`, so the JSON Schema exported from the model
(scripts/export-schemas.py → harness/schemas/<command>.output.schema.json) describes exactly what is printed."""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict


class JsonOutput(BaseModel):
    """The base of a command's JSON output and of its parts: a key the model does not name is a bug, never printed."""

    model_config = ConfigDict(extra="forbid")


#: A figure as the code computed it: an int stays an int (a `float` field would print 3072 as 3072.0).
Number = int | float


def render(model: BaseModel) -> str:
    """The text a command prints for `model`: its JSON-mode dump, indented by 2 (no trailing newline)."""
    return json.dumps(model.model_dump(mode="json"), indent=2)


def emit(model: BaseModel) -> None:
    """Print `model` as the command's one JSON object on stdout."""
    print(render(model))
