"""The paged KV cache: a pool of fixed-size blocks, with an optional prefix cache.

Blocks are counted, not named: a sequence holding T tokens of KV owns ceil(T / block_size)
blocks, some of them shared prefix blocks and the rest private. A shared block is named by
its content where the prompt's text is known (the emulator: `block_hashes`, a chain of hashes
of each full block's token ids, as vLLM keys its prefix cache, so two prompts share exactly
their common leading full blocks), else by `(prefix_group, block_index)` (the simulator, which
has no text: a declared group's block i). This keeps every operation O(1) per block
touched, which the simulator needs to run hundreds of thousands of requests.

Prefix cache (vLLM's automatic prefix caching, reduced to what a simulator can know): the full
blocks of a request's shared prefix are registered under their key once computed. A block whose
last user is gone stays cached but *evictable*: it counts as free (vLLM reports it as free in
`kv_cache_usage`), and is reused by the next request of its group or evicted, least recently
freed first, when a fresh block is needed. Fresh (never-cached) blocks are handed out before any
cached block is evicted: a choice that keeps hits longer than vLLM's single free queue.

>>> pool = BlockPool(num_blocks=4, block_size_tokens=16, enable_prefix_caching=True)
>>> pool.allocate(2); pool.used_blocks
2
>>> pool.register(("sys", 0))            # one of those blocks now holds a shareable prefix
True
>>> pool.release([("sys", 0)], private_blocks=1); pool.used_blocks, pool.free_blocks
(0, 4)
>>> pool.lookup("sys", 3)                   # the next request of group "sys" finds it
[('sys', 0)]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

BlockKey = Hashable


@dataclass(frozen=True)
class KVLayout:
    """vLLM's KV-cache groups (v1 `kv_cache_utils`, hybrid allocator), as block counts.

    vLLM splits the attention layers of each kind into groups of `group_size` layers
    (`group_size` = the fewest layers of a kind, or the most if that is under 1.5x the
    fewest; a kind's last group is padded). One pool of `num_blocks = memory // (page x
    group_size)` blocks serves every group; a block is `block_size_tokens` tokens of one
    group's layers. A sequence with `slots` token slots holds cdiv(slots, B) blocks in each
    full-attention group and, in each sliding-window group, those not wholly before the
    window (`SlidingWindowManager`: skipped tokens max(0, C - w + 1) after C computed
    tokens; whole skipped blocks are freed before the step allocates).

    The default (one full group) is a plain paged cache: cdiv(slots, B) blocks.

    >>> g = KVLayout.for_layers(16, full_layers=21, window_layers=21, window_tokens=4096)
    >>> g.full_groups, g.window_groups, g.group_layers       # Gemma-2: 2 groups of 21
    (1, 1, 21)
    >>> KVLayout(16, 0, 1, 4096, 32).held(30_001, 30_000)   # 4096 tokens of window + 1
    257
    """

    block_size_tokens: int
    full_groups: int = 1
    window_groups: int = 0
    window_tokens: int = 0
    group_layers: int = 1

    @classmethod
    def for_layers(cls, block_size_tokens: int, full_layers: int, window_layers: int,
                   window_tokens: int) -> KVLayout:
        """The groups of a model with these attention layers (vLLM's grouping rule)."""
        if window_layers <= 0 or window_tokens <= 0:
            return cls(block_size_tokens, 1, 0, 0, max(full_layers, 1))
        kinds = [n for n in (full_layers, window_layers) if n > 0]
        size = min(kinds)
        if max(kinds) < 1.5 * size:
            size = max(kinds)

        def groups(n: int) -> int:
            return -(-n // size) if n > 0 else 0

        return cls(block_size_tokens, groups(full_layers), groups(window_layers),
                   window_tokens, size)

    @property
    def groups(self) -> int:
        return self.full_groups + self.window_groups

    @property
    def windowed(self) -> bool:
        return self.window_groups > 0

    def skipped_blocks(self, computed: int) -> int:
        """Whole blocks before the window after `computed` tokens (freed in window groups)."""
        return max(0, computed - self.window_tokens + 1) // self.block_size_tokens

    def held(self, slots: int, computed: int, shared: int = 0) -> int:
        """Private blocks held by a sequence whose last allocation gave it `slots` token
        slots after `computed` tokens were computed, of which the first `shared` blocks are
        shared prefix blocks (held in every group: see `BlockPool` key_blocks)."""
        n = -(-slots // self.block_size_tokens)
        out = self.full_groups * (n - shared)
        if self.window_groups:
            gone = max(shared, min(self.skipped_blocks(computed), n))
            out += self.window_groups * (n - gone)
        return out

    def max_held(self, tokens: int, chunk_tokens: int) -> int:
        """The most blocks a sequence of `tokens` ever holds when chunks are at most
        `chunk_tokens` (a window group holds at most the window before a chunk plus it)."""
        n = -(-tokens // self.block_size_tokens)
        out = self.full_groups * n
        if self.window_groups:
            span = self.window_tokens - 1 + max(chunk_tokens, 1)
            out += self.window_groups * min(n, -(-span // self.block_size_tokens) + 1)
        return out

    def blocks_from_tokens(self, kv_tokens: int, layers: int) -> int:
        """Pool blocks in a KV capacity of `kv_tokens` tokens on all `layers` attention
        layers: memory // (page x group_size), as vLLM sizes its pool."""
        if not self.windowed:
            return kv_tokens // self.block_size_tokens
        return kv_tokens * layers // (self.group_layers * self.block_size_tokens)


def kv_layout(step_model: Any, block_size_tokens: int) -> KVLayout:
    """The KV groups vLLM's hybrid allocator makes for the step model's model (a plain
    paged cache unless it has sliding-window layers; chunked local attention is kept in
    full groups, as vLLM does unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE)."""
    m = getattr(step_model, "model", None)
    if m is None or not getattr(m, "is_windowed", False) or \
            getattr(m, "window_kind", "") != "sliding" or getattr(m, "is_mla", False):
        return KVLayout(block_size_tokens)
    return KVLayout.for_layers(block_size_tokens, m.num_full_attention_layers,
                               m.num_window_layers, m.sliding_window)


def block_hashes(token_ids: list[int], block_size_tokens: int) -> tuple[int, ...]:
    """Content keys of the full blocks of `token_ids`: block i's key hashes block i-1's key
    with block i's tokens, so equal keys mean equal prefixes (vLLM's scheme). Python's
    hash of a tuple of ints is deterministic, so keys are stable across processes.

    >>> a = block_hashes(list(range(40)), 16); b = block_hashes(list(range(32)) + [7], 16)
    >>> len(a), a == b[:2], block_hashes([9] + list(range(1, 40)), 16)[1] == a[1]
    (2, True, False)
    """
    out: list[int] = []
    prev = 0
    n_full = len(token_ids) // block_size_tokens
    for i in range(n_full):
        prev = hash((prev, tuple(token_ids[i * block_size_tokens:(i + 1) * block_size_tokens])))
        out.append(prev)
    return tuple(out)


class BlockPool:
    """Counts of free, private and cached KV blocks.

    `key_blocks`: pool blocks behind one cached prefix key (one per KV group, `KVLayout`):
    a shared prefix block is kept in every group while a sequence uses it (vLLM frees its
    sliding-window copy once it leaves the window: not modeled, conservative by at most
    the shared blocks of each long sequence)."""

    __slots__ = ("block_size_tokens", "cached", "enable_prefix_caching", "evictable",
                 "free_fresh", "key_blocks", "num_blocks")

    def __init__(self, num_blocks: int, block_size_tokens: int,
                 enable_prefix_caching: bool = False, key_blocks: int = 1) -> None:
        if num_blocks < 1 or block_size_tokens < 1 or key_blocks < 1:
            raise ValueError("num_blocks, block_size_tokens and key_blocks must be >= 1")
        self.key_blocks = int(key_blocks)
        self.num_blocks = int(num_blocks)
        self.block_size_tokens = int(block_size_tokens)
        self.enable_prefix_caching = enable_prefix_caching
        self.free_fresh = self.num_blocks            # free blocks holding nothing reusable
        self.cached: dict[BlockKey, int] = {}       # prefix block -> reference count
        self.evictable: OrderedDict[BlockKey, None] = OrderedDict()  # refcount 0, LRU first

    @property
    def free_blocks(self) -> int:
        """Blocks a new allocation may take (fresh ones plus evictable cached ones)."""
        return self.free_fresh + self.key_blocks * len(self.evictable)

    @property
    def used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.free_fresh - self.key_blocks * len(self.evictable)

    def allocate(self, n_blocks: int) -> None:
        """Take n fresh blocks, evicting least-recently-freed cached blocks if needed."""
        kb = self.key_blocks
        if n_blocks > self.free_fresh + kb * len(self.evictable):
            raise RuntimeError(f"KV pool: {n_blocks} blocks asked, {self.free_blocks} free")
        take = min(n_blocks, self.free_fresh)
        self.free_fresh -= take
        short = n_blocks - take
        while short > 0:
            key, _ = self.evictable.popitem(last=False)
            del self.cached[key]
            got = min(kb, short)     # an evicted key frees one block in each group
            self.free_fresh += kb - got
            short -= got

    def lookup(self, group: Hashable, max_blocks: int, start: int = 0) -> list[BlockKey]:
        """The cached blocks (group, start), (group, start + 1), ... before max_blocks,
        present without a gap."""
        if not self.enable_prefix_caching:
            return []
        hits: list[BlockKey] = []
        cached = self.cached
        for i in range(start, max_blocks):
            key = (group, i)
            if key not in cached:
                break
            hits.append(key)
        return hits

    def lookup_keys(self, keys: tuple[Hashable, ...], max_blocks: int) -> list[Hashable]:
        """The leading cached blocks among content keys (chained: a miss ends the match)."""
        if not self.enable_prefix_caching:
            return []
        hits: list[Hashable] = []
        cached = self.cached
        for key in keys[:max_blocks]:
            if key not in cached:
                break
            hits.append(key)
        return hits

    def evictable_among(self, keys: list[BlockKey]) -> int:
        """How many of these cached blocks are currently counted as free."""
        cached = self.cached
        return self.key_blocks * sum(1 for k in keys if cached[k] == 0)

    def acquire(self, keys: list[BlockKey]) -> None:
        """A sequence starts using these cached blocks (prefix-cache hit)."""
        cached, evictable = self.cached, self.evictable
        for k in keys:
            if cached[k] == 0:
                del evictable[k]
            cached[k] += 1

    def register(self, key: BlockKey) -> bool:
        """Name one of the caller's private blocks as a cached prefix block.

        Returns False (the block stays private) if another sequence registered it first.
        """
        if key in self.cached:
            return False
        self.cached[key] = 1
        return True

    def release(self, shared: list[BlockKey], private_blocks: int) -> None:
        """A sequence gives back its blocks: private ones become fresh, shared ones evictable."""
        self.free_fresh += private_blocks
        cached, evictable = self.cached, self.evictable
        # Last block first, so the head of a prefix (shared by most requests) is evicted last.
        for k in reversed(shared):
            n = cached[k] - 1
            cached[k] = n
            if n == 0:
                evictable[k] = None

    def check(self) -> None:
        """Invariants (used by tests)."""
        assert 0 <= self.free_fresh <= self.num_blocks
        assert all(v >= 0 for v in self.cached.values())
        assert all(self.cached[k] == 0 for k in self.evictable)
        assert sum(1 for v in self.cached.values() if v == 0) == len(self.evictable)
        assert self.used_blocks >= 0
