"""Analysis of recorded runs: compare runs or cells, fit KV need and cap against max_model_len, find the frontier."""
