"""The hostile-input table of docs/reliability.md is in sync with the cases the suite collects (hostile_table.py)."""

from __future__ import annotations

from tests.reliability import hostile_table as table


def test_the_doc_table_of_hostile_inputs_is_in_sync():
    assert table.current() is not None, f"{table.DOC} lacks the generated table"
    assert table.current() == table.render(), "regenerate it: python -m tests.reliability.hostile_table --write"


def test_every_hostile_file_is_a_class_of_the_table():
    files = sorted(p.name for p in table.ROOT.joinpath("tests", "reliability").glob("test_hostile_*.py")
                   if p.name != "test_hostile_table.py")
    assert files == sorted(name for name, _, _ in table.CLASSES)
