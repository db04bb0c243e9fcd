"""A request as the engine sees it: what was asked (`EngineRequest`) and its state (`Sequence`).

Token accounting follows vLLM's V1 engine. A sequence knows `num_tokens` = prompt + output
tokens generated so far, and `num_computed` = tokens whose KV is in the cache. A step computes
some of the missing tokens; when none are missing after it, the step samples one new token
(emits it). So the step that completes a prefill emits the first output token, each decode step
computes one token and emits one, and the last output token's KV is never written: a finished
request held at most prompt + output - 1 tokens of KV.

While a sequence is decoding, its counters are *lazy*: it joined the decode set at step
`join_step` having generated `g_join` tokens, and at step n its context is `a + n` tokens
(a = tokens computed after the join step - join_step - 1). Nothing is touched per token.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

WAITING, PREFILL, DECODE, FINISHED, ABORTED, REJECTED = range(6)
STATE_NAMES = ("waiting", "prefill", "decode", "finished", "aborted", "rejected")


@dataclass
class EngineRequest:
    """One request handed to the engine.

    `prefix_group`/`prefix_tokens` (the simulator, which has no text): the first
    `prefix_tokens` prompt tokens are identical for
    every request of the group (a system prompt, a shared document): prefix caching can reuse
    their KV. `kv_ready_tokens`/`generated_tokens` let a decode instance of a prefill/decode
    split accept a request whose prompt KV was transferred and whose first token was already
    emitted by the prefill instance.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0
    prefix_group: Hashable | None = None
    prefix_tokens: int = 0
    kv_ready_tokens: int = 0
    generated_tokens: int = 0
    # Content keys of the prompt's full KV blocks (chained hashes of their token ids, as
    # vLLM's prefix cache keys them; see kv_cache.block_hashes). When given they replace
    # `prefix_group`: every full block of the prompt can be shared with any request whose
    # prompt starts with the same tokens.
    block_hashes: tuple[Hashable, ...] | None = None
    # Set by the engine at the first admission: prompt tokens served from the prefix cache
    # (the emulator reports it as usage.prompt_tokens_details.cached_tokens, as vLLM does).
    cached_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: prompt and output tokens must be >= 1")
        if not 0 <= self.prefix_tokens <= self.prompt_tokens:
            raise ValueError(f"request {self.request_id}: prefix_tokens must be in "
                             f"[0, prompt_tokens]")
        if not 0 <= self.generated_tokens < self.output_tokens:
            raise ValueError(f"request {self.request_id}: generated_tokens must be in "
                             f"[0, output_tokens)")
        if not 0 <= self.kv_ready_tokens <= self.prompt_tokens + self.generated_tokens:
            raise ValueError(f"request {self.request_id}: kv_ready_tokens too large")


class Sequence:
    """Mutable engine state of one request (plain attributes, no behaviour)."""

    __slots__ = (
        "a",
        "admit_order",
        "arrival_s",
        "block_keys",
        "fill_tokens",
        "finish_step",
        "g",
        "g_join",
        "join_step",
        "max_prefix_blocks",
        "num_computed",
        "output_tokens",
        "own_cached",
        "preemptions",
        "prefix_group",
        "prompt_tokens",
        "req",
        "request_id",
        "seg_start",
        "segments",
        "shared",
        "state",
    )

    def __init__(self, req: EngineRequest, block_size_tokens: int) -> None:
        self.req = req
        self.request_id = req.request_id
        self.arrival_s = req.arrival_s
        self.prompt_tokens = req.prompt_tokens
        self.output_tokens = req.output_tokens
        self.g = req.generated_tokens          # output tokens generated (exact unless DECODE)
        self.num_computed = req.kv_ready_tokens
        self.prefix_group = req.prefix_group
        self.block_keys = req.block_hashes
        if req.block_hashes:
            # Keys may run past the prompt (the emulator also names the reply's blocks); a
            # lookup never goes past the prompt (the scheduler caps it at num_tokens - 1).
            self.max_prefix_blocks = len(req.block_hashes)
        else:
            self.max_prefix_blocks = (req.prefix_tokens // block_size_tokens
                                      if req.prefix_group is not None else 0)
        self.state = WAITING
        self.admit_order = -1
        self.shared: list[tuple[Hashable, int]] = []   # cached prefix blocks held, in order
        self.segments: list[tuple[int, int]] = []      # (first, last) step index of emissions
        self.seg_start = -1
        self.join_step = -1
        self.g_join = 0
        self.a = 0
        self.finish_step = -1
        self.preemptions = 0
        # Tokens its last prefill computed (SGLang's radix tree holds them once it is done),
        # and whether a retraction left blocks of its own in the prefix cache.
        self.fill_tokens = 0
        self.own_cached = False

    @property
    def may_have_cached_prefix(self) -> bool:
        """Whether the prefix cache can hold blocks this sequence starts from: a shared
        prefix it names, or blocks of its own that a retraction left cached."""
        return bool(self.max_prefix_blocks or self.own_cached)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (valid outside the lazy decode state)."""
        return self.prompt_tokens + self.g


@dataclass
class StepOutcome:
    """What one scheduled step did (internal; Engine turns it into a StepResult)."""

    duration_s: float = 0.0
    prefill_tokens: int = 0
    prefill_seqs: int = 0
    decode_seqs: int = 0
    decode_ids: list[str] = field(default_factory=list)     # only when collecting
    first_tokens: list[str] = field(default_factory=list)   # prefill completions that emitted
    finished: list[Sequence] = field(default_factory=list)
    preempted: list[Sequence] = field(default_factory=list)

