"""Scaling a matrix out: shards across CI runners (`shard`), merging their runs back into one (`merge`), and cells
in parallel on disjoint GPU sets of one host (`scheduler`, over the inventories in `harness.gpu`)."""
