"""The one matrix builder the tests share: a matrix is a dict written as YAML, most often one axis of
tests/fakes/fake_vllm.py scenarios on the process runtime (or mounted into a container image)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
#: The stand-in servers (tests/fakes/): fake_vllm.py's scenarios, and the KV-arithmetic servers.
FAKES = ROOT / "tests" / "fakes"
FAKE_VLLM = FAKES / "fake_vllm.py"


def write_matrix(path: Path, doc: dict) -> Path:
    """`doc` as a matrix file at `path` (its folder made), keys in the order written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def variant_of(example: Path, path: Path, **changes) -> Path:
    """The matrix file `example` written to `path` with these top-level keys replaced (a relative path in it now
    reads from `path`'s folder)."""
    from harness.matrix.load import read_yaml

    return write_matrix(path, {**read_yaml(example.read_text()), **changes})


_FRAGMENT_KEYS = {"env", "args", "patches", "mounts", "image"}


def scenario_axis(cases: list[str] | dict[str, dict], **env: str) -> dict[str, dict]:
    """A named axis of fake-server cases: a list of FAKE_VLLM_SCENARIO names, or {value: env (FAKE_VLLM_*)}, or
    {value: a whole fragment (env, args, patches, ...)}; `env` is added to every value."""
    if isinstance(cases, list):
        cases = {s: {"FAKE_VLLM_SCENARIO": s} for s in cases}
    out = {}
    for name, case in cases.items():
        frag = dict(case) if set(case) & _FRAGMENT_KEYS else {"env": case}
        frag["env"] = {**frag.get("env", {}), **env}
        out[name] = frag
    return out


def fake_matrix(path: Path, cases: list[str] | dict[str, dict[str, str]], *, axis: str = "scenario",
                runtime: str = "process", image: str | None = None, extra_mounts: list[dict] | None = None,
                env: dict[str, str] | None = None, python: str = "python3", **top) -> Path:
    """A matrix whose cells are fake vLLM servers. Process runtime: the fake runs with this interpreter. Container
    runtimes: it is mounted at /fake into `image` and run by the image's `python` on 0.0.0.0:8000."""
    doc: dict = {"name": "fake", "model": "fake-model", "timeout_s": 15, "linger_s": 2}
    if runtime == "process":
        doc["command"] = [sys.executable, str(FAKE_VLLM)]
    else:
        doc.update(runtime=runtime, image=image, entrypoint=[python, "/fake/fake_vllm.py"],
                   args=["--host", "0.0.0.0", "--port", "8000"],
                   mounts=[{"source": str(FAKE_VLLM.parent), "target": "/fake"}, *(extra_mounts or [])])
    doc["axes"] = {axis: scenario_axis(cases, **(env or {}))}
    doc.update(top)
    return write_matrix(path, doc)


def fake_cells(tmp_path: Path, values=("a", "b"), **top):
    """(loaded matrix, cells) of one axis `c` whose cells `c_a`, `c_b`, … boot on the FakeRuntime's scripts; every
    cell expected to boot unless `top` says otherwise."""
    from harness.matrix.load import load_matrix

    doc = {"name": "fakes", "command": ["fake-vllm"], "model": "m", "timeout_s": 10, "linger_s": 0.2,
           "axes": {"c": {v: {} for v in values}}, "expect": [{"outcome": "booted"}], **top}
    loaded = load_matrix(write_matrix(tmp_path / "m.yaml", doc))
    return loaded, list(loaded.cells)
