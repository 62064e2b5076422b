"""What `boot-harness facts --json` reads from each real failure of the corpus (tests/data/causes/, issue 40).

For every excerpt: the cause id and kind are the index's, the decisive line holds the index's `decisive` (or, for a
paste cut shorter than the index's quote, is held by it), and every figure the index lists is read with its value.
A case that still misses is listed below with the reason, and its test fails once it passes, so the list stays true.

The index names figures in the issue's words; `facts` shows the catalogue's names (harness/verdict/causes/): `NAMES`
maps the one to the other, and figures the index gives in MiB are the catalogue's GiB times 1024.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml

from harness.cli import main

CAUSES = Path(__file__).resolve().parents[1] / "data" / "causes"
INDEX: list[dict] = yaml.safe_load((CAUSES / "index.yaml").read_text(encoding="utf-8"))
IDS = [e["file"][:3] for e in INDEX]

#: The index's name of a figure → the catalogue's names for it, tried in order.
NAMES: dict[str, tuple[str, ...]] = {
    "max_model_len": ("max_seq_len",), "kv_tokens": ("estimated_max_model_len",),
    "kv_needed_gib": ("needed_gib",), "kv_available_gib": ("available_gib",),
    "free_gib": ("available_gib",), "requested_gib": ("needed_gib",), "tried_gib": ("needed_gib",),
    "num_attention_heads": ("heads",), "tensor_parallel_size": ("tp", "world_size"),
    "available_gpus": ("gpus",), "local_gpus": ("gpus",), "block_k": ("divisor",),
    "input_size_per_partition": ("size",), "checkpoint_quantization": ("checkpoint",),
    "requested_quantization": ("asked",), "quantization": ("asked", "method"),
    "driver_cuda_version": ("driver_version",), "ep_size": ("ep",), "physical_experts": ("experts",),
    "max_num_batched_tokens": ("batched",), "missing_file": ("file",), "model": ("model", "path"),
    "dtype": ("dtype_asked",), "compute_capability": ("capability",), "required_capability": ("min_capability",),
}
#: The index's MiB figures → the catalogue's GiB figure they are.
MIB: dict[str, str] = {"tried_mib": "needed_gib", "free_mib": "available_gib"}

#: (file number, cause) the catalogue still names wrongly, with why. Empty: every case is named right.
KNOWN_MISSES: dict[str, str] = {}
#: (file number, figure) the decisive line does not state, so the catalogue does not read it, with why.
KNOWN_FIGURE_GAPS: dict[tuple[str, str], str] = {
    ("001", "gpu_blocks"): "stated by an earlier INFO line ('# GPU blocks: 1478'), not by the refusal",
    ("025", "port"): "port 0 is in the traceback's frame (get_open_port binding port 0), in no message",
    ("040", "model"): "stated by the launcher's config dump line, not by the trust_remote_code prompt",
    ("086", "model"): "stated by the 'non-default args' INFO line, not by the config-format error",
}


def _facts(path: Path) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["facts", str(path), "--json"])
    assert code == 0, out.getvalue()[-2000:]
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def read() -> dict[str, dict]:
    """`facts --json`'s cause for every excerpt, read once for all the cases."""
    return {e["file"][:3]: _facts(CAUSES / e["file"]).get("cause") or {} for e in INDEX}


def _figure(numbers: dict, key: str) -> object:
    if key in MIB:
        gib = numbers.get(MIB[key])
        return round(gib * 1024, 2) if isinstance(gib, float) else gib
    for name in (key, *NAMES.get(key, ())):
        if name in numbers:
            return numbers[name]
    return None


def _same(got: object, want: object) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)):
        return abs(got - want) < 0.006  # the index rounds as the line does: 2 decimals
    return got == want


def _named_right(entry: dict, cause: dict) -> bool:
    line, decisive = cause.get("line", ""), entry["decisive"]
    return cause.get("id") == entry["cause"] and bool(line) and (decisive in line or line in decisive)


@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_facts_names_the_cause_and_its_decisive_line(entry, read):
    number = entry["file"][:3]
    cause = read[number]
    if number in KNOWN_MISSES:
        assert not _named_right(entry, cause), f"{number} is named right now: drop it from KNOWN_MISSES"
        return
    assert cause.get("id") == entry["cause"], (cause.get("id"), cause.get("line"))
    assert cause["kind"] == entry["kind"]
    line, decisive = cause["line"], entry["decisive"]
    assert decisive in line or (len(line) >= 12 and line in decisive), line


@pytest.mark.parametrize("entry", INDEX, ids=IDS)
def test_facts_reads_every_figure_the_index_lists(entry, read):
    number = entry["file"][:3]
    numbers = read[number].get("numbers", {})
    for key, want in entry["numbers"].items():
        got = _figure(numbers, key)
        if (number, key) in KNOWN_FIGURE_GAPS:
            assert not _same(got, want), f"{number} {key} is read now: drop it from KNOWN_FIGURE_GAPS"
            continue
        assert _same(got, want), (key, want, got, numbers)


def test_the_corpus_is_named_right_at_least_95_percent_and_figures_are_mostly_read(read):
    right = sum(_named_right(e, read[e["file"][:3]]) for e in INDEX)
    assert right >= 0.95 * len(INDEX)
    figures = sum(len(e["numbers"]) for e in INDEX)
    assert len(KNOWN_FIGURE_GAPS) <= 0.05 * figures


def test_no_environment_fault_is_a_verdict_on_the_configuration(read):
    """Kinds give the outcome: a machine's fault is `error` (the run still fails, the configuration is not judged),
    a configuration that cannot boot `refused`, anything else `crashed`."""
    outcome = {"environment": "error", "config_refusal": "refused", "resource": "refused", "crash": "crashed"}
    wrong = {e["file"]: read[e["file"][:3]].get("outcome") for e in INDEX
             if read[e["file"][:3]].get("outcome") != outcome[e["kind"]] and e["file"][:3] not in KNOWN_MISSES}
    assert wrong == {}
