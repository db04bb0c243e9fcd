"""Shared prompt prefixes from block ids (Mooncake's `hash_ids`) as simulator prefix groups.

A Mooncake record lists the ids of its prompt's 512-token blocks; equal ids at the same
position after equal ids mean equal text, so two requests whose lists start with the same k
ids share their first k x 512 prompt tokens. The simulator's prefix cache knows one shared
prefix per request (`prefix_group`, `prefix_tokens`): each request gets the longest leading
run of ids that some other request of the file also starts with, its group is that run (the
requests with the same run share it) and its shared tokens are the run's blocks, capped at
its prompt length.

What one group per request cannot say: a request whose run is (a, b) and one whose run is
(a) share block a in the real cache, but here they are different groups, so the second does
not hit the first's block a. The ids are counted along a trie (one node per distinct
prefix), so the memory is one entry per id in the file.

>>> g, t = shared_prefix_groups([(1, 2, 3), (1, 2, 9), (1, 7), (5,)], [1500, 1100, 700, 90], 512)
>>> g.tolist(), t.tolist()
([0, 0, 1, -1], [1024, 1024, 512, 0])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def shared_prefix_groups(hash_ids: Sequence[Sequence[int]],
                         prompt_tokens: Sequence[int] | np.ndarray,
                         block_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(group per request, -1 for none; shared prefix tokens per request)."""
    children: dict[tuple[int, int], int] = {}   # (parent node, block id) -> node
    count: list[int] = [0]                     # requests through each node (0: the root)
    paths: list[list[int]] = []
    for ids in hash_ids:
        node, path = 0, []
        for block in ids:
            key = (node, int(block))
            nxt = children.get(key)
            if nxt is None:
                nxt = children[key] = len(count)
                count.append(0)
            count[nxt] += 1
            node = nxt
            path.append(node)
        paths.append(path)
    n = len(paths)
    group = np.full(n, -1, dtype=np.int64)
    tokens = np.zeros(n, dtype=np.int64)
    ids_of: dict[int, int] = {}
    for i, path in enumerate(paths):
        depth = 0
        while depth < len(path) and count[path[depth]] >= 2:
            depth += 1
        if depth:
            group[i] = ids_of.setdefault(path[depth - 1], len(ids_of))
            tokens[i] = min(depth * block_tokens, max(int(prompt_tokens[i]), 0))
    return group, tokens


__all__ = ["shared_prefix_groups"]
