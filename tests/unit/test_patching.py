"""The seed's APPLY procedure as code: a unified diff with a comment preamble applied the way `patch -p1` does,
both hashes checked, and a clear error naming the file and the hashes when anything differs."""

from __future__ import annotations

import difflib
import hashlib
from pathlib import Path

import pytest

from harness.runtime.patching import PatchError, apply_patch, parse_unified, patch_file

ROOT = Path(__file__).resolve().parents[2]
TARGET = "/opt/venv/lib/python3.11/site-packages/pkg/worker.py"
ORIGINAL = "".join(f"line {i}\n" for i in range(1, 200))
PATCHED = ORIGINAL.replace("line 120\n", "line 120\n# LOCAL PATCH\nfloor = 1\n")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def patch(tmp_path) -> Path:
    diff = "".join(difflib.unified_diff(ORIGINAL.splitlines(True), PATCHED.splitlines(True),
                                        "a/pkg/worker.py", "b/pkg/worker.py"))
    p = tmp_path / "worker.patch"
    p.write_text("# worker.patch -- what and why\n#\n# APPLY: ...\n#   sha256 ...\n" + diff)
    return p


def test_a_patch_with_a_comment_preamble_applies_like_patch_p1(patch, tmp_path):
    prepared = patch_file(ORIGINAL.encode(), patch, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path / "out")
    assert prepared.patched_file.read_text() == PATCHED
    assert (tmp_path / "out" / "worker.py.orig").read_text() == ORIGINAL
    assert "worker.py" in (tmp_path / "out" / "SHA256SUMS").read_text()


def test_hunks_are_found_at_an_offset_as_patch_does(patch):
    shifted = "# a new header line\n" * 7 + ORIGINAL
    (fp,) = parse_unified(patch.read_text())
    assert apply_patch(shifted.encode(), fp).decode() == "# a new header line\n" * 7 + PATCHED


def test_a_different_base_file_is_an_error_naming_both_hashes(patch, tmp_path):
    other = ORIGINAL.replace("line 5\n", "line five\n")
    with pytest.raises(PatchError) as err:
        patch_file(other.encode(), patch, TARGET, sha(ORIGINAL), sha(PATCHED), tmp_path)
    assert sha(other) in str(err.value) and sha(ORIGINAL) in str(err.value) and TARGET in str(err.value)


def test_a_result_with_another_hash_is_an_error_naming_both(patch, tmp_path):
    with pytest.raises(PatchError) as err:
        patch_file(ORIGINAL.encode(), patch, TARGET, sha(ORIGINAL), "f" * 64, tmp_path)
    assert sha(PATCHED) in str(err.value) and "f" * 64 in str(err.value)


def test_context_that_does_not_match_is_an_error(tmp_path):
    p = tmp_path / "bad.patch"
    p.write_text("--- a/pkg/worker.py\n+++ b/pkg/worker.py\n@@ -10,2 +10,3 @@\n not here\n also not\n+x\n")
    with pytest.raises(PatchError, match="does not match"):
        patch_file(ORIGINAL.encode(), p, TARGET, sha(ORIGINAL), "0" * 64, tmp_path / "o")


def test_a_patch_for_another_file_is_an_error(patch, tmp_path):
    with pytest.raises(PatchError, match="none of which is the target"):
        patch_file(ORIGINAL.encode(), patch, "/somewhere/else.py", sha(ORIGINAL), sha(PATCHED), tmp_path)


@pytest.mark.parametrize("name", ["gpu_worker-kv-cap.patch", "cpu_worker-kv-floor.patch"])
def test_the_projects_patches_parse_with_their_preambles(name):
    (fp,) = parse_unified((ROOT / "patches" / name).read_text())
    assert fp.new_path.startswith("vllm/v1/worker/") and fp.hunks


def test_the_seeds_hunk_is_read_as_written():
    (fp,) = parse_unified((ROOT / "patches" / "gpu_worker-kv-cap.patch").read_text())
    (h,) = fp.hunks
    assert (h.old_start, len(h.old), len(h.new)) == (824, 6, 21)
