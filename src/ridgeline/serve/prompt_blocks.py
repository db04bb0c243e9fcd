"""The emulator's prefix-cache keys: a prompt's token ids cut into full KV blocks, hashed.

vLLM names a cached KV block by a hash of its token ids chained with the previous block's
hash, so a prompt reuses exactly the leading full blocks it shares with a cached prompt.
The emulator does the same with the token ids of its own tokenizer (cl100k_base, or
4-character pieces under the approximation), so a load generator that sends repeated or
shared-prefix prompts sees the cache hits a real server would give, and one that sends
unique prompts sees none.

A chat prompt is keyed as its messages in order (role, then content), which is what a chat
template renders ahead of the reply; a prompt given as token ids is keyed by those ids.
"""

from __future__ import annotations

from typing import Any

from ridgeline.serve.tokenizer import filler_text
from ridgeline.sim.kv_cache import block_hashes


def text_ids(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` (4-character pieces when the tokenizer is the approximation)."""
    encoder = getattr(tokenizer, "_encoder", None)
    if encoder is not None:
        return list(encoder.encode_ordinary(text))
    ids_fn = getattr(tokenizer, "ids", None)
    if ids_fn is not None:
        return list(ids_fn(text))
    # Approximation: one "token" per 4 characters, as PromptTokenizer.count counts them.
    return [hash(text[i:i + 4]) & 0xFFFFFFFF for i in range(0, len(text), 4)]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def prompt_token_ids(tokenizer: Any, req: Any) -> list[int]:
    """The ids a request's prompt is keyed by (completion prompt or chat messages)."""
    messages = getattr(req, "messages", None)
    if messages is not None:
        ids: list[int] = []
        for m in messages:
            d = m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m)
            ids.extend(text_ids(tokenizer, f"<|{d.get('role', '')}|>"))
            ids.extend(text_ids(tokenizer, _content_text(d.get("content"))))
        # The generation prompt: the reply follows an assistant marker, as a chat template
        # renders it, so the next turn (which carries this reply) shares its blocks.
        ids.extend(text_ids(tokenizer, "<|assistant|>"))
        return ids
    prompt = getattr(req, "prompt", None)
    if isinstance(prompt, str):
        return text_ids(tokenizer, prompt)
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int):
            return [int(t) for t in prompt]
        if isinstance(first, str):
            return text_ids(tokenizer, first)
        if isinstance(first, list):
            return [int(t) for t in first]
    return []


def prompt_block_hashes(tokenizer: Any, req: Any, block_size_tokens: int,
                        output_tokens: int = 0) -> tuple[int, ...]:
    """Chained content hashes of the full blocks of the prompt followed by the reply the
    emulator will stream (its filler text), as vLLM names the blocks of both: the engine
    looks up only the prompt's and caches the reply's when the request finishes."""
    ids = prompt_token_ids(tokenizer, req)
    if output_tokens > 1:  # the last output token's KV is never written
        ids = ids + text_ids(tokenizer, filler_text(0, output_tokens - 1))
    return block_hashes(ids, block_size_tokens)


__all__ = ["prompt_block_hashes", "prompt_token_ids", "text_ids"]
