"""What tests share, apart from fixtures and hooks (those stay in the conftest.py files, which import what they
need from here). No test module imports another test module or a conftest (tests/unit/test_test_imports.py)."""
