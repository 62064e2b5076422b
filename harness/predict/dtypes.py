"""Element sizes of the dtype names config.json and vLLM's flags use."""

#: config.json dtype names (`torch_dtype`, or `dtype` in newer transformers) and cache dtype flags → bytes
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8}
