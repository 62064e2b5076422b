"""The bisect's pure parts: the search over a scripted probe (probes counted, never time), the candidate list, the
registry's tag list over a scripted distribution API."""

from __future__ import annotations

import json
import math

import pytest

from harness.bisect.candidates import BuildKind, ordered, process_command, read_refs_file
from harness.bisect.oracle import Mark, Said
from harness.bisect.registry import split, tags_by_creation
from harness.bisect.search import bisect
from harness.errors import EndsDisagree, UsageError

N = 16


class Scripted:
    """Candidates from `first_bad` on are bad; `skips` say skip; `flips[i]` is the marks of i's boots in turn."""

    def __init__(self, first_bad: int, skips=(), flips=None):
        self.first_bad, self.skips, self.flips = first_bad, set(skips), dict(flips or {})
        self.probes: list[tuple[int, int]] = []

    def __call__(self, index: int, k: int) -> Said:
        self.probes.append((index, k))
        if index in self.skips:
            return Said(Mark.skip, "error (engine_error)")
        if index in self.flips:
            return Said(self.flips[index][k - 1], "flip")
        return Said(Mark.bad if index >= self.first_bad else Mark.good, "v")


@pytest.mark.parametrize("first_bad", range(1, N))
def test_sixteen_candidates_find_the_first_bad_in_four_boots_after_the_ends(first_bad):
    probe = Scripted(first_bad)
    found = bisect(N, probe)
    assert (found.lo, found.hi, found.exact) == (first_bad - 1, first_bad, True)
    assert probe.probes[:2] == [(0, 1), (N - 1, 1)], "the ends first"
    # 14 candidates between the ends leave 15 places for the first bad: ⌈log2 15⌉ = 4 boots, 6 with the ends
    assert len(probe.probes) - 2 <= math.ceil(math.log2(N - 1)) == 4
    assert len(set(probe.probes)) == len(probe.probes), "no candidate booted twice"


def test_a_skipped_candidate_is_stepped_around_and_the_answer_stays_exact():
    probe = Scripted(9, skips={7})
    found = bisect(N, probe)
    assert (found.lo, found.hi, found.exact) == (8, 9, True)
    assert 7 in found.left_out and (7, 1) in probe.probes


def test_skips_next_to_the_boundary_make_a_range():
    probe = Scripted(9, skips={8})
    found = bisect(N, probe)
    assert (found.lo, found.hi, found.exact, found.between) == (7, 9, False, [8])


def test_repeat_boots_each_decisive_candidate_k_times_and_leaves_out_one_that_flips():
    probe = Scripted(9, flips={8: [Mark.good, Mark.bad, Mark.good]})
    found = bisect(N, probe, repeat=3)
    assert found.between == [8] and found.left_out[8].flipped and not found.exact
    assert (found.lo, found.hi) == (7, 9)
    booted = {i for i, _ in probe.probes}
    assert all(sum(1 for j, _ in probe.probes if j == i) == 3 for i in booted), probe.probes


def test_a_skip_is_not_repeated():
    probe = Scripted(9, skips={7})
    bisect(N, probe, repeat=3)
    assert [k for i, k in probe.probes if i == 7] == [1]


@pytest.mark.parametrize("script, words", [
    (Scripted(0), "the good end c0 is not good"),
    (Scripted(N), "the bad end c15 is not bad"),
    (Scripted(5, skips={0}), "the good end c0 is not good: it gave error (engine_error)"),
    (Scripted(5, flips={N - 1: [Mark.bad, Mark.good]}), "the bad end c15 flipped"),
])
def test_ends_that_disagree_are_one_line_naming_what_each_gave(script, words):
    with pytest.raises(EndsDisagree) as exc:
        bisect(N, script, repeat=2, describe=lambda i: f"c{i}")
    assert words in str(exc.value) and "\n" not in str(exc.value)
    assert len({i for i, _ in script.probes}) <= 2, "nothing between the ends is booted"


def test_two_candidates_are_the_ends_alone():
    probe = Scripted(1)
    found = bisect(2, probe)
    assert (found.lo, found.hi, found.exact, len(probe.probes)) == (0, 1, True, 2)


# ---- candidates


def test_the_list_is_cut_to_the_ends_and_ends_not_listed_are_added():
    refs = ["a", "b", "c", "d", "e"]
    assert [c.ref for c in ordered(refs, "b", "d", BuildKind.image)] == ["b", "c", "d"]
    assert [c.ref for c in ordered(["b", "c"], "a", "z", BuildKind.image)] == ["a", "b", "c", "z"]
    with pytest.raises(UsageError, match="bad end 'a' before the good end 'c'"):
        ordered(refs, "c", "a", BuildKind.image)
    with pytest.raises(UsageError, match="listed twice"):
        ordered(["a", "b", "a"], "x", "y", BuildKind.image)
    with pytest.raises(UsageError, match="the same candidate"):
        ordered(refs, "a", "a", BuildKind.image)


def test_process_builds_are_venvs_or_commands(tmp_path):
    assert process_command("venv:/opt/v1") == ("/opt/v1/bin/vllm", "serve")
    assert process_command("cmd:/opt/b7/run.sh --x 'a b'") == ("/opt/b7/run.sh", "--x", "a b")
    assert process_command(str(tmp_path)) == (str(tmp_path / "bin" / "vllm"), "serve")
    with pytest.raises(UsageError, match="No closing quotation"):
        process_command("cmd:/x 'open")
    tokens = [c.token for c in ordered(["venv:/opt/v0.9", "cmd:/opt/b7/bin/vllm serve"], "venv:/opt/v0.8",
                                       "venv:/opt/v1.0", BuildKind.command)]
    assert tokens == ["v0.8", "v0.9", "b7", "v1.0"]
    images = ordered(["reg.io/f:v1.3", "reg.io/f@sha256:" + "ab" * 32], "reg.io/f:v1.2", "reg.io/f:v2", BuildKind.image)
    assert [c.token for c in images] == ["v1.2", "v1.3", "shaabababababab", "v2"]


def test_a_refs_file_is_one_a_line_and_a_duplicate_names_both_lines(tmp_path):
    f = tmp_path / "builds.txt"
    f.write_text("# oldest first\nfork:v1\n\nfork:v2\ncmd:/x '#1'\n")
    assert read_refs_file(f) == ["fork:v1", "fork:v2", "cmd:/x '#1'"]
    f.write_text("fork:v1\nfork:v2\nfork:v1\n")
    with pytest.raises(UsageError, match=r"builds.txt:3: 'fork:v1' is listed twice \(line 1 too\)"):
        read_refs_file(f)


# ---- the registry's tag list


class Registry:
    """The distribution API as a dict: tags (two pages), one index, configs with creation times; a bearer token."""

    def __init__(self, created: dict[str, str]):
        self.created, self.calls = created, []

    def __call__(self, url: str, headers: dict[str, str]):
        self.calls.append(url)
        if url.startswith("https://auth.example/token"):
            return 200, {}, json.dumps({"token": "t0k"}).encode()
        if headers.get("Authorization") != "Bearer t0k":
            return 401, {"www-authenticate": 'Bearer realm="https://auth.example/token",service="reg",'
                                             'scope="repository:org/fork:pull"'}, b""
        path = url.split("reg.example", 1)[1]
        tags = list(self.created)
        if path.startswith("/v2/org/fork/tags/list?n="):
            return 200, {"link": '</v2/org/fork/tags/list?last=x>; rel="next"'}, json.dumps(
                {"tags": tags[:2]}).encode()
        if path == "/v2/org/fork/tags/list?last=x":
            return 200, {}, json.dumps({"tags": tags[2:]}).encode()
        if "/manifests/" in path:
            ref = path.rsplit("/", 1)[1]
            if ref == "v1.1":  # an index: the amd64 manifest is the one read
                return 200, {}, json.dumps({"manifests": [
                    {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
                    {"digest": "sha256:m-v1.1", "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
            tag = ref.removeprefix("sha256:m-")
            return 200, {}, json.dumps({"config": {"digest": f"sha256:c-{tag}"}}).encode()
        if "/blobs/sha256:c-" in path:
            return 200, {}, json.dumps({"created": self.created[path.rsplit("c-", 1)[1]]}).encode()
        return 404, {}, b""


def test_registry_tags_are_filtered_by_the_glob_and_ordered_by_creation_time():
    reg = Registry({"v1.2": "2024-03-01T00:00:00.123456789Z", "v1.1": "2024-02-01T00:00:00Z",
                    "latest": "2024-04-01T00:00:00Z", "v1.3": "2024-02-15T10:00:00+02:00"})
    got = tags_by_creation("reg.example/org/fork:v1.*", fetch=reg)
    assert list(got) == ["reg.example/org/fork:v1.1", "reg.example/org/fork:v1.3", "reg.example/org/fork:v1.2"]
    assert not any("latest" in c for c in reg.calls), "a tag the glob leaves out costs no request"
    assert split("ubuntu")[:2] == ("https://registry-1.docker.io", "library/ubuntu")


def test_a_registry_tag_without_a_creation_time_is_one_line_naming_it():
    reg = Registry({"v1.2": ""})
    with pytest.raises(UsageError, match="org/fork:v1.2: its image config has no creation time"):
        tags_by_creation("reg.example/org/fork", fetch=reg)
    with pytest.raises(UsageError, match="no tag matches 'v9'"):
        tags_by_creation("reg.example/org/fork:v9", fetch=Registry({"v1": "2024-01-01T00:00:00Z"}))
