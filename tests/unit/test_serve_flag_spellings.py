"""Serve flags spelled the way vLLM accepts them (issue 21). Each release is pinned by what its parser did (read off
each wheel, 0.8.0-0.34.0; docs/kv-model.md, "Flag spellings"); vLLM 0.32's own parser reads every spelling in
tests/integration/test_serve_flags_vllm.py."""

from __future__ import annotations

import pytest

from harness.cli import main
from tests.helpers.serve_flags import MTP, harness_reads


def test_a_flag_that_does_not_touch_the_kv_cache_is_left_to_vllm():
    """vLLM refuses `--not-a-flag`; the harness skips it, since a fork's image takes flags upstream does not know
    (and the command would not boot anyway). A KV flag misspelt is not skipped: it is refused above."""
    assert harness_reads(["--fork-kv-floor", "4G", "--max-model-len", "2048"]) == {"max_model_len": 2048}


# --- older releases: what their parsers did (read off each wheel's `vllm serve` parser) ----------------------------

REFUSED = "refused"
RELEASES = [
    # human-readable integers: --max-model-len from 0.8.4, --max-num-batched-tokens from 0.9.1, t/T from 0.13.0
    ("0.8.3", ["--max-model-len", "32k"], REFUSED),
    ("0.8.4", ["--max-model-len", "32k"], {"max_model_len": 32000}),
    ("0.9.0", ["--max-num-batched-tokens", "2k"], REFUSED),
    ("0.9.1", ["--max-num-batched-tokens", "2k"], {"max_num_batched_tokens": 2000}),
    ("0.12.0", ["--max-model-len", "1T"], REFUSED),
    ("0.13.0", ["--max-model-len", "1T"], {"max_model_len": 2**40}),
    ("0.13.0", ["--max-model-len", "1.5K"], REFUSED),
    # auto-fit: `auto` is no number before 0.14.0; from then on it parses, and the harness does not predict it
    ("0.13.0", ["--max-model-len", "auto"], "not a number"),
    ("0.14.0", ["--max-model-len", "auto"], "auto-fit is not predicted"),
    # flags and aliases by release
    ("0.10.1", ["--kv-cache-memory-bytes", "4G"], "came in 0.10.2"),
    ("0.10.2", ["--kv_cache_memory_bytes", "4G"], {"kv_cache_memory_bytes": 4 << 30}),
    ("0.18.1", ["-sc", MTP], "came in 0.19.0"),
    ("0.18.1", ["-s", MTP], REFUSED),
    ("0.19.0", ["-s", MTP], {"speculative": {"method": "mtp", "num_speculative_tokens": 4}}),
    ("0.21.0", ["--spec-tokens", "4"], "came in 0.22.0"),
    ("0.22.0", ["--spec-tokens", "4", "--spec-method", "mtp"],
     {"speculative": {"method": "mtp", "num_speculative_tokens": 4}}),
    ("0.32.0", ["--disable-prefix-caching"], REFUSED),
    ("0.33.0", ["--disable-prefix-caching"], {"enable_prefix_caching": False}),
    ("0.33.0", ["--no-enable-prefix-caching"], {"enable_prefix_caching": False}),
    # the speculative flags before --speculative-config (0.8.0-0.8.2), gone in 0.8.3
    ("0.8.2", ["--speculative-model", "/m/d", "--num-speculative-tokens", "4"],
     {"speculative": {"model": "/m/d", "num_speculative_tokens": 4}}),
    ("0.8.3", ["--speculative-model", "/m/d"], "gone in 0.8.3"),
    ("0.8.2", ["--speculative-config", "{'method': 'ngram'}"], {"speculative": {"method": "ngram"}}),
    # dotted keys: none before 0.9.0; 0.9.0 keeps values as strings and dashes the whole key; 0.9.2 reads JSON;
    # 0.20.0 reads 2k
    ("0.8.5", ["--speculative-config.num_speculative_tokens", "4"], REFUSED),
    ("0.9.0", ["--speculative-config.num_speculative_tokens", "4"], {"speculative": {"num-speculative-tokens": "4"}}),
    ("0.9.1", ["--speculative-config.num_speculative_tokens", "4"], {"speculative": {"num_speculative_tokens": "4"}}),
    ("0.9.1", ["-sc.method", "mtp"], REFUSED),
    ("0.9.2", ["--speculative-config.num_speculative_tokens", "4"], {"speculative": {"num_speculative_tokens": 4}}),
    ("0.19.1", ["--speculative-config.num_speculative_tokens", "2k"],
     {"speculative": {"num_speculative_tokens": "2k"}}),
    ("0.20.0", ["--speculative-config.num_speculative_tokens", "2k"],
     {"speculative": {"num_speculative_tokens": 2000}}),
    # --hf-overrides: from 0.10.0 a JSON object may be padded with blanks; before, it is read as a string
    ("0.9.2", ["--hf-overrides", ' {"a": 1}'], "not predicted"),
    ("0.10.0", ["--hf-overrides", ' {"a": 1}'], {"hf_overrides": {"a": 1}}),
    # choices
    ("0.17.1", ["--block-size", "48"], REFUSED),
    ("0.18.0", ["--block-size", "48"], {"block_size": 48}),
    ("0.8.4", ["--block-size", "1"], REFUSED),
    ("0.31.0", ["--mamba-cache-mode", "all"], {"mamba_cache_mode": "all"}),
    ("0.32.0", ["--mamba-cache-mode", "all"], REFUSED),
    ("0.11.0", ["--kv-cache-dtype", "fp8_ds_mla"], REFUSED),
    ("0.11.1", ["--kv-cache-dtype", "fp8_ds_mla"], {"kv_cache_dtype": "fp8_ds_mla"}),
    # prefixes that new flags made ambiguous
    ("0.15.1", ["--sp", MTP], {"speculative": {"method": "mtp", "num_speculative_tokens": 4}}),
    ("0.16.0", ["--sp", MTP], "ambiguous"),
    ("0.25.1", ["--max-num-s", "8"], {"max_num_seqs": 8}),
    ("0.26.0", ["--max-num-s", "8"], "ambiguous"),
    ("0.11.1", ["-p", "1"], {}),
    ("0.12.0", ["-p", "1"], "ambiguous"),
]


@pytest.mark.parametrize("version,argv,want", RELEASES, ids=[f"{v}:{' '.join(a)}" for v, a, _ in RELEASES])
def test_each_release_reads_what_its_parser_read(version, argv, want):
    ours = harness_reads(argv, version)
    if isinstance(want, str):
        assert isinstance(ours, str), ours
        assert want == REFUSED or want in ours, ours
    else:
        assert ours == want


def test_the_default_release_is_032():
    assert harness_reads(["--max-model-len", "1T"]) == harness_reads(["--max-model-len", "1T"], "0.32.0")
    assert isinstance(harness_reads(["--mamba-cache-mode", "all"]), str)


# --- the command -----------------------------------------------------------------------------------------------------

def _kv(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["kv", "tests/data/kv/models/tiny-llama", "--platform", "cpu", "--available-bytes", "3145728",
                 "--json", "--", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_kv_reads_vllms_spellings_as_the_canonical_flags(capsys):
    canonical = _kv(capsys, "--max-model-len", "4096", "--tensor-parallel-size", "1", "--dtype", "float32",
                    "--max-num-batched-tokens", "2048", "--no-enable-prefix-caching")
    assert canonical[0] == 1, canonical[2]  # it does not fit: a prediction, not a refusal
    for spelled in (["--max_model_len", "4096", "-tp", "1", "--dtype=float32", "--max_num_batched_tokens=2K",
                     "--no_enable_prefix_caching"],
                    ["--max-model=4K", "-t", "1", "--dty", "float32", "--max-num-b", "2048", "--no-enable-prefix"]):
        code, out, err = _kv(capsys, *spelled)
        assert (code, out) == canonical[:2], (spelled, err)


@pytest.mark.parametrize("args,words", [
    (["--max", "4096"], "--max: ambiguous"),
    (["--tensor-paralel-size", "2"], "did you mean --tensor-parallel-size"),
    (["-tp2"], "write -tp 2"),
    (["--max-model-len", "4096", "-pp", "2"], "--pipeline-parallel-size 2: not predicted"),
    (["--max-model-len", "1.5K"], "did you mean 1.5k"),
    (["--enable-prefix-caching=true"], "takes no value"),
])
def test_kv_refuses_what_vllm_refuses_in_one_line(capsys, args, words):
    code, _, err = _kv(capsys, *args)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err


def test_a_cells_flags_are_read_as_its_own_release_read_them():
    """A cell's prediction parses the server's arguments with the release its log names: `32k` was refused by
    0.8.3's `--max-model-len` (int()), and read as 32,000 from 0.8.4, so the record says which."""
    from pathlib import Path

    from harness.logfacts.model import KvFacts
    from harness.predict.cell import predict_cell
    from harness.runtime.base import read_host_file

    args = ["--model", "tests/data/kv/models/tiny-llama", "--max-model-len", "32k"]
    read = lambda p: read_host_file(Path(p))  # noqa: E731 - as the process runtime reads the server's files
    old = predict_cell(args, read, KvFacts(), None, None, None, "0.8.3")
    new = predict_cell(args, read, KvFacts(), None, None, None, "0.8.4")
    assert old.prediction is None and "not an integer" in old.skipped, old
    assert new.prediction is not None and new.prediction.max_model_len == 32000, new
