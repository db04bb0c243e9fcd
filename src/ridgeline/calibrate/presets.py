"""Engine scheduling presets: how a real engine batches, in ridgeline's EngineConfig terms.

llama.cpp (tools/server/server-context.cpp, `update_slots`, read for version 0.3.36 of the
llama-cpp-python sdist): each loop iteration builds one batch: first one token for every
generating slot, then prompt tokens of slots still processing their prompt, in slot order,
until the batch holds `n_batch` tokens (default 2048); a prompt longer than what is left is
split across iterations (continuous batching is on by default). So a new prompt does not
pause running decodes: its tokens join their step, and that step takes longer. Requests that
arrive together are prefilled in one batch. `llama_decode` then runs the batch as graphs of
at most `n_ubatch` tokens (default 512). The number of slots (`-np`) bounds the running
requests; others wait in the server's queue. That is vLLM V1's chunked-prefill policy with
max_num_seqs = slots and max_num_batched_tokens = n_batch, plus the ubatch split, which the
profile's step time applies. Differences left: llama.cpp fills prompts in slot order, not
arrival order, and reserves n_ctx/np KV cells per slot (no preemption).
"""

from __future__ import annotations

from ridgeline.errors import RidgelineError
from ridgeline.sim.calibrated_profile import Scheduling

PRESETS = ("vllm", "llama.cpp")


def preset_scheduling(preset: str, slots: int | None = None, n_batch: int = 2048,
                      n_ubatch: int = 512, kv_unified: bool = False,
                      max_num_batched_tokens: int | None = None,
                      block_size_tokens: int = 16) -> Scheduling:
    """Scheduling of a named engine; `slots` is llama.cpp's -np / vLLM's max_num_seqs;
    `kv_unified`: llama.cpp runs with -kvu (one KV stream: one graph per ubatch);
    `max_num_batched_tokens` and `block_size_tokens`: vLLM's (default 8192 and 16)."""
    if preset == "llama.cpp":
        np_slots = slots or 1
        per_slot = not kv_unified and np_slots > 1
        graph_note = ("llama.cpp -np N (per-slot KV, no -kvu): each request gets the LRU "
                      "slot; split_equal(sequential) runs one graph per run of consecutive "
                      "slot ids, prompt tokens apart from decodes" if per_slot else
                      "llama.cpp with one KV stream (-kvu or -np 1): split_simple, one graph "
                      "per n_ubatch tokens")
        return Scheduling(
            preset="llama.cpp", max_num_seqs=np_slots,
            max_num_batched_tokens=max(n_batch, np_slots), chunked_prefill=True,
            enable_prefix_caching=False, block_size_tokens=16,
            ubatch_tokens=min(n_ubatch, n_batch), prefill_own_graph=per_slot,
            slot_graphs=per_slot,
            notes=[graph_note,
                   "llama.cpp update_slots: decode tokens first, then prompt tokens up to "
                   "n_batch (prompts split across steps); graphs of n_ubatch tokens",
                   "prompts fill in slot order (ridgeline: arrival order); KV per slot "
                   "n_ctx/np (ridgeline: one shared pool)"])
    if preset == "vllm":
        return Scheduling(preset="vllm", max_num_seqs=slots or 256,
                          max_num_batched_tokens=max_num_batched_tokens or 8192,
                          chunked_prefill=True, enable_prefix_caching=True,
                          block_size_tokens=block_size_tokens,
                          notes=["vLLM V1 defaults: chunked prefill, prefix caching"])
    raise RidgelineError(f"--preset: got {preset!r}; allowed: {', '.join(PRESETS)}")


__all__ = ["PRESETS", "preset_scheduling"]
