"""The engine's step-time interface: the one function that times an engine step.

`estimate`, `simulate` and `serve` all get the duration of an engine step from an object
implementing `StepTimeModel` (one step-time function:
docs/architecture.md#one-step-time-function). The
roofline perf model implements it; a calibrated profile may replace it; tests may use
`LinearStepTime`, whose coefficients are explicit.

A step's work is described by `BatchWork`, a handful of sums over the batch (so a
mixed batch of prefill chunks and decode sequences is one call, and arrays of each field
evaluate many steps at once with numpy broadcasting):

- prefill_tokens: new prompt tokens computed this step (sum of chunk lengths c_i)
- prefill_attn_pairs: causal query-key pairs of those chunks,
  sum_i c_i * p_i + c_i * (c_i + 1) / 2, where p_i is the chunk's already-computed
  (or prefix-cached) context
- prefill_context_tokens: sum_i p_i, the cached KV tokens the chunks' attention reads
- prefill_seqs: number of prefill chunks in the step
- decode_seqs: sequences generating one token this step
- decode_context_tokens: sum over decode sequences of their context length T_j (KV tokens
  read; the new token's KV is written on top)

See docs/engine.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

ArrayLike = float | int | np.ndarray


@dataclass(frozen=True)
class BatchWork:
    """What one engine step computes. Each field may be a scalar or a numpy array."""

    prefill_tokens: ArrayLike = 0
    prefill_attn_pairs: ArrayLike = 0
    prefill_context_tokens: ArrayLike = 0
    prefill_seqs: ArrayLike = 0
    decode_seqs: ArrayLike = 0
    decode_context_tokens: ArrayLike = 0

    @staticmethod
    def for_chunks(
        chunk_tokens: list[int] | np.ndarray,
        chunk_context_tokens: list[int] | np.ndarray,
        decode_contexts: list[int] | np.ndarray,
    ) -> BatchWork:
        """Build the work of one step from its prefill chunks and decode contexts."""
        c = np.asarray(chunk_tokens, dtype=np.float64)
        p = np.asarray(chunk_context_tokens, dtype=np.float64)
        t = np.asarray(decode_contexts, dtype=np.float64)
        return BatchWork(
            prefill_tokens=float(c.sum()),
            prefill_attn_pairs=float((c * p + c * (c + 1) / 2).sum()),
            prefill_context_tokens=float(p.sum()),
            prefill_seqs=float(c.size),
            decode_seqs=float(t.size),
            decode_context_tokens=float(t.sum()),
        )


class StepTimeModel(Protocol):
    """Anything that can time an engine step."""

    def step_time_s(self, work: BatchWork) -> ArrayLike:
        """Seconds the step takes (broadcast over array fields)."""
        ...


@dataclass(frozen=True)
class LinearStepTime:
    """A step-time model with explicit linear coefficients (tests, calibrated fits).

    time = base_s + per_prefill_token_s * prefill_tokens + per_attn_pair_s * prefill_attn_pairs
           + per_decode_seq_s * decode_seqs + per_context_token_s * (decode_context_tokens
           + prefill_context_tokens); a step with no work takes 0 s.
    """

    base_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_attn_pair_s: float = 0.0
    per_decode_seq_s: float = 0.0
    per_context_token_s: float = 0.0

    def step_time_s(self, work: BatchWork) -> ArrayLike:
        busy = (np.asarray(work.prefill_tokens) + np.asarray(work.decode_seqs)) > 0
        t = (
            self.base_s
            + self.per_prefill_token_s * np.asarray(work.prefill_tokens, dtype=np.float64)
            + self.per_attn_pair_s * np.asarray(work.prefill_attn_pairs, dtype=np.float64)
            + self.per_decode_seq_s * np.asarray(work.decode_seqs, dtype=np.float64)
            + self.per_context_token_s
            * (
                np.asarray(work.decode_context_tokens, dtype=np.float64)
                + np.asarray(work.prefill_context_tokens, dtype=np.float64)
            )
        )
        out = np.where(busy, t, 0.0)
        return float(out) if out.ndim == 0 else out
