"""Predicting a cell's KV need from the model's config.json and the server's flags, before it boots, the way vLLM sizes
its KV cache (docs/kv-model.md): per layer, per GPU rank, in blocks, with the pool's held-back null block."""
