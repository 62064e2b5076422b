"""Predicting a cell's KV need from the model's config.json and the server's flags, before it boots, the way vLLM sizes
its KV cache (docs/kv-model.md): per layer, per GPU rank, in blocks, with the pool's held-back null block."""

from harness.predict.model import ModelShape, read_model
from harness.predict.prediction import FactCheck, KvPrediction, PredictionRecord
from harness.predict.predictor import draft_model_path, predict
from harness.predict.serve_flags import ServeFlags, parse_serve_flags

__all__ = ["FactCheck", "KvPrediction", "ModelShape", "PredictionRecord", "ServeFlags", "draft_model_path",
           "parse_serve_flags", "predict", "read_model"]
