"""How a command prints its `--json` output (a harness.jsonout model): apart from the models, so the commands'
modules, which all print, do not import pydantic for `boot-harness --help` or a command that prints no JSON
(tests/integration/test_api_imports.py holds that)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import BaseModel


def render(model: BaseModel) -> str:
    """The text a command prints for `model`: its JSON-mode dump, indented by 2 (no trailing newline)."""
    return json.dumps(model.model_dump(mode="json"), indent=2)


def emit(model: BaseModel) -> None:
    """Print `model` as the command's one JSON object on stdout."""
    print(render(model))
