"""Shared fixtures: where the real vLLM for the CPU and the tiny models are, and process-leak checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    # The matrix-as-tests module needs --matrix; the ordinary suite runs without one.
    if collection_path.name == "test_boot_matrix.py" and not config.getoption("matrix"):
        return True
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(what: str, ok: bool, how: str) -> None:
    """A missing real component fails under CI (it must be there) and skips, saying why, on a dev machine."""
    if ok:
        return
    message = f"{what} is not available: {how}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
