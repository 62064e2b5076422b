"""The seed's APPLY procedure as code: GNU `patch -p1` in a scratch tree laid out as the patch's paths say, both hashes
checked, what patch said (offset, fuzz) kept, and a clear error naming the file and the hashes when anything differs."""

from __future__ import annotations

import difflib
import hashlib
import re
import subprocess
from pathlib import Path

import pytest

from harness.runtime.patching import PatchError, patch_file, patched_paths

ROOT = Path(__file__).resolve().parents[2]
SEED_PATCH = ROOT / "patches" / "gpu_worker-kv-cap.patch"
SEED_TARGET = "/opt/vllm/lib/python3.14/site-packages/vllm/v1/worker/gpu_worker.py"
TARGET = "/opt/venv/lib/python3.11/site-packages/pkg/worker.py"
ORIGINAL = "".join(f"line {i}\n" for i in range(1, 200))
PATCHED = ORIGINAL.replace("line 120\n", "line 120\n# LOCAL PATCH\nfloor = 1\n")


def sha(data: str | bytes) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


@pytest.fixture
def patch(tmp_path) -> Path:
    diff = "".join(difflib.unified_diff(ORIGINAL.splitlines(True), PATCHED.splitlines(True),
                                        "a/pkg/worker.py", "b/pkg/worker.py"))
    p = tmp_path / "worker.patch"
    p.write_text("# worker.patch -- what and why\n#\n# APPLY: ...\n#   sha256 ...\n" + diff)
    return p


def gnu_patch_the_seeds_way(pristine: bytes, relpath: str, patch: Path, tmp: Path) -> tuple[bytes, str]:
    """What the seed's APPLY section does by hand: the file under D at the patch's path, `cd D && patch -p1 < P`."""
    d = tmp / "D"
    (d / relpath).parent.mkdir(parents=True)
    (d / relpath).write_bytes(pristine)
    with patch.open("rb") as stdin:
        out = subprocess.run(["patch", "-p1"], cwd=d, stdin=stdin, capture_output=True, text=True, check=True)
    return (d / relpath).read_bytes(), out.stdout


def pristine_from_the_seeds_context() -> bytes:
    """A gpu_worker.py as the fork image must have it around line 824: 823 lines before, then the hunk's context and
    removed lines (each ending in a newline, as in any Python file), then more code."""
    body = SEED_PATCH.read_text().split("\n@@ -824,6 +824,21 @@\n", 1)[1]
    old = [line[1:] for line in body.split("\n") if line[:1] in (" ", "-")]
    assert len(old) == 6
    lines = [f"# fork line {i}\n" for i in range(1, 824)] + [f"{line}\n" for line in old]
    return "".join(lines + ['                    "the rest of the fork\'s message", cap)\n',
                            "        return\n"]).encode()


def test_a_patch_with_a_comment_preamble_applies_like_patch_p1(patch, tmp_path):
    prepared = patch_file(ORIGINAL.encode(), patch, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path / "out")
    assert prepared.patched_file.read_text() == PATCHED
    assert (tmp_path / "out" / "worker.py.orig").read_text() == ORIGINAL
    assert "worker.py" in (tmp_path / "out" / "SHA256SUMS").read_text()
    assert "patching file pkg/worker.py" in prepared.patch_output and prepared.warnings == ()
    assert (tmp_path / "out" / "patch.out").read_text().strip() == prepared.patch_output


def test_the_shipped_seed_patch_applies_byte_for_byte_as_gnu_patch_applies_it(tmp_path):
    """The seed's patch file ends without a newline: GNU patch applies it with fuzz 1 (the last context line cannot
    match a line that has one). The harness gets exactly GNU's bytes and keeps the fuzz as a warning."""
    pristine = pristine_from_the_seeds_context()
    expected, said = gnu_patch_the_seeds_way(pristine, "vllm/v1/worker/gpu_worker.py", SEED_PATCH, tmp_path)
    assert "with fuzz 1" in said and expected != pristine
    prepared = patch_file(pristine, SEED_PATCH, SEED_TARGET, sha(pristine), sha(expected), tmp_path / "out")
    assert prepared.patched_file.read_bytes() == expected
    assert prepared.warnings == ("Hunk #1 succeeded at 824 with fuzz 1.",)
    assert b"CLAV_KV_RESERVE_FLOOR_GIB" in expected and expected.count(b"\n") == pristine.count(b"\n") + 15


def test_hunks_found_at_an_offset_are_applied_and_the_offset_is_a_warning(patch, tmp_path):
    shifted = "# a new header line\n" * 7 + ORIGINAL
    want = "# a new header line\n" * 7 + PATCHED
    prepared = patch_file(shifted.encode(), patch, TARGET, sha(shifted), sha(want), tmp_path / "out")
    assert prepared.patched_file.read_text() == want
    assert len(prepared.warnings) == 1 and re.search(r"offset 7 lines", prepared.warnings[0])


def test_a_different_base_file_is_an_error_naming_both_hashes(patch, tmp_path):
    other = ORIGINAL.replace("line 5\n", "line five\n")
    with pytest.raises(PatchError) as err:
        patch_file(other.encode(), patch, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path)
    assert sha(other) in str(err.value) and sha(ORIGINAL) in str(err.value) and TARGET in str(err.value)


def test_a_result_with_another_hash_is_an_error_naming_both(patch, tmp_path):
    with pytest.raises(PatchError) as err:
        patch_file(ORIGINAL.encode(), patch, TARGET, sha(ORIGINAL), "f" * 64, tmp_path)
    assert sha(PATCHED) in str(err.value) and "f" * 64 in str(err.value)


def test_context_that_does_not_match_is_an_error_quoting_gnu_patch(tmp_path):
    p = tmp_path / "bad.patch"
    p.write_text("--- a/pkg/worker.py\n+++ b/pkg/worker.py\n@@ -10,6 +10,7 @@\n"
                 + "".join(f" not here {i}\n" for i in range(3)) + "+x\n" + "".join(f" nor {i}\n" for i in range(3)))
    with pytest.raises(PatchError, match=r"GNU patch -p1 failed \(exit 1\): .*FAILED"):
        patch_file(ORIGINAL.encode(), p, TARGET, sha(ORIGINAL), "0" * 64, tmp_path / "o")


def test_gnu_patchs_fuzz_can_apply_a_hunk_whose_context_is_gone_and_the_hash_check_catches_it(tmp_path):
    """patch's default fuzz (2) drops two context lines: a two-line-context hunk applies anywhere. The patched
    sha256 is what keeps such a result off a server."""
    p = tmp_path / "fuzzy.patch"
    p.write_text("--- a/pkg/worker.py\n+++ b/pkg/worker.py\n@@ -10,2 +10,3 @@\n not here\n also not\n+x\n")
    with pytest.raises(PatchError, match="it gives sha256 [0-9a-f]{64}, the matrix expects patched_sha256 0{64}"):
        patch_file(ORIGINAL.encode(), p, TARGET, sha(ORIGINAL), "0" * 64, tmp_path / "o")


def test_an_already_applied_patch_is_refused_not_reversed(patch, tmp_path):
    with pytest.raises(PatchError, match="previously applied|Reversed"):
        patch_file(PATCHED.encode(), patch, TARGET, sha(PATCHED), sha(ORIGINAL), tmp_path / "o")


def test_a_patch_for_another_file_or_for_several_is_an_error(patch, tmp_path):
    with pytest.raises(PatchError, match="must patch exactly its target"):
        patch_file(ORIGINAL.encode(), patch, "/somewhere/else.py", sha(ORIGINAL), sha(PATCHED), tmp_path)
    two = tmp_path / "two.patch"
    two.write_text(patch.read_text() + patch.read_text().replace("pkg/worker.py", "pkg/other.py"))
    with pytest.raises(PatchError, match="pkg/worker.py, pkg/other.py"):
        patch_file(ORIGINAL.encode(), two, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path)


def test_without_gnu_patch_the_error_says_how_to_get_it(patch, tmp_path, monkeypatch):
    monkeypatch.setenv("BOOT_HARNESS_PATCH", "/nonexistent/patch")
    with pytest.raises(PatchError, match="apt-get install patch"):
        patch_file(ORIGINAL.encode(), patch, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path)


@pytest.mark.parametrize("name", ["gpu_worker-kv-cap.patch", "cpu_worker-kv-floor.patch"])
def test_the_projects_patches_name_one_worker_file_past_their_preambles(name):
    (path,) = patched_paths((ROOT / "patches" / name).read_text())
    assert path.startswith("vllm/v1/worker/")
