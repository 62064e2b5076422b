"""The pytest plugin's cells booted on the FakeRuntime: `PYTEST_PLUGINS=fake_runtime_plugin` with this folder on
PYTHONPATH overrides the plugin's `boot_runtime` fixture (loaded after the installed plugin, so its fixture wins), the
way a user's conftest would. The docs check runs the docs' `pytest tests/test_boot_matrix.py ...` commands so."""

import pytest

from harness.runtime.fake import FakeRuntime


@pytest.fixture(scope="session")
def boot_runtime():
    return FakeRuntime()
