"""What every `--json` output is: a pydantic model, printed by `emit`, so the JSON Schema exported from the model
(scripts/export-schemas.py → harness/schemas/<command>.output.schema.json) describes exactly what is printed
(harness/emit.py prints it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class JsonOutput(BaseModel):
    """The base of a command's JSON output and of its parts: a key the model does not name is a bug, never printed."""

    model_config = ConfigDict(extra="forbid")


#: A figure as the code computed it: an int stays an int (a `float` field would print 3072 as 3072.0).
Number = int | float
