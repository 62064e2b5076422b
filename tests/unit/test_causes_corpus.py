"""The corpus of real start-up failures (tests/data/causes/, issue 40) is well-formed.

The catalogue of causes is built and tested against these excerpts, so an entry that names a file that is not there, a
decisive line its excerpt does not hold, or a cause id spelt two ways would test nothing. This checks the index only;
what the harness reads from each excerpt is asserted by the catalogue's own tests.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

CAUSES = Path(__file__).resolve().parents[1] / "data" / "causes"
KINDS = {"config_refusal", "resource", "environment", "crash"}
FIELDS = {"file", "source", "repo", "vllm_version", "cause", "kind", "decisive", "numbers", "note"}
REQUIRED = FIELDS - {"note"}
CAUSE_ID = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
FILE_NAME = re.compile(r"(\d{3})-([a-z0-9_]+)\.log")
SOURCE = re.compile(r"https://github\.com/([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)/(?:issues|pull|discussions)/\d+(?:#\S+)?")
#: Q&A sites, forums and blogs whose threads and posts a reader can open (issue 40, round six): the source is an https
#: (or, for a site served only so, http) URL on one of them and the entry's `repo` names the site (its host, no "www.").
SITES = frozenset({
    "stackoverflow.com", "discuss.vllm.ai", "discuss.huggingface.co", "reddit.com", "discuss.ai.google.dev",
    "velog.io", "blog.gitcode.com", "maplevalley.com.cn", "gigagpu.com", "blog.youkuaiyun.com", "blog.csdn.net",
})
PAGE = re.compile(r"https?://(?:www\.)?([a-z0-9.-]+\.[a-z]{2,})/\S+")
VERSION = re.compile(r"\d+\.\d+(?:\.\d+)*(?:\.?(?:post|rc|dev)\d+)*(?:\+\S+)?")
#: A Hugging Face or similar token that escaped the `hf_***` redaction.
SECRET = re.compile(r"\bhf_[A-Za-z0-9]{20,}|\bsk-[A-Za-z0-9]{20,}")


def _index() -> list[dict]:
    return yaml.safe_load((CAUSES / "index.yaml").read_text(encoding="utf-8"))


INDEX = _index()


def _lines(name: str) -> list[str]:
    return (CAUSES / name).read_text(encoding="utf-8").splitlines()


def test_the_corpus_is_large_and_varied_enough():
    assert len(INDEX) >= 302
    assert len({e["cause"] for e in INDEX}) >= 63


def test_every_file_is_indexed_once_and_every_indexed_file_exists():
    named = Counter(e["file"] for e in INDEX)
    assert [n for n, c in named.items() if c > 1] == []
    on_disk = {p.name for p in CAUSES.glob("*.log")}
    assert set(named) - on_disk == set(), "indexed but missing"
    assert on_disk - set(named) == set(), "on disk but not indexed"


@pytest.mark.parametrize("entry", INDEX, ids=[e.get("file", "?") for e in INDEX])
def test_entry_is_well_formed(entry):
    assert REQUIRED <= set(entry) <= FIELDS, sorted(set(entry) ^ REQUIRED)
    match = FILE_NAME.fullmatch(entry["file"])
    assert match, entry["file"]
    assert CAUSE_ID.fullmatch(entry["cause"]), entry["cause"]
    assert match.group(2) == entry["cause"], "the file is named by its cause"
    assert entry["kind"] in KINDS
    source, page = SOURCE.fullmatch(entry["source"]), PAGE.fullmatch(entry["source"])
    if source:
        assert source.group(1).lower() == entry["repo"].lower()
    else:
        assert page and page.group(1) in SITES, entry["source"]
        assert page.group(1) == entry["repo"], "a page's repo names its site"
    version = entry["vllm_version"]
    assert version is None or (isinstance(version, str) and VERSION.fullmatch(version)), version
    assert isinstance(entry["numbers"], dict)
    assert all(CAUSE_ID.fullmatch(k) for k in entry["numbers"]), entry["numbers"]
    assert all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in entry["numbers"].values())
    assert isinstance(entry.get("note", ""), str)


@pytest.mark.parametrize("entry", INDEX, ids=[e.get("file", "?") for e in INDEX])
def test_decisive_line_is_in_its_excerpt(entry):
    decisive = entry["decisive"]
    assert isinstance(decisive, str) and len(decisive) >= 12, decisive
    assert "\n" not in decisive
    assert any(decisive in line for line in _lines(entry["file"])), decisive


def test_a_cause_has_one_kind():
    kinds: dict[str, set[str]] = {}
    for e in INDEX:
        kinds.setdefault(e["cause"], set()).add(e["kind"])
    assert {c: k for c, k in kinds.items() if len(k) > 1} == {}


def test_excerpts_are_pastes_not_whole_logs_and_hold_no_secret():
    for e in INDEX:
        lines = _lines(e["file"])
        assert 1 <= len(lines) <= 200, e["file"]
        assert all(line.strip() for line in lines[:1] + lines[-1:]), f"{e['file']}: starts or ends blank"
        assert not SECRET.search("\n".join(lines)), e["file"]


def test_numbers_are_numbers_where_they_are_named_as_amounts():
    for e in INDEX:
        for key, value in e["numbers"].items():
            if key.endswith(("_gib", "_mib", "_len", "_tokens", "_blocks", "_size", "_port", "port")):
                assert isinstance(value, (int, float)), (e["file"], key, value)
