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

BlockKey = Hashable


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
    """Counts of free, private and cached KV blocks."""

    __slots__ = ("block_size_tokens", "cached", "enable_prefix_caching", "evictable",
                 "free_fresh", "num_blocks")

    def __init__(self, num_blocks: int, block_size_tokens: int,
                 enable_prefix_caching: bool = False) -> None:
        if num_blocks < 1 or block_size_tokens < 1:
            raise ValueError("num_blocks and block_size_tokens must be >= 1")
        self.num_blocks = int(num_blocks)
        self.block_size_tokens = int(block_size_tokens)
        self.enable_prefix_caching = enable_prefix_caching
        self.free_fresh = self.num_blocks            # free blocks holding nothing reusable
        self.cached: dict[BlockKey, int] = {}       # prefix block -> reference count
        self.evictable: OrderedDict[BlockKey, None] = OrderedDict()  # refcount 0, LRU first

    @property
    def free_blocks(self) -> int:
        """Blocks a new allocation may take (fresh ones plus evictable cached ones)."""
        return self.free_fresh + len(self.evictable)

    @property
    def used_blocks(self) -> int:
        """Blocks referenced by at least one sequence."""
        return self.num_blocks - self.free_fresh - len(self.evictable)

    def allocate(self, n_blocks: int) -> None:
        """Take n fresh blocks, evicting least-recently-freed cached blocks if needed."""
        if n_blocks > self.free_fresh + len(self.evictable):
            raise RuntimeError(f"KV pool: {n_blocks} blocks asked, {self.free_blocks} free")
        take = min(n_blocks, self.free_fresh)
        self.free_fresh -= take
        for _ in range(n_blocks - take):
            key, _ = self.evictable.popitem(last=False)
            del self.cached[key]

    def lookup(self, group: Hashable, max_blocks: int) -> list[BlockKey]:
        """The cached blocks (group, 0), (group, 1), ... present without a gap."""
        if not self.enable_prefix_caching:
            return []
        hits: list[BlockKey] = []
        cached = self.cached
        for i in range(max_blocks):
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
        return sum(1 for k in keys if cached[k] == 0)

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
