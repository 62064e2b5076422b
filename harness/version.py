"""The harness's version, written once: pyproject.toml reads it from here (setuptools' dynamic `attr`), the package
root re-exports it, and a run records it as `harness_version`. A leaf: it imports nothing, so the record writer and
the CLI take it without reaching up to the package's public face."""

__version__ = "0.1.0"
