"""Scaling a matrix out across CI runners: shards (`shard`), their runs merged back into one (`merge`), and what a
cell's JUnit test case carries (`junit`). Cells at once on one host are the executor's (harness.boot.executor)."""
