"""What-ifs on the step-time model: speculative decoding, eager mode (no CUDA graphs), and the
CPU stages of the request path.

`WhatIfStepTime(base, whatif)` implements the same step-time interface as the roofline model,
so estimate, simulate and serve take it unchanged (docs/architecture.md#one-step-time-function).

Speculative decoding (draft length k, per-token acceptance rate alpha, tokens accepted
independently): a verify step yields E = (1 - alpha^(k+1)) / (1 - alpha) tokens per sequence
on average (k + 1 when alpha = 1). The seeds give no formula; this is the standard one
(Leviathan et al. 2023). One speculative round costs the target model's forward over k + 1
tokens per sequence (a prefill-like chunk on top of the sequence's context, with logits for
all k + 1 positions: b(k+1) rows of the LM head, since every draft position is checked) plus k
decode steps of the draft model. The simulator's engine emits one token per sequence per step, so
the round is booked mean-field: a step's decode share takes (round time) / E, i.e. the time
per emitted token. Caveats: with quantization, speculation amplifies accuracy risk;
with continuous batching, sequences of one step advance by different token counts — the mean
hides that per-step variance. A mixed step's prefill chunks are not speculative: they cost
their own time once, only the decode share is divided by E.

The decode-throughput ceiling, min(B C / F_dec, B beta / D_dec), becomes for a speculative round
B E / (max(F_v / C, D_v / beta) + k max(F_d / C, D_d / beta)) (verify pass v, draft step d):
the tokens of one round over the round's shortest possible time.

Eager mode (`--enforce-eager`): the hardware files' per-kernel overhead assumes CUDA graphs
(~2 us per kernel); without them each launch costs `EAGER_OVERHEAD_FACTOR` times that (a
ridgeline assumption: CPU launch latency of a few microseconds plus Python dispatch).

CPU stages (the request pipeline: Tokenize -> Prefill -> Decode loop -> Sampling ->
Detokenize): tokenizing costs `cpu_tokenize_us_per_token` per prompt token and detokenizing
`cpu_detokenize_us_per_event` per streamed output event. A choice: they run serially with the
engine loop (one process, as vLLM before V1's multi-process front end), so they add to the step
that prefills those tokens or emits those events. A CPU-bound front end then shows up as longer
steps. `ridgeline calibrate` may measure the two costs; they are parameters here.

>>> expected_tokens_per_step(4, 0.8)
3.3616
>>> round(expected_tokens_per_step(3, 1.0), 6)
4.0
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ridgeline.errors import RidgelineError
from ridgeline.perf.roofline_step import RooflineStepTime
from ridgeline.perf.step_time import ArrayLike, BatchWork
from ridgeline.specs import load_hardware, load_model
from ridgeline.specs.parallel import Parallelism

EAGER_OVERHEAD_FACTOR = 4.0


def expected_tokens_per_step(k: int, alpha: float) -> float:
    """Expected tokens a verify step yields per sequence: (1 - a^(k+1)) / (1 - a)."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class WhatIf:
    """Engine-level what-ifs; the default changes nothing."""

    spec_k: int = 0
    spec_alpha: float = 0.7
    spec_draft_model: str | None = None
    enforce_eager: bool = False
    cpu_tokenize_us_per_token: float = 0.0
    cpu_detokenize_us_per_event: float = 0.0

    def validate(self) -> WhatIf:
        if self.spec_k < 0:
            raise RidgelineError(f"--spec-k: got {self.spec_k}; allowed: >= 0 (0: off)")
        if not 0.0 <= self.spec_alpha <= 1.0:
            raise RidgelineError(f"--spec-alpha: got {self.spec_alpha}; allowed: 0..1")
        if self.cpu_tokenize_us_per_token < 0 or self.cpu_detokenize_us_per_event < 0:
            raise RidgelineError("--cpu-tokenize-us-per-token/--cpu-detokenize-us-per-event: "
                                 "allowed: >= 0")
        if self.spec_draft_model is not None and self.spec_k == 0:
            raise RidgelineError("--spec-draft-model: needs --spec-k >= 1")
        return self

    @property
    def is_identity(self) -> bool:
        return (self.spec_k == 0 and not self.enforce_eager
                and self.cpu_tokenize_us_per_token == 0
                and self.cpu_detokenize_us_per_event == 0)

    @property
    def changes_step(self) -> bool:
        """Whether the step-time function itself needs wrapping (eager mode does not: it is a
        kernel-overhead parameter of the roofline model)."""
        return (self.spec_k > 0 or self.cpu_tokenize_us_per_token > 0
                or self.cpu_detokenize_us_per_event > 0)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.spec_k:
            out.update(spec_k=self.spec_k, spec_alpha=self.spec_alpha,
                       spec_draft_model=self.spec_draft_model,
                       spec_tokens_per_step=expected_tokens_per_step(self.spec_k,
                                                                     self.spec_alpha))
        if self.enforce_eager:
            out["enforce_eager"] = True
        if self.cpu_tokenize_us_per_token:
            out["cpu_tokenize_us_per_token"] = self.cpu_tokenize_us_per_token
        if self.cpu_detokenize_us_per_event:
            out["cpu_detokenize_us_per_event"] = self.cpu_detokenize_us_per_event
        return out

    def assumptions(self) -> list[str]:
        out = []
        if self.spec_k:
            e = expected_tokens_per_step(self.spec_k, self.spec_alpha)
            draft = (f"draft model {self.spec_draft_model} ({self.spec_k} decode steps per "
                     "round)" if self.spec_draft_model else "draft cost 0 (n-gram/self-"
                     "speculation)")
            out.append(f"speculative decoding: k={self.spec_k}, alpha={self.spec_alpha:g} "
                       f"-> {e:.3g} tokens per verify step (1-a^(k+1))/(1-a); verify = target "
                       f"forward on k+1 tokens per sequence; {draft}; booked per emitted token "
                       "(mean-field); caveats: accuracy risk with quantization, uneven "
                       "per-sequence progress under continuous batching")
        if self.enforce_eager:
            out.append(f"eager mode: per-kernel overhead x {EAGER_OVERHEAD_FACTOR:g} (no CUDA "
                       "graphs)")
        if self.cpu_tokenize_us_per_token or self.cpu_detokenize_us_per_event:
            out.append(f"CPU front end serial with the engine loop: tokenize "
                       f"{self.cpu_tokenize_us_per_token:g} us/prompt token, detokenize "
                       f"{self.cpu_detokenize_us_per_event:g} us/output event")
        return out


def _as(x: ArrayLike) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


class WhatIfStepTime:
    """A step-time model with the what-ifs applied on top of `base` (see module docstring).

    Forwards every other attribute (memory, describe, kv_bytes_per_token, ...) to `base`.
    """

    def __init__(self, base: Any, whatif: WhatIf, draft: Any = None) -> None:
        self.base = base
        self.whatif = whatif
        self.draft = draft
        self.tokens_per_step = expected_tokens_per_step(whatif.spec_k, whatif.spec_alpha)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.base, name)

    def assumptions(self) -> list[str]:
        return [*self.base.assumptions(), *self.whatif.assumptions()]

    def verify_work(self, work: BatchWork) -> BatchWork:
        """`work` with each decode sequence turned into a verify chunk of k+1 tokens on its
        context. prefill_seqs counts the rows of logits (its only use in the roofline model):
        one per prefill chunk, k+1 per verified sequence."""
        b, c = _as(work.decode_seqs), _as(work.decode_context_tokens)
        q = self.whatif.spec_k + 1
        return BatchWork(
            prefill_tokens=_as(work.prefill_tokens) + b * q,
            prefill_attn_pairs=_as(work.prefill_attn_pairs) + q * c + b * q * (q + 1) / 2,
            prefill_context_tokens=_as(work.prefill_context_tokens) + c,
            prefill_seqs=_as(work.prefill_seqs) + b * q)

    def speculative_round_s(self, decode_seqs: ArrayLike, decode_context_tokens: ArrayLike
                            ) -> ArrayLike:
        """Seconds of one speculative round for a decode batch: the target's verify pass over
        k+1 tokens per sequence plus k draft decode steps."""
        k = self.whatif.spec_k
        b, c = _as(decode_seqs), _as(decode_context_tokens)
        verify = self.verify_work(BatchWork(decode_seqs=b, decode_context_tokens=c))
        t = _as(self.base.step_time_s(verify))
        if self.draft is not None:
            t = t + k * _as(self.draft.step_time_s(BatchWork(decode_seqs=b,
                                                             decode_context_tokens=c)))
        return np.where(b > 0, t, 0.0)

    def step_time_s(self, work: BatchWork) -> ArrayLike:
        w = self.whatif
        if w.spec_k > 0:
            # Prefill share at its own cost; the decode share per emitted token: the whole
            # mixed step's time with verify chunks, less the prefill-only time, over E.
            pre = BatchWork(prefill_tokens=work.prefill_tokens,
                            prefill_attn_pairs=work.prefill_attn_pairs,
                            prefill_context_tokens=work.prefill_context_tokens,
                            prefill_seqs=work.prefill_seqs)
            b, c = _as(work.decode_seqs), _as(work.decode_context_tokens)
            mixed = self.verify_work(work)
            t_pre = _as(self.base.step_time_s(pre))
            t_mix = _as(self.base.step_time_s(mixed))
            if self.draft is not None:
                t_mix = t_mix + w.spec_k * _as(self.draft.step_time_s(
                    BatchWork(decode_seqs=b, decode_context_tokens=c)))
            t = np.where(b > 0, t_pre + (t_mix - t_pre) / self.tokens_per_step, t_pre)
        else:
            t = _as(self.base.step_time_s(work))
        cpu_s = (w.cpu_tokenize_us_per_token * _as(work.prefill_tokens)
                 + w.cpu_detokenize_us_per_event
                 * (_as(work.decode_seqs) + _as(work.prefill_seqs))) * 1e-6
        busy = (_as(work.prefill_tokens) + _as(work.decode_seqs)) > 0
        out = np.where(busy, t + cpu_s, 0.0)
        return float(out) if out.ndim == 0 else out


    def decode_ceiling_tok_s(self, decode_seqs: ArrayLike, decode_context_tokens: ArrayLike
                             ) -> ArrayLike | None:
        """The decode-throughput ceiling for a speculative round (module docstring): B E over
        the round's roofline bound. None without speculation or without a roofline base."""
        if self.whatif.spec_k <= 0 or not hasattr(self.base, "breakdown"):
            return None
        b, c = _as(decode_seqs), _as(decode_context_tokens)
        t = _roofline_bound_s(self.base, self.verify_work(
            BatchWork(decode_seqs=b, decode_context_tokens=c)))
        if self.draft is not None:
            if not hasattr(self.draft, "breakdown"):
                return None
            t = t + self.whatif.spec_k * _roofline_bound_s(
                self.draft, BatchWork(decode_seqs=b, decode_context_tokens=c))
        with np.errstate(divide="ignore", invalid="ignore"):
            return b * self.tokens_per_step / t


def _roofline_bound_s(model: Any, work: BatchWork) -> np.ndarray:
    """max(F / C_eff, D / beta_eff) of a whole step (the roofline bound, no overheads)."""
    bd = model.breakdown(work)
    c_eff = model.gemm_peak_flops * model.hardware.compute_efficiency
    return np.maximum(bd.flops.sum(axis=0) / c_eff, bd.bytes.sum(axis=0)
                      / model.bandwidth_eff_bytes_s)


def apply_whatif(base: Any, whatif: WhatIf | None) -> Any:
    """`base` with the what-ifs applied (eager mode must already be in its kernel overhead;
    see `kernel_overhead_for`). Builds the draft model on the same hardware, precision and
    TP as the target."""
    if whatif is None or not whatif.changes_step:
        return base
    draft = None
    if whatif.spec_draft_model:
        draft = RooflineStepTime(load_model(whatif.spec_draft_model), base.hardware,
                                 base.precision, Parallelism(tp=base.parallel.tp),
                                 base.max_num_batched_tokens, base.max_num_seqs,
                                 engine=getattr(base, "engine", "vllm"))
    return WhatIfStepTime(base, whatif, draft)


def kernel_overhead_for(hardware: str, kernel_overhead_us: float | None,
                        whatif: WhatIf | None) -> float | None:
    """The per-kernel overhead to build the roofline model with: eager mode multiplies the
    (given or catalog) graph-mode overhead by EAGER_OVERHEAD_FACTOR."""
    if whatif is None or not whatif.enforce_eager:
        return kernel_overhead_us
    if kernel_overhead_us is None:
        kernel_overhead_us = load_hardware(hardware).kernel_overhead_us
    return kernel_overhead_us * EAGER_OVERHEAD_FACTOR


__all__ = ["EAGER_OVERHEAD_FACTOR", "WhatIf", "WhatIfStepTime", "apply_whatif",
           "expected_tokens_per_step", "kernel_overhead_for"]
