"""`boot-harness bisect`: which build broke a cell's verdict. The candidates (candidates.py, registry.py), what a
boot says (oracle.py), the search over an injected probe (search.py), the boots as a run's cells (runner.py) and the
answer (answer.py). docs/bisect.md."""
