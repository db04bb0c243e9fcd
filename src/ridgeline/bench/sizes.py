"""Bench workloads that cannot be built are refused before the first prompt is.

Prompts are texts built in memory before the run: a prompt longer than the model's context
would be rejected by the server anyway (HTTP 400), and a pool of them can fill the memory.

- Each request's prompt + output tokens: at most the emulated model's context window
  (`--target emulator`), or MAX_URL_PROMPT_TOKENS against a URL (whose model ridgeline does
  not know; no served model in the catalog has a longer window but Llama 4 Scout).
- The prompt pool (every request's text, built up front): within the memory budget at
  BYTES_PER_PROMPT_TOKEN plus BYTES_PER_REQUEST each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ridgeline.bench.load import POOL_LIMIT
from ridgeline.errors import RidgelineError
from ridgeline.sizes import check_fits
from ridgeline.specs import load_model

MAX_URL_PROMPT_TOKENS = 1_048_576
BYTES_PER_PROMPT_TOKEN = 12    # ~5 characters of text, plus its token ids when tokenized
BYTES_PER_REQUEST = 2048       # the request, its trace record and its timings


def _window(model: str | None) -> tuple[int, str]:
    if model is None:
        return MAX_URL_PROMPT_TOKENS, ("ridgeline's limit for a URL target (its model's "
                                       "window is unknown)")

    try:
        spec = load_model(model)
    except RidgelineError:
        return MAX_URL_PROMPT_TOKENS, "ridgeline's limit"
    window = int(getattr(spec, "max_position_embeddings", 0) or 0) or MAX_URL_PROMPT_TOKENS
    return window, f"{spec.name}'s context window"


def check_bench_sizes(prompt: Any, output: Any, replay: Any, requests: int | None,
                      prefix_tokens: int, model: str | None, calibrated: bool) -> None:
    """Refuse (one line) prompts past the window and a prompt pool past the memory."""
    window, what = _window(None if calibrated else model)
    if replay is not None:
        n = min(requests or len(replay.times_s), len(replay.times_s))
        p = np.asarray(replay.prompt_tokens[:n], dtype=np.int64)
        o = np.asarray(replay.output_tokens[:n], dtype=np.int64)
        longest = int((p + o).max()) if n else 0
        if longest > window:
            i = int(np.argmax(p + o))
            raise RidgelineError(f"--replay: request {i} has {int(p[i]):,} + {int(o[i]):,} "
                                 f"tokens; allowed: prompt + output <= {window:,} ({what})")
        total_tokens = float(p.sum())
    else:
        hi_p = prompt.max_tokens if prompt.max_tokens is not None else None
        longest_prompt = (hi_p if hi_p is not None else prompt.mean_tokens) + prefix_tokens
        longest_out = 0.0
        if output is not None:
            longest_out = output.max_tokens if output.max_tokens is not None \
                else output.mean_tokens
        # A bound length (fixed, or a max) is checked as is; an unbounded distribution
        # only when its mean is already past the window (its tail is clipped at 10M).
        bounded = prompt.kind == "fixed" or hi_p is not None or prompt.mean_tokens > window
        if bounded and longest_prompt + longest_out > window:
            raise RidgelineError(
                f"--prompt/--output: {longest_prompt:,.0f} + {longest_out:,.0f} tokens; "
                f"allowed: prompt + output <= {window:,} ({what})")
        n = max(POOL_LIMIT, requests or 0)
        total_tokens = n * (prompt.mean_tokens + prefix_tokens)
    per = BYTES_PER_REQUEST + (total_tokens / max(n, 1)) * BYTES_PER_PROMPT_TOKEN
    check_fits(n * per, "--requests", f"building {n:,} prompts ({total_tokens:,.0f} tokens)",
               per_unit_bytes=per, unit="requests", advice="lower --requests or the lengths")


__all__ = ["MAX_URL_PROMPT_TOKENS", "check_bench_sizes"]
