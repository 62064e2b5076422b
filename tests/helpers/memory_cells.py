"""Cell records with a memory curve, for the memory report: a GPU cell and a refused CPU one."""

from __future__ import annotations

from tests.synthetic import make_cell, with_memory

GIB, MIB = 1 << 30, 1 << 20

#: A GPU boot's milestones (seconds since the cell started) and a curve with the steps vLLM's phases take.
MILESTONES = {"started": 0.2, "first_line": 1.0, "engine_started": 2.0, "weights_loaded": 6.0, "compiled": 9.0,
              "kv_sized": 11.0, "graphs_captured": 15.0, "engine_ready": 15.5, "listening": 16.0, "healthy": 16.5,
              "served": 17.0}


SAMPLES = [(0.0, 0), (1.0, 200 * MIB), (3.0, 600 * MIB), (5.0, 2 * GIB), (6.0, int(2.1 * GIB)),
           (10.0, int(2.6 * GIB)), (12.0, int(6.6 * GIB)), (14.0, int(7.0 * GIB)), (16.0, int(6.9 * GIB)),
           (17.0, int(6.9 * GIB))]


LOGGED = [{"what": "weights", "logged_bytes": 2 * GIB, "phase": "weight loading", "measured_bytes": int(2.3 * GIB)},
          {"what": "kv_cache", "logged_bytes": 4 * GIB, "phase": "CUDA-graph capture", "measured_bytes": None}]


def gpu_cell(cell_id: str = "mml2048-gpu", peak_scale: float = 1.0, **kw) -> object:
    c = make_cell(cell_id, {"max_model_len": "2048", "gpu": "h100"}, "booted")
    samples = [(t, int(b * peak_scale)) for t, b in SAMPLES]
    return with_memory(c, samples, milestones=MILESTONES, verdict_s=17.1, limit=8 * GIB, utilization=0.9,
                       logged=LOGGED, **kw)


def cpu_refused_cell() -> object:
    """A process cell refused while sizing KV: its limit is the host's whole memory, far above the peak."""
    c = make_cell("mml4096-cpu", {"max_model_len": "4096", "gpu": "none"}, "refused",
                  refusal={"kind": "kv_cache_too_small", "max_seq_len": 4096, "needed_gib": 3.0, "available_gib": 2.0})
    return with_memory(c, [(0.0, 0), (2.0, 1 * GIB), (4.0, 3 * GIB), (5.0, 3 * GIB)],
                       milestones={"started": 0.1, "first_line": 0.8, "weights_loaded": 3.0}, verdict_s=5.5,
                       source="process", limit=128 * GIB, stopped="the server process 4242 is gone")
