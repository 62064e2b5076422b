"""vLLM's KV cache groups: which layers share a block table, and what one block id costs in the shared pool
(vllm/v1/core/kv_cache_utils.py `get_kv_cache_groups`, `_get_kv_cache_groups_uniform_page_size`,
`unify_kv_cache_spec_page_size`, `_get_kv_cache_bytes_per_block`; docs/kv-model.md).

- Every layer the same spec, or every layer the same *type* (all full attention, of any head shape — a draft
  model's layers included): one group; a block id costs the sum of every layer's page.
- Mixed types (sliding window next to full attention): pages are first made equal (a smaller page's block size is
  raised by the ratio), layers are bucketed by spec, every bucket is cut into groups of `group_size` layers (the
  smallest bucket's count, or the largest one's when that is under 1.5× the smallest), short groups padded
  ("Add N padding layers"); a block id costs the widest group's pages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from harness.predict.kinds import LayerKind
from harness.predict.pages import Page


@dataclass(frozen=True)
class Group:
    pages: tuple[Page, ...]  # the group's real layers
    padding_layers: int = 0

    @property
    def page(self) -> Page:
        """The spec that sets the group's blocks per request (all its layers need the same number)."""
        return self.pages[0]

    @property
    def bytes_per_block(self) -> int:
        return sum(p.page_bytes for p in self.pages)


@dataclass(frozen=True)
class Grouping:
    groups: tuple[Group, ...]
    #: the mixed-type grouping does not divide evenly the way vLLM needs: the numbers are approximate
    approximate: str | None = None

    @property
    def bytes_per_block(self) -> int:
        return max(g.bytes_per_block for g in self.groups)


def _uniform_type(pages: list[Page]) -> bool:
    kinds = {p.layer.kind for p in pages}
    if kinds <= {LayerKind.full, LayerKind.mla}:
        return len(kinds) == 1 and len({p.block_size for p in pages}) == 1
    if kinds == {LayerKind.sliding}:
        return len({(p.layer.sliding_window, p.layer.attention_chunk) for p in pages}) == 1 and \
            len({p.block_size for p in pages}) == 1
    return False


def group_layers(pages: list[Page]) -> Grouping:
    if not pages:
        return Grouping(())
    if len({p.key for p in pages}) == 1 or _uniform_type(pages):
        return Grouping((Group(tuple(pages)),))
    approximate = None
    largest = max(p.page_bytes for p in pages)
    unified = []
    for p in pages:
        if p.page_bytes == largest:
            unified.append(p)
        elif largest % p.page_bytes == 0:
            unified.append(replace(p, block_size=p.block_size * (largest // p.page_bytes)))
        else:
            approximate = "page sizes that do not divide each other are padded by vLLM; not modelled exactly"
            unified.append(p)
    buckets: dict[tuple, list[Page]] = {}
    for p in unified:
        buckets.setdefault(p.key, []).append(p)
    counts = [len(b) for b in buckets.values()]
    group_size = min(counts)
    if max(counts) < group_size * 1.5:
        group_size = max(counts)
    groups: list[Group] = []
    for bucket in buckets.values():
        n_groups = -(-len(bucket) // group_size)
        # layers[i::n_groups] per group: the first groups get the extra layers; the last ones are padded
        for i in range(n_groups):
            members = tuple(bucket[i::n_groups])
            groups.append(Group(members, group_size - len(members)))
    return Grouping(tuple(groups), approximate=approximate)
